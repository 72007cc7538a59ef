"""Crash and race safety with real processes and real signals.

* Writers are SIGKILLed at random points of their saves: every file is then its old or
  its new content (never half-written, never lost), and the temp files of killed writers
  go at the next write or listing of their folder; a live writer's never go.

Processes are forked from this warm test process (multiprocessing's ``fork``), so each
costs milliseconds. ``SOAPWB_RELIABILITY=full`` runs the full figure (1,000 saves);
the default runs a quarter of it. Each test writes its figures to
``test-output/reliability/``.
"""

from __future__ import annotations

import contextlib
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

from soap_core import Store, count_text, write_call, write_text_atomic
from soap_core._tempfiles import HOST_TAG, STALE_AFTER_S, is_leftover
from tests import crash_writers as cw

FULL = os.environ.get("SOAPWB_RELIABILITY") == "full"
SAVES = 1000 if FULL else 250
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
