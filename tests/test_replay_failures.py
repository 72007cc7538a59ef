"""Every way the LLM endpoint can fail ends as a recorded failed run, never as a damaged store.

Each failure is played by a real HTTP server on the loopback (``tests/misbehaving_llm.py``)
or by a port where nothing listens, so what is tested is what the ``openai`` client really
does: which failures it retries and which exception it raises. A replay that fails must
still leave its fork (with the error) and its call record (with the error, no response),
unless it never reached the model (nothing listening: then it saves nothing), must not change one byte of what was on disk before, and ``soapwb replay`` must say
FAILED on one line and exit 1, with no traceback.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import pytest

import replay
from soap_core import REPLAY_KEY, Store
from soap_core.runtime import LLMEndpoint, read_calls
from soapwb.cli import main
from tests.conftest import CHILD_ID, SESSION_UUID, session_dir, snapshot
from tests.misbehaving_llm import MisbehavingLLM, RefusedPort

AT = 5
"""The replayed message: display index 5 of the active context (an assistant answer)."""
TIMEOUT_S = 0.5
"""The client's timeout; the server's ``timeout`` mode stalls for 2 s."""
RETRIES = 1
SCRIPT = Path(sys.executable).parent / "soapwb"


@dataclass(frozen=True)
class Failure:
    """One way the endpoint fails, and what the workbench must make of it."""

    name: str
    mode: str | None
    """The server's mode; None: nothing listens on the port (a refused connection)."""
    kind: str
    """The ``LLMError`` kind the error names (``... failed: <kind>: <detail>``)."""
    says: str
    """More text the error must hold, so the user can tell what happened."""
    retried: bool
    """Whether the client retries it (refused, timeout, 429, 5xx) or sends it once."""

    def __str__(self) -> str:
        return self.name


FAILURES = [
    Failure("refused", None, "connection", "Connection refused", retried=True),
    Failure("timeout", "timeout", "timeout", "timed out", retried=True),
    Failure("http500", "http500", "HTTP error", "HTTP 500", retried=True),
    Failure("rate_limit", "rate_limit", "rate limit", "HTTP 429", retried=True),
    Failure("malformed_json", "malformed_json", "malformed response", "", retried=False),
    Failure("no_choices", "no_choices", "malformed response", "no choices", retried=False),
    Failure("wrong_shape", "wrong_shape", "malformed response", "has no message", retried=False),
    Failure("null_message", "null_message", "malformed response", "has no message", retried=False),
    Failure("text_message", "text_message", "malformed response", "", retried=False),
    Failure(
        "json_not_object", "json_not_object", "malformed response", "not a chat completion", retried=False
    ),
    Failure("html_page", "html_page", "malformed response", "not a chat completion", retried=False),
]
KINDS = [
    pytest.param(
        failure,
        id=failure.name,
        # the openai client warns while it dumps a message that is a string; expected here
        marks=pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning"),
    )
    for failure in FAILURES
]


class Target(Protocol):
    """What a test needs of a failing endpoint: where it is, and how often it was tried."""

    @property
    def base_url(self) -> str: ...

    @property
    def requests(self) -> int: ...


@contextlib.contextmanager
def failing_endpoint(failure: Failure, monkeypatch: pytest.MonkeyPatch) -> Iterator[Target]:
    """A running server in the failure's mode, or a watched port where nothing listens."""
    if failure.mode is None:
        yield RefusedPort(monkeypatch)
        return
    with MisbehavingLLM(failure.mode) as server:
        yield server


def expected_requests(failure: Failure, retries: int = RETRIES) -> int:
    return retries + 1 if failure.retried else 1


def assert_failed(failure: Failure, ok: bool, error: str | None, output: Any) -> None:
    """The run failed and its error names the kind; says where the bug is, for a known one."""
    assert not ok and error is not None, (
        f"{failure.name}: the replay was recorded as a success with output {output!r}; "
        f"expected a failed run whose error names {failure.kind!r}"
    )
    assert f"{failure.kind}: " in error, error
    assert failure.says in error, error


def new_files(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    """The files added since ``before``, after proving every earlier file is unchanged."""
    changed = sorted(name for name in before if after.get(name) != before[name])
    assert changed == [], f"files rewritten or removed by a failed replay: {changed}"
    return sorted(set(after) - set(before))


def assert_store_intact(root: Path, before: dict[str, bytes], runs: list[replay.ReplayRun]) -> None:
    """Only each run's fork file and call record are new; the store lists, loads and verifies."""
    folder = session_dir(root).relative_to(root)
    kept = [r for r in runs if r.saved]  # a run that never reached the model saves nothing
    expected = [str(folder / f"{r.fork_id}.json") for r in kept]
    expected += [str(folder / "calls" / f"{r.call_id}.json") for r in kept]
    assert new_files(before, snapshot(root)) == sorted(expected)

    store = Store(root)
    assert [(s.uuid, s.broken) for s in store.sessions()] == [(SESSION_UUID, False)]
    session = store.load_session("3f0c")
    assert session.load_errors == {}
    assert session.active_context_id == CHILD_ID
    mismatches = [v.as_dict() for v in replay.verify_store(store) if not v.match]
    assert mismatches == []


def assert_failure_recorded(root: Path, found: replay.Materialized, run: replay.ReplayRun) -> None:
    """The fork holds the request's messages and the error; the call record, the error only.
    A run that never reached the model saves neither."""
    directory = session_dir(root)
    session = Store(root).load_session("3f0c")
    if not run.saved:
        assert run.fork_id not in session.contexts
        assert [c for c in read_calls(directory) if c.id == run.call_id] == []
        return
    fork = session.contexts[run.fork_id]
    assert fork.origin_context_id == found.context_id
    assert [m.id for m in fork.messages] == [m.id for m in found.messages], "the fork got an answer"
    record = fork.extra.get(REPLAY_KEY, {})
    assert record.get("error") == run.error, f"the fork's {REPLAY_KEY} record lost the error: {record}"
    assert record["of_index"] == AT
    calls = [c for c in read_calls(directory) if c.id == run.call_id]
    assert len(calls) == 1, f"no call record {run.call_id} under {directory / 'calls'}"
    [call] = calls
    assert call.context_id == run.fork_id
    assert call.error == run.error, f"the call record lost the error: {call.error!r}"
    assert (call.response, call.message_id, call.usage) == (None, None, None)
    assert call.request_hash == run.request_hash


# -- the library: replay.replay ------------------------------------------------------------


@pytest.mark.parametrize("failure", KINDS)
def test_each_endpoint_failure_is_a_recorded_failed_run_and_the_store_stays_intact(
    store_copy: Path, monkeypatch: pytest.MonkeyPatch, failure: Failure
) -> None:
    before = snapshot(store_copy)
    store = Store(store_copy)
    session = store.load_session("3f0c")
    found = replay.materialize(session, None, AT)

    with failing_endpoint(failure, monkeypatch) as target:
        endpoint = LLMEndpoint(target.base_url, timeout=TIMEOUT_S, max_retries=RETRIES)
        try:
            [run] = replay.replay(store, session, found, endpoint, samples=1)
        except Exception as exc:
            pytest.fail(
                f"{failure.name}: replay raised {type(exc).__name__}: {exc} instead of recording a failed run"
            )
        requests = target.requests

    assert_failed(failure, run.ok, run.error, run.output)
    assert (run.output, run.response) == (None, None)
    assert run.saved == (failure.kind != "connection"), "only a run that reached the model is kept"
    assert requests == expected_requests(failure), (
        f"{failure.name}: {requests} requests with max_retries={RETRIES}; "
        f"{'retryable' if failure.retried else 'not retryable'}"
    )
    assert_failure_recorded(store_copy, found, run)
    assert_store_intact(store_copy, before, [run])


# -- the command: soapwb replay -------------------------------------------------------------


class Result(NamedTuple):
    code: int
    out: str
    err: str


@pytest.fixture
def soapwb(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """``soapwb.cli.main`` in this process, with no $SOAPWB_STORE or $OPENAI_BASE_URL."""
    monkeypatch.delenv("SOAPWB_STORE", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)

    def run(*argv: str | Path) -> Result:
        capsys.readouterr()
        try:
            code = main([str(a) for a in argv])
        except Exception:  # what the console script would show the user
            code, crash = 1, traceback.format_exc()
        else:
            crash = ""
        out, err = capsys.readouterr()
        return Result(code, out, err + crash)

    return run


def replay_argv(base_url: str, store: Path, *extra: str, retries: int = RETRIES) -> list[str]:
    return [
        "replay",
        "3f0c",
        "--at",
        str(AT),
        "--base-url",
        base_url,
        "--timeout",
        str(TIMEOUT_S),
        "--retries",
        str(retries),
        "--store",
        str(store),
        *extra,
    ]


def assert_one_failed_line(failure: Failure, result: Result) -> None:
    shown = f"\nexit {result.code}, stdout:\n{result.out}stderr:\n{result.err}"
    assert "Traceback" not in result.out + result.err, f"{failure.name}: the user sees a traceback{shown}"
    failed = [line for line in result.out.splitlines() if "FAILED" in line]
    assert len(failed) == 1, f"{failure.name}: expected one FAILED line{shown}"
    assert failed[0].startswith("run 0: FAILED: "), failed[0]
    assert f"{failure.kind}: " in failed[0] and failure.says in failed[0], failed[0]
    assert result.code == 1, result


@pytest.mark.parametrize("failure", KINDS)
def test_replay_command_prints_one_failed_line_naming_the_kind_and_exits_1(
    soapwb: Callable[..., Result], store_copy: Path, monkeypatch: pytest.MonkeyPatch, failure: Failure
) -> None:
    before = snapshot(store_copy)
    with failing_endpoint(failure, monkeypatch) as target:
        result = soapwb(*replay_argv(target.base_url, store_copy))
        requests = target.requests

    assert_one_failed_line(failure, result)
    assert result.err == ""
    assert requests == expected_requests(failure)
    # the fork and its call record; nothing when the model was never reached
    assert len(new_files(before, snapshot(store_copy))) == (0 if failure.kind == "connection" else 2)


@pytest.mark.parametrize("failure", [f for f in FAILURES if f.name in ("refused", "http500")], ids=str)
def test_installed_script_reports_a_failed_replay_the_same_way(
    store_copy: Path, monkeypatch: pytest.MonkeyPatch, failure: Failure
) -> None:
    assert SCRIPT.is_file(), f"no soapwb console script next to {sys.executable}"
    before = snapshot(store_copy)
    with failing_endpoint(failure, monkeypatch) as target:
        proc = subprocess.run(
            [SCRIPT, *replay_argv(target.base_url, store_copy)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        requests = target.requests if failure.mode else None

    assert_one_failed_line(failure, Result(proc.returncode, proc.stdout, proc.stderr))
    if requests is not None:  # a refused connection is counted in this process only
        assert requests == expected_requests(failure)
    assert len(new_files(before, snapshot(store_copy))) == (0 if failure.kind == "connection" else 2)


# -- several samples at once ---------------------------------------------------------------


def every_second_request_fails(number: int) -> str:
    return "http500" if number % 2 == 0 else "ok"


def test_concurrent_samples_against_a_flaky_server_each_keep_their_own_fork_and_outcome(
    soapwb: Callable[..., Result], store_copy: Path
) -> None:
    before = snapshot(store_copy)
    argv = replay_argv("", store_copy, "--samples", "4", "--concurrency", "2", "--json", retries=0)
    with MisbehavingLLM(every_second_request_fails) as server:
        argv[argv.index("--base-url") + 1] = server.base_url
        result = soapwb(*argv)
        requests = server.requests

    assert result.code == 1, result
    assert "Traceback" not in result.out + result.err
    report = json.loads(result.out)
    runs = report["runs"]
    assert requests == 4, "with --retries 0 every sample sends exactly one request"
    assert sorted(r["sample"] for r in runs) == [0, 1, 2, 3]
    assert sorted(r["ok"] for r in runs) == [False, False, True, True]
    assert report["failed"] == 2
    assert len({r["fork_id"] for r in runs}) == 4
    assert len({r["call_id"] for r in runs}) == 4

    session = Store(store_copy).load_session("3f0c")
    calls = {c.id: c for c in read_calls(session_dir(store_copy))}
    for run in runs:
        fork, call = session.contexts[run["fork_id"]], calls[run["call_id"]]
        assert call.context_id == run["fork_id"]
        if run["ok"]:
            assert run["text"] == "hello"
            assert fork.messages[-1].role == "assistant" and fork.messages[-1].text() == "hello"
            assert "error" not in fork.extra[REPLAY_KEY]
            assert call.error is None and call.response["choices"][0]["message"]["content"] == "hello"
        else:
            assert "failed: HTTP error: HTTP 500" in run["error"]
            sent = replay.materialize(Store(store_copy).load_session("3f0c"), None, AT).messages
            assert len(fork.messages) == len(sent), "a failed fork holds the request only"
            assert fork.extra[REPLAY_KEY]["error"] == run["error"]
            assert call.error == run["error"] and call.response is None
    assert len(new_files(before, snapshot(store_copy))) == 8  # four forks, four call records
    assert [v for v in replay.verify_store(Store(store_copy)) if not v.match] == []
