"""A hostile server cannot hang a replay, fill its memory or fill the store.

Every case is a real HTTP server on 127.0.0.1 (``tests/misbehaving_llm.py``) that never
holds its body in memory: a body dripping one byte a second, headers dripping one byte a
second, no answer at all, a 2 GiB body with its length announced or chunked, a gzip body
that inflates to 2 GiB, and a 429 that asks for a minute's wait. Against each, with a
deadline of 2 s per attempt and one retry:

* ``soapwb replay`` in a process of its own (all of them at once) gives up well within the
  bound a user can work out from its options, exits 1 with one ``FAILED`` line naming the
  limit that stopped it, peaks at a bounded resident size (its own ``VmHWM`` at exit,
  which starts at its exec: ``wait4``'s ``ru_maxrss`` also counts the pages the fork
  shared with this test process, so it measured the suite's size, not the command's; under
  an address-space limit so a regression cannot eat the machine), and leaves no file over
  1 MiB in the store, only a failed call record holding the error;
* the library path (``replay.replay`` on an ``LLMEndpoint``, what the Replay page and the
  CLI call) and the runtime (an ``invoke``) do the same in this process, their Python
  allocations traced.

The time bounds are correctness bounds, not a benchmark: two attempts of 2 s and a
backoff of under a second, timed from the server's first request (a process's start-up
is not the server's doing), and a margin to 12 s for a loaded machine. Set
``SOAPWB_HOSTILE_HUGE_BYTES`` to shrink the huge bodies (only to run these tests against
code that reads them whole, without risking the machine).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import subprocess
import sys
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import pytest

import replay
from soap_core import Store
from soap_core._catalog import CATALOG_FILE
from soap_core.runtime import AgenticObject, LLMEndpoint, LLMError, ModelSettings, Runtime, read_calls
from soapwb.cli import main
from tests.cli_process import REPO
from tests.conftest import SOAP_FIXTURE, session_dir
from tests.misbehaving_llm import GIB, MIB, MisbehavingLLM

AT = 5
"""The replayed message: display index 5 of the sample store's active context."""
DEADLINE_S = 2.0
RETRIES = 1
GIVES_UP_WITHIN_S = 12.0
"""From the first request: (RETRIES + 1) x DEADLINE_S and a backoff of at most 0.5 s, with
a wide margin for a loaded machine."""
KILL_AFTER_S = 60.0
"""A command still running then is killed (and has failed): code that hangs ends too."""
PEAK_RSS = 600 * MIB
TRACED_PEAK = 200 * MIB
"""The most Python may allocate for one failed call in this process."""
ADDRESS_SPACE = 4 * GIB
"""The child's address-space limit: a regression fails fast instead of eating the machine."""
LARGEST_FILE = MIB
HUGE = int(os.environ.get("SOAPWB_HOSTILE_HUGE_BYTES") or 2 * GIB)
LIMIT = f"{32 * MIB:,} bytes"
"""How an error names the default response limit (32 MiB)."""


@dataclass(frozen=True)
class Hostile:
    """One hostile server, and what a call against it must end with."""

    mode: str
    kind: str
    """The ``LLMError`` kind: ``... failed: <kind>: <detail>``."""
    names: tuple[str, ...]
    """Text of the error that names the limit that stopped the call."""
    attempts: int
    """Requests the server must see: a deadline is retried, an oversized body is not."""

    def __str__(self) -> str:
        return self.mode


DEADLINE = f"deadline of {DEADLINE_S:g} s"
CASES = [
    Hostile("drip", "timeout", (DEADLINE,), RETRIES + 1),
    Hostile("drip_headers", "timeout", (DEADLINE,), RETRIES + 1),
    Hostile("silent", "timeout", (DEADLINE,), RETRIES + 1),
    Hostile("huge", "response too large", (LIMIT,), 1),
    Hostile("huge_chunked", "response too large", (LIMIT,), 1),
    Hostile("gzip_bomb", "response too large", (LIMIT,), 1),
    Hostile("long_retry_after", "rate limit", ("wait 60 s", f"{DEADLINE_S:g} s timeout"), 1),
]


def largest_files(root: Path) -> list[tuple[int, str]]:
    """The store's files over LARGEST_FILE, biggest first."""
    sizes = [(p.stat().st_size, str(p.relative_to(root))) for p in root.rglob("*") if p.is_file()]
    return sorted((entry for entry in sizes if entry[0] > LARGEST_FILE), reverse=True)


def the_failed_call(root: Path, error: str) -> None:
    """The store holds one new call record: the error, and no response."""
    calls = read_calls(session_dir(root))
    failed = [c for c in calls if c.error]
    assert len(failed) == 1, f"expected one failed call record, found {[(c.id, c.error) for c in calls]}"
    assert failed[0].response is None and failed[0].error == error, failed[0]


# -- soapwb replay, in a process of its own ---------------------------------------------------


@dataclass(frozen=True)
class Measured:
    """A finished ``soapwb`` process against one server."""

    code: int
    out: str
    err: str
    seconds: float
    """From the server's first request to the process's exit (start-up is not the server's doing)."""
    peak_rss: int
    """The process's peak resident size in bytes: its own ``VmHWM`` at exit (:data:`OWN_PEAK`);
    for a process killed before it could say, ``wait4``'s ``ru_maxrss``, which counts the
    pages its fork shared with this process too."""
    requests: int
    store: Path

    def __str__(self) -> str:
        return (
            f"exit {self.code}, {self.seconds:.1f} s after the first request, peak RSS "
            f"{self.peak_rss / MIB:.0f} MiB, {self.requests} requests\n"
            f"stdout:\n{self.out}stderr:\n{self.err[-3000:]}"
        )

    def failed_line(self) -> str:
        failed = [line for line in self.out.splitlines() if "FAILED" in line]
        assert "Traceback" not in self.out + self.err, str(self)
        assert len(failed) == 1 and self.code == 1, f"expected one FAILED line and exit 1: {self}"
        return failed[0]


OWN_PEAK = """
import atexit, os, sys

def own_peak():
    status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
    with open(os.environ["SOAPWB_TEST_PEAK_FILE"], "w") as out:
        out.write(status["VmHWM"].split()[0])

atexit.register(own_peak)
from soapwb.cli import main
sys.exit(main(sys.argv[1:]))
"""
"""``python -m soapwb.cli`` that writes, at exit, the peak resident size of its own memory
(``VmHWM``, in KiB), which starts at the exec: not the test process's pages the fork shared."""


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def fixture_copy(target: Path) -> Path:
    """A writable copy of the sample store, as the ``store_copy`` fixture makes one."""
    shutil.copytree(SOAP_FIXTURE, target, ignore=shutil.ignore_patterns(f"{CATALOG_FILE}*"))
    for path in target.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


def replay_argv(base_url: str, store: Path, *extra: str) -> list[str]:
    return [
        "replay", "3f0c", "--at", str(AT), "--base-url", base_url,
        "--timeout", f"{DEADLINE_S:g}", "--retries", str(RETRIES), "--store", str(store), *extra,
    ]  # fmt: skip


COMMAND_CASES = {case.mode: case for case in CASES if case.mode != "long_retry_after"}
"""What ``soapwb replay`` runs against (a long Retry-After is tried in this process only)."""
LIMIT_FLAG = "limit-flag"
"""One more run: a 2 MiB answer with ``--max-response-mb 1``."""


@pytest.fixture(scope="module")
def replays(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Measured]:
    """``soapwb replay`` against each hostile server, all at once (as ``tests/cli_process.py``
    runs the command line: this checkout, no $SOAPWB_STORE), each child under an address-space
    limit, killed after KILL_AFTER_S, each saying its own peak RSS at exit."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for name in ("SOAPWB_STORE", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        env.pop(name, None)
    runs: dict[str, tuple[str, tuple[str, ...]]] = {mode: (mode, ()) for mode in COMMAND_CASES}
    runs[LIMIT_FLAG] = ("huge", ("--max-response-mb", "1"))
    results: dict[str, Measured] = {}
    with contextlib.ExitStack() as stack:
        started: dict[str, tuple[subprocess.Popen[bytes], MisbehavingLLM, Path, Path]] = {}
        for name, (mode, extra) in runs.items():
            folder = tmp_path_factory.mktemp(name)
            server = stack.enter_context(MisbehavingLLM(mode, huge_bytes=2 * MIB if extra else HUGE))
            store = fixture_copy(folder / "store")
            with (folder / "stdout").open("wb") as out, (folder / "stderr").open("wb") as err:
                argv = replay_argv(server.base_url, store, *extra)
                proc = subprocess.Popen(
                    [sys.executable, "-c", OWN_PEAK, *argv],
                    stdout=out, stderr=err, stdin=subprocess.DEVNULL, preexec_fn=_limit_memory,
                    env={**env, "SOAPWB_TEST_PEAK_FILE": str(folder / "peak")},
                )  # fmt: skip
            started[name] = (proc, server, folder, store)
        launched = time.monotonic()
        while started:
            for name, (proc, server, folder, store) in list(started.items()):
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if not pid and time.monotonic() - launched < KILL_AFTER_S:
                    continue
                if not pid:
                    proc.kill()
                    pid, status, usage = os.wait4(proc.pid, 0)
                ended = time.monotonic()
                proc.returncode = os.waitstatus_to_exitcode(status)
                results[name] = Measured(
                    proc.returncode,
                    (folder / "stdout").read_text("utf-8", "replace"),
                    (folder / "stderr").read_text("utf-8", "replace"),
                    ended - (server.first_request_at or launched),
                    int((folder / "peak").read_text()) * 1024
                    if (folder / "peak").exists()
                    else usage.ru_maxrss * 1024,
                    server.requests,
                    store,
                )
                del started[name]
            time.sleep(0.02)
    return results


@pytest.mark.parametrize("mode", COMMAND_CASES)
def test_replay_command_against_a_hostile_server_gives_up_in_time_in_bounded_memory_naming_the_limit(
    replays: dict[str, Measured], mode: str
) -> None:
    case, result = COMMAND_CASES[mode], replays[mode]
    assert result.seconds < GIVES_UP_WITHIN_S, f"{case}: still running after {GIVES_UP_WITHIN_S} s: {result}"
    failed = result.failed_line()
    assert f"failed: {case.kind}: " in failed, f"{case}: not a {case.kind!r} error: {failed}"
    for name in case.names:
        assert name in failed, f"{case}: the error does not name the limit ({name!r}): {failed}"
    assert result.peak_rss < PEAK_RSS, f"{case}: {result}"
    assert result.requests == case.attempts, f"{case}: {result}"
    assert largest_files(result.store) == []
    the_failed_call(result.store, failed.split("FAILED: ", 1)[1].split("  (fork ")[0])


def test_the_response_limit_is_set_from_the_command_line(replays: dict[str, Measured]) -> None:
    """A 2 MiB answer (which the in-process tests read whole under the default limit) is
    refused by ``--max-response-mb 1``, unread."""
    failed = replays[LIMIT_FLAG].failed_line()
    assert f"response too large: the server announced a body of {2 * MIB:,} bytes" in failed, failed
    assert f"over the limit of {MIB:,} bytes (1 MiB)" in failed, failed


@pytest.mark.parametrize("option", ["--timeout", "--max-response-mb"])
@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "x"])
def test_a_limit_that_is_not_a_positive_number_is_a_usage_error(
    store_copy: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(replay_argv("http://127.0.0.1:9/v1", store_copy, option, value))
    err = capsys.readouterr().err
    assert exited.value.code == 2 and option in err and "a positive number" in err, err


# -- the library and the runtime, in this process -------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_replay_in_process_against_a_hostile_server_is_a_failed_run_in_time_and_bounded_memory(
    store_copy: Path, case: Hostile
) -> None:
    store = Store(store_copy)
    session = store.load_session("3f0c")
    found = replay.materialize(session, None, AT)
    with MisbehavingLLM(case.mode, huge_bytes=HUGE) as server:
        endpoint = LLMEndpoint(server.base_url, timeout=DEADLINE_S, max_retries=RETRIES)
        tracemalloc.start()
        started = time.monotonic()
        try:
            [run] = replay.replay(store, session, found, endpoint, samples=1)
        finally:
            seconds = time.monotonic() - started
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        requests = server.requests

    assert seconds < GIVES_UP_WITHIN_S, f"{case}: gave up after {seconds:.1f} s"
    assert run.error is not None and f"failed: {case.kind}: " in run.error, f"{case}: {run.error}"
    for name in case.names:
        assert name in run.error, f"{case}: the error does not name the limit ({name!r}): {run.error}"
    assert peak < TRACED_PEAK, f"{case}: {peak / MIB:.0f} MiB allocated"
    assert requests == case.attempts, f"{case}: the server saw {requests} requests"
    assert largest_files(store_copy) == []
    the_failed_call(store_copy, run.error)


class Caller(AgenticObject):
    settings = ModelSettings(max_tokens=4)


@pytest.mark.parametrize("mode", ["drip_headers", "huge_chunked"])
def test_an_invoke_against_a_hostile_server_raises_the_limit_and_records_the_call_without_a_body(
    tmp_path: Path, mode: str
) -> None:
    root = tmp_path / "store"
    with MisbehavingLLM(mode, huge_bytes=HUGE) as server:
        runtime = Runtime(root, LLMEndpoint(server.base_url, timeout=DEADLINE_S, max_retries=0))
        started = time.monotonic()
        with pytest.raises(LLMError) as failed:
            Caller(runtime=runtime, object_id="c").invoke("Hello.", thread="t")
        seconds = time.monotonic() - started

    assert seconds < GIVES_UP_WITHIN_S
    expected = "response too large" if mode == "huge_chunked" else "timeout"
    assert failed.value.kind == expected, failed.value
    assert (LIMIT if mode == "huge_chunked" else DEADLINE) in failed.value.detail, failed.value
    assert largest_files(root) == []
    [summary] = Store(root).sessions()
    calls = read_calls(summary.path)
    assert [(c.error, c.response) for c in calls] == [(str(failed.value), None)]


def test_a_body_exactly_at_the_limit_is_an_answer_and_one_byte_more_is_refused() -> None:
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    for mode in ("huge", "huge_chunked"):
        with MisbehavingLLM(mode, huge_bytes=MIB) as server:
            at_limit = LLMEndpoint(server.base_url, max_retries=0, max_response_bytes=MIB)
            answer = at_limit.complete(request).response
            assert len(answer["choices"][0]["message"]["content"]) > MIB - 200, mode
            below = LLMEndpoint(server.base_url, max_retries=0, max_response_bytes=MIB - 1)
            with pytest.raises(LLMError) as refused:
                below.complete(request)
        assert refused.value.kind == "response too large", refused.value
        assert f"{MIB - 1:,} bytes" in refused.value.detail, refused.value


def test_a_gzip_body_under_the_limit_is_inflated_into_an_answer() -> None:
    """A proxy may compress what it was not asked to: inflated a bounded piece at a time,
    it is still an answer when it fits."""
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with MisbehavingLLM("gzip_bomb", huge_bytes=MIB) as server:
        answer = LLMEndpoint(server.base_url, max_retries=0, max_response_bytes=MIB).complete(request)
        sent = server.sent
    content = answer.response["choices"][0]["message"]["content"]
    assert set(content) == {"0"} and len(content) > MIB - 200
    assert sent < MIB // 100, f"{sent:,} bytes on the wire: not compressed?"


def test_the_endpoint_answers_when_called_from_a_thread_running_an_event_loop() -> None:
    """A guard, not a defect of old: the endpoint runs each call on an event loop of its
    own, and a caller's running loop must not stop it."""
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

    async def call(endpoint: LLMEndpoint) -> str:
        return str(endpoint.complete(request).response["choices"][0]["message"]["content"])

    with MisbehavingLLM("ok") as server:
        assert asyncio.run(call(LLMEndpoint(server.base_url, max_retries=0))) == "hello"
