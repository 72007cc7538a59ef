"""Crash and race safety with real processes and real signals.

* Writers are SIGKILLed at random points of their saves: every file is then its old or
  its new content (never half-written, never lost), and the temp files of killed writers
  go at the next write or listing of their folder; a live writer's never go.
* Two processes invoking the same new thread at once make one session, not two.
* A killed invocation's record says ``interrupted`` once a reader or the next invoke
  finds its session's lock free, and ``running`` as long as its process lives.

Processes are forked from this warm test process (multiprocessing's ``fork``), so each
costs milliseconds. ``SOAPWB_RELIABILITY=full`` (``make reliability``) runs the full
figures (1,000 saves, 200 races); ``make test`` runs a smaller share of each. Each test
writes its figures to ``test-output/reliability/``.
"""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import soap_core._tempfiles as tempfiles
from soap_core import Store, count_text, write_call, write_text_atomic
from soap_core._jsonio import DIGEST_BESIDE_BYTES, bytes_digest, write_bytes_atomic
from soap_core._tempfiles import HOST_TAG, STALE_AFTER_S, is_leftover
from soap_core.runtime import AgenticObject, LLMEndpoint, ModelSettings, Runtime, read_invocations, tool
from soapwb.cli import main
from tests import crash_writers as cw
from tests.misbehaving_llm import MisbehavingLLM
from tests.scripted import ScriptedEndpoint, calls, says

FULL = os.environ.get("SOAPWB_RELIABILITY") == "full"
SAVES = 1000 if FULL else 250
RACES = 200 if FULL else 50
FIGURES = Path(__file__).parents[1] / "test-output" / "reliability"
FORK = multiprocessing.get_context("fork")

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def write_figures(name: str, figures: dict[str, Any]) -> None:
    FIGURES.mkdir(parents=True, exist_ok=True)
    (FIGURES / f"{name}.json").write_text(json.dumps({"full": FULL, **figures}, indent=2))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def writer_pid(path: Path) -> int:
    return int(path.name.rsplit(".", 3)[-3].split("-")[1])


@pytest.fixture(autouse=True)
def warm_parent() -> None:
    """What every child would load on its own (the tokenizer: half a second) is loaded
    once here, before the forks."""
    count_text("warm up")


@contextlib.contextmanager
def forked(target: Any, *args: Any) -> Iterator[tuple[Any, int]]:
    """A forked process running ``target(*args, report_fd)`` and the read end of its pipe."""
    read, write = os.pipe()
    process = FORK.Process(target=target, args=(*args, write), daemon=True)
    process.start()
    os.close(write)
    try:
        yield process, read
    finally:
        if process.is_alive():
            os.kill(process.pid, signal.SIGKILL)
        process.join(30)
        os.close(read)


# -- kills during saves ----------------------------------------------------------------------


def test_writers_killed_at_random_points_leave_every_file_old_or_new_and_their_temp_files_go(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    root.mkdir()
    rng = random.Random(13)
    uuids = [f"20250611-{i:08d}-aaaa-4bbb-8ccc-{i:012d}" for i in range(40)]
    next_save = dict.fromkeys(uuids, 0)
    figures = Counter[str]()
    finished = dict.fromkeys(uuids, -1)
    waiting: dict[Path, int] = {}  # temp files a kill left, and the save it cut
    started = time.monotonic()
    while figures["saves"] < SAVES:
        pair = rng.sample(uuids, 2)  # two writers at once, on the two cores
        with contextlib.ExitStack() as stack:
            runs = [stack.enter_context(forked(cw.writer, str(root), u, next_save[u])) for u in pair]
            for _process, read in runs:
                cw.wait_for_line(read)
            for process, _read in runs:
                time.sleep(rng.uniform(0, 0.02))
                os.kill(process.pid, signal.SIGKILL)
            for process, _read in runs:
                process.join(30)
            reports = [cw.read_report(read, next_save[u]) for u, (_p, read) in zip(pair, runs, strict=True)]
        for uuid, report in zip(pair, reports, strict=True):
            figures["kills"] += 1
            figures["saves"] += report.started - next_save[uuid] + 1
            figures["saves finished"] += report.done - next_save[uuid] + 1
            figures["kills inside a save"] += report.started > report.done
            problems = cw.check_files(root, uuid, report)
            assert not problems, f"after a kill in save {report.started} of {uuid}: {problems}"
            directory = Store(root).session_dir(cw.ROLE, uuid)
            for leftover in cw.temp_files(directory):
                figures["temp files left by kills"] += 1
                waiting[leftover] = report.started
            next_save[uuid] = report.started  # the next writer redoes the save that was cut
            finished[uuid] = max(finished[uuid], report.done)
        listing = Store(root)
        assert all(s.error is None for s in listing.sessions())  # the listing sweeps session folders
        listing.catalog().close()  # type: ignore[union-attr]
        for leftover, save in list(waiting.items()):
            uuid = leftover.parents[1 if leftover.parent.name == "calls" else 0].name
            written_since = finished[uuid] > save  # a later save wrote a new call record there
            in_session_folder = leftover.parent.name != "calls"
            if not leftover.exists():
                del waiting[leftover]
            elif (in_session_folder or written_since) and not pid_alive(writer_pid(leftover)):
                pytest.fail(f"{leftover} outlived the next listing or write of its folder")
    for uuid in uuids:  # the last saves of each session, uninterrupted (the second writes a new record)
        store = Store(root)
        for k in (next_save[uuid], next_save[uuid] + 1):
            store.save_session(cw.session_at(root, uuid, k))
            write_call(store.session_dir(cw.ROLE, uuid), cw.call_at(uuid, k))
    remaining = [p for p in waiting if p.exists()]
    assert not [p for p in remaining if not pid_alive(writer_pid(p))], remaining
    figures["temp files removed"] = figures["temp files left by kills"] - len(remaining)
    store = Store(root)
    summaries = store.sessions()
    assert len(summaries) == len(uuids) and all(s.error is None for s in summaries)
    assert [s.uuid for s in summaries] == [s.uuid for s in store.scan_sessions()]
    for uuid in uuids:
        assert not store.load_session(uuid).load_errors
    assert figures["kills inside a save"] > figures["kills"] // 4, figures  # the kills hit saves
    figures["seconds"] = round(time.monotonic() - started)
    write_figures("kills", dict(figures))


def test_a_live_writers_temp_file_is_never_removed(tmp_path: Path) -> None:
    """A writer stopped (SIGSTOP) in the middle of a save keeps its temp file through
    listings and other writers' writes in that folder, and finishes its save on SIGCONT."""
    root = tmp_path / "store"
    root.mkdir()
    uuid = "20250611-11111111-aaaa-4bbb-8ccc-000000000001"
    directory = Store(root).session_dir(cw.ROLE, uuid)
    rng = random.Random(7)
    caught = stops = 0
    with forked(cw.stopped_writer, str(root), uuid, 0) as (process, read):
        cw.wait_for_line(read)
        while caught < 10 and stops < 500:
            time.sleep(rng.uniform(0, 0.004))
            os.kill(process.pid, signal.SIGSTOP)
            stops += 1
            live = [p for p in cw.temp_files(directory) if writer_pid(p) == process.pid]
            if live:
                caught += 1
                Store(root, use_catalog=False).sessions()  # a listing of the folder (no catalog:
                # the stopped writer may hold its write lock, and the walk sweeps the same way)
                write_text_atomic(directory / "other.txt", "a write into the same folder")
                write_text_atomic(directory / "calls" / "other.txt", "and into its calls folder")
                assert all(p.exists() for p in live), "a live writer's temp file was removed"
            os.kill(process.pid, signal.SIGCONT)
        assert caught >= 10, f"only {caught} of {stops} stops landed inside a write"
        os.kill(process.pid, signal.SIGTERM)
        process.join(30)
        report = cw.read_report(read, 0)
    (directory / "other.txt").unlink()
    (directory / "calls" / "other.txt").unlink()
    assert not cw.check_files(root, uuid, report)
    write_figures("live-writer", {"stops": stops, "stops inside a write": caught, "removed": 0})


def test_old_temp_files_of_any_writer_go_and_fresh_ones_of_live_processes_stay(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    old_style = folder / ".a.json.k3j_x9q2.tmp"  # what writes before this change left
    old_style.write_text("{")
    live_pid = folder / f".b.json.{HOST_TAG}-1.abcd1234.tmp"
    live_pid.write_text("{")  # pid 1 is alive
    assert not is_leftover(str(old_style)) and not is_leftover(str(live_pid))
    hour_ago = time.time() - STALE_AFTER_S - 60
    os.utime(old_style, (hour_ago, hour_ago))
    assert is_leftover(str(old_style)) and not is_leftover(str(live_pid))
    write_text_atomic(folder / "c.json", "{}")
    assert not old_style.exists() and live_pid.exists()


def test_a_process_writing_many_files_into_a_folder_sweeps_it_once_and_a_new_writer_at_its_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep lists the folder: one per write made an import's N call records into one
    folder N listings of a growing folder (4,000 records: 7.0 s, 2.5 s once per process)."""
    folder = tmp_path / "calls"
    folder.mkdir()
    gone = multiprocessing.get_context("fork").Process(target=time.sleep, args=(0,))
    gone.start()
    gone.join()
    real_sweep, swept = tempfiles.sweep_leftovers, []

    def counted(path: Path | str) -> int:
        swept.append(path)
        return real_sweep(path)

    with monkeypatch.context() as patch:
        patch.setattr(tempfiles, "sweep_leftovers", counted)
        for number in range(50):
            write_text_atomic(folder / f"{number}.json", "{}")
        assert len(swept) == 1
        leftover = folder / f".late.json.{HOST_TAG}-{gone.pid}.abcd1234.tmp"
        leftover.write_text("{")  # a writer killed after this process's sweep
        write_text_atomic(folder / "more.json", "{}")
        assert leftover.exists() and len(swept) == 1  # not listed again so soon
        writer = multiprocessing.get_context("fork").Process(
            target=write_text_atomic, args=(folder / "other.json", "{}")
        )
        writer.start()
        writer.join(30)
        assert writer.exitcode == 0 and not leftover.exists()  # the next writer's first write
        patch.setattr(tempfiles, "SWEEP_EVERY_S", 0.0)
        write_text_atomic(folder / "later.json", "{}")
        assert len(swept) == 2  # and this one's own, once the interval has passed


def test_a_new_session_lists_no_folder_but_its_own_and_listings_sweep_what_killed_writers_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creating a session must not list its role folder, which holds every session of the
    role (a listing per new session made N sessions quadratic); the leftover temp folder of
    a writer killed while creating one goes at the next listing instead, with or without
    the catalog."""
    root = tmp_path / "store"
    root.mkdir()
    uuids = [f"20250611-{i:08d}-aaaa-4bbb-8ccc-{i:012d}" for i in range(6)]
    store = Store(root)
    for uuid in uuids[:5]:
        store.save_session(cw.session_at(root, uuid, 0))
    role_dir = store.session_dir(cw.ROLE, uuids[0]).parent
    listed: list[str] = []
    real_scandir, real_listdir = os.scandir, os.listdir

    def scandir(path: Any = ".") -> Any:
        listed.append(os.path.realpath(path))
        return real_scandir(path)

    def listdir(path: Any = ".") -> list[str]:
        listed.append(os.path.realpath(path))
        return real_listdir(path)

    with monkeypatch.context() as patch:
        patch.setattr(os, "scandir", scandir)
        patch.setattr(os, "listdir", listdir)
        store.save_session(cw.session_at(root, uuids[5], 0))
    assert listed, "the save was not watched"
    assert os.path.realpath(role_dir) not in listed
    assert store.session_dir(cw.ROLE, uuids[5]).is_dir()

    gone = multiprocessing.get_context("fork").Process(target=time.sleep, args=(0,))
    gone.start()
    gone.join()
    for listing in (Store(root), Store(root, use_catalog=False)):
        leftover = role_dir / f".{uuids[5]}-new.{HOST_TAG}-{gone.pid}.abcd1234.tmp"
        leftover.mkdir()
        (leftover / "session.json").write_text("{")
        assert sorted(s.uuid for s in listing.sessions()) == uuids
        assert not leftover.exists(), f"{leftover} outlived a listing"
        catalog = listing.catalog()
        if catalog is not None:
            catalog.close()


# -- races on a new thread -------------------------------------------------------------------


class Greeter(AgenticObject):
    settings = ModelSettings(max_tokens=4)


def test_two_processes_invoking_a_new_thread_at_once_make_one_session(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    outcomes = Counter[str]()
    started = time.monotonic()
    with MisbehavingLLM("ok") as server:
        warm = Runtime(tmp_path / "warm-up", LLMEndpoint(server.base_url, max_retries=0))
        Greeter(runtime=warm).invoke("Hello.", thread="warm", tool_choice="none")  # imports, tokenizer
        warm.store.catalog().close()  # type: ignore[union-attr]  # nothing open crosses a fork
        endpoint = LLMEndpoint(server.base_url, max_retries=0)  # never used here: no connection to share

        def make() -> Greeter:
            return Greeter(runtime=Runtime(root, endpoint), object_id="greeter")

        for race in range(RACES):
            go, results = FORK.Event(), FORK.Queue()
            racers = [FORK.Process(target=cw.racer, args=(make, f"t{race}", go, results, n)) for n in (0, 1)]
            for process in racers:
                process.start()
            time.sleep(0.01)  # both are waiting on the event
            go.set()
            pair = sorted(results.get(timeout=60)[1] for _ in racers)
            for process in racers:
                process.join(30)
            assert all(o in ("ok", "refused") for o in pair), pair
            outcomes[" + ".join(pair)] += 1
    by_thread = Counter(s.thread_id for s in Store(root, use_catalog=False).scan_sessions())
    doubled = {t: n for t, n in by_thread.items() if n != 1}
    assert not doubled, f"threads with more than one session: {doubled}"
    assert sorted(by_thread) == sorted(f"t{i}" for i in range(RACES))
    write_figures(
        "races",
        {
            "races": RACES,
            "sessions per thread": dict(Counter(by_thread.values())),
            "outcomes": dict(outcomes),
            "seconds": round(time.monotonic() - started),
        },
    )


# -- killed invocations ----------------------------------------------------------------------


class Sleeper(AgenticObject):
    settings = ModelSettings(max_tokens=4)
    marker = ""

    @tool
    def wait(self) -> str:
        """Wait for a long time."""
        Path(self.marker).write_text("waiting")
        time.sleep(600)
        return "woke up"


def _invoke_and_hang(root: str, marker: str, report: int) -> None:  # runs in a child
    Sleeper.marker = marker
    obj = Sleeper(runtime=Runtime(root, ScriptedEndpoint(calls("wait", "{}"), says("done"))), object_id="s")
    obj.invoke("Wait.", thread="t")


def kill_while_running(root: Path, marker: Path) -> tuple[int, Path]:
    """An invocation killed inside its tool; its pid and session folder."""
    with forked(_invoke_and_hang, str(root), str(marker)) as (process, _read):
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert time.monotonic() < deadline and process.is_alive()
            time.sleep(0.01)
        [summary] = [s for s in Store(root).sessions() if s.role == "Sleeper"]
        [record] = read_invocations(summary.path)  # a reader while it lives: still running
        assert record.outcome == "running"
        assert record_on_disk(summary.path)["outcome"] == "running"
        os.kill(process.pid, signal.SIGKILL)
        process.join(30)
    return process.pid, summary.path


def record_on_disk(directory: Path) -> dict[str, Any]:
    [path] = sorted((directory / "invocations").glob("*.json"))
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_a_killed_invocation_reads_as_interrupted_in_soapwb_trace_and_in_its_record(tmp_path: Path) -> None:
    root = tmp_path / "store"
    pid, directory = kill_while_running(root, tmp_path / "marker")
    assert record_on_disk(directory)["outcome"] == "running"  # what the killed process left
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["trace", directory.name, "--store", str(root)]) == 0
    assert "INTERRUPTED" in out.getvalue() and "running" not in out.getvalue(), out.getvalue()
    assert f"pid {pid}" in out.getvalue()
    on_disk = record_on_disk(directory)
    assert on_disk["outcome"] == "interrupted" and f"pid {pid}" in on_disk["error"]


def test_the_next_invoke_on_the_thread_marks_the_killed_invocation_interrupted(tmp_path: Path) -> None:
    root = tmp_path / "store"
    pid, directory = kill_while_running(root, tmp_path / "marker")
    runtime = Runtime(root, ScriptedEndpoint(says("hello again")))
    assert Sleeper(runtime=runtime, object_id="s").invoke("Again.", thread="t") == "hello again"
    records = sorted(
        (json.loads(p.read_text()) for p in (directory / "invocations").glob("*.json")),
        key=lambda r: r["started_at"],
    )
    assert [r["outcome"] for r in records] == ["interrupted", "ok"]
    assert f"pid {pid}" in records[0]["error"]
    assert records[1]["stale_owner"]["pid"] == pid


@pytest.mark.parametrize("size", [1_000, DIGEST_BESIDE_BYTES + 3])
def test_an_atomic_write_returns_the_digest_of_the_bytes_it_left(tmp_path: Path, size: int) -> None:
    """Below and above the size from which the digest is taken in a thread beside the
    writes: the file holds the pieces in order and the digest is that of its bytes."""
    data = random.Random(size).randbytes(size)
    view = memoryview(data)
    pieces = [b"{", view[: size // 3], view[size // 3 :], b"}"]
    path = tmp_path / "big.json"
    digest = write_bytes_atomic(path, pieces)
    assert path.read_bytes() == b"{" + data + b"}"
    assert digest == bytes_digest(path.read_bytes())


def _open_deleted(folder: Path) -> list[str]:
    """This process's descriptors of files of ``folder`` that are gone (a replaced file
    kept open)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(str(folder)) and target.endswith("(deleted)"):
                found.append(target)
    return found


def test_a_big_file_replaced_is_released_behind_the_write_and_a_fifo_in_its_place_is_not_opened(
    tmp_path: Path,
) -> None:
    """A write over a big file holds the old one open across the rename (which then
    does not free its blocks) and closes it in a thread: the new bytes are there at
    once, and the old file is released. A FIFO where the file was is replaced without
    being opened (opening it to read would wait for a writer)."""
    path = tmp_path / "big.json"
    path.write_bytes(b"a" * (DIGEST_BESIDE_BYTES + 10))
    new = b"b" * (DIGEST_BESIDE_BYTES + 20)
    write_bytes_atomic(path, [new])
    assert path.read_bytes() == new
    deadline = time.monotonic() + 10
    while _open_deleted(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _open_deleted(tmp_path) == [], "the replaced file is still held open"

    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    writer = multiprocessing.get_context("fork").Process(target=write_bytes_atomic, args=(fifo, [new]))
    writer.start()
    writer.join(10)
    if writer.is_alive():
        writer.kill()
    assert writer.exitcode == 0, "the write over a FIFO did not finish"
    assert fifo.read_bytes() == new
