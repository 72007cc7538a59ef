"""Writer and racer processes for the crash and race tests, forked from the warm test
process (the ``fork`` start method: no interpreter start, no imports, a few ms each).

A writer saves one session again and again, each save a pure function of its number
``k`` (:func:`expected_files`), and reports ``s<k>`` before and ``d<k>`` after each save
on a pipe, so that after a SIGKILL the parent knows which two states every file may be
in. A racer waits for a start signal and invokes an agentic object on a thread.
"""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from soap_core import CallRecord, Context, Session, Store, dump_json, write_call
from soap_core._tempfiles import is_temp_name
from soap_core.runtime import ActiveSessionError

ROLE = "Writer"
PER_CONTEXT = 8
"""Saves per context: every eighth save forks a new active context (a new file)."""
PAD = "x" * 1500
"""Makes a save take long enough for a kill to land inside it."""


def _message(i: int) -> dict[str, Any]:
    return {
        "role": "user" if i % 2 == 0 else "assistant",
        "content": [{"type": "text", "text": f"message {i} {PAD}"}],
        "_type": "Message",
        "id": f"m-{i:05d}",
        "_hook_ids": [],
        "creation_timestamp": f"2025-06-11T12:00:00.{i:06d}",
        "_sequence_number": i,
    }


def _context(uuid: str, j: int, k: int) -> dict[str, Any]:
    """Context ``j`` of the session as it stands after save ``k``."""
    last = min(k, j * PER_CONTEXT + PER_CONTEXT - 1)
    messages = [_message(i) for i in range(j * PER_CONTEXT, last + 1)]
    data: dict[str, Any] = {
        "messages": messages,
        "id": f"c{j:03d}-{uuid[-8:]}",
        "content_map": {},
        "anchor_points": [["system_prompt", 0], ["tools", 0], ["messages", len(messages)]],
        "message_sequence": len(messages),
        "_mutation_counter": len(messages) + 3,
        "children": [f"c{j + 1:03d}-{uuid[-8:]}"] if k >= (j + 1) * PER_CONTEXT else [],
    }
    if j:
        data["origin_context_id"] = f"c{j - 1:03d}-{uuid[-8:]}"
    return data


def session_at(root: Path, uuid: str, k: int) -> Session:
    """The session after save ``k``: contexts ``0..k // PER_CONTEXT``, the last active."""
    session = Session(ROLE, uuid)
    for j in range(k // PER_CONTEXT + 1):
        context = Context.from_dict(_context(uuid, j, k))
        session.add_context(context)
        session.active_context_id = context.id
    session.state_data = {"saves": k}
    session.directory = Store(root).session_dir(ROLE, uuid)
    return session


def call_at(uuid: str, k: int) -> CallRecord:
    request = {"model": "m", "messages": [{"role": "user", "content": f"save {k} {PAD}"}]}
    return CallRecord(f"{k:06d}", uuid, ROLE, "c", k, request, f"h{k}", started_at="2025-06-11T12:00:00")


def expected_files(root: Path, uuid: str, k: int) -> dict[str, bytes]:
    """Every file of the session after save ``k`` (relative path -> bytes); {} for k < 0."""
    if k < 0:
        return {}
    session = session_at(root, uuid, k)
    files = {f"{c.id}.json": dump_json(c.to_dict()).encode() for c in session.contexts.values()}
    files["session.json"] = dump_json(session.to_dict()).encode()
    for i in range(k + 1):
        files[f"calls/{i:06d}.json"] = dump_json(call_at(uuid, i).as_dict()).encode()
    return files


def writer(root: str, uuid: str, start: int, report: int) -> None:
    """Save the session at ``start``, ``start + 1``, ... until killed."""
    store = Store(root)
    directory = store.session_dir(ROLE, uuid)
    k = start
    while True:
        session = session_at(Path(root), uuid, k)
        os.write(report, b"s%d\n" % k)
        store.save_session(session)
        write_call(directory, call_at(uuid, k))
        os.write(report, b"d%d\n" % k)
        k += 1


def stopped_writer(root: str, uuid: str, start: int, report: int) -> None:
    """A writer that saves forever and exits cleanly on SIGTERM (the live-writer test)."""
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    writer(root, uuid, start, report)


@dataclass
class Reported:
    """What a killed writer said on its pipe."""

    started: int
    done: int
    lines: list[str] = field(default_factory=list)


def read_report(fd: int, start: int) -> Reported:
    """Everything on the pipe (the writer is dead: nothing more will come)."""
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    lines = b"".join(chunks).decode().split()
    started = max((int(x[1:]) for x in lines if x[0] == "s"), default=start - 1)
    done = max((int(x[1:]) for x in lines if x[0] == "d"), default=start - 1)
    return Reported(started, done, lines)


def wait_for_line(fd: int, timeout: float = 30.0) -> bytes:
    """Block until the pipe has something (the writer started its first save)."""
    ready, _, _ = select.select([fd], [], [], timeout)
    if not ready:
        raise TimeoutError("the writer never started")
    return b""


def temp_files(directory: Path) -> list[Path]:
    """The atomic-write temp files in ``directory`` and its record folders."""
    found = []
    for folder in (directory, directory / "calls", directory / "invocations"):
        if folder.is_dir():
            found += [p for p in folder.iterdir() if is_temp_name(p.name)]
    return sorted(found)


def check_files(root: Path, uuid: str, reported: Reported) -> list[str]:
    """Problems with the session's files after a kill: each must hold its content of the
    last finished save or of the one in progress (never anything else, never missing)."""
    directory = Store(root).session_dir(ROLE, uuid)
    old = expected_files(root, uuid, reported.done)
    new = expected_files(root, uuid, reported.started) if reported.started > reported.done else old
    problems = []
    on_disk = {
        str(p.relative_to(directory)): p.read_bytes()
        for p in directory.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    }
    for name, content in on_disk.items():
        if content not in (old.get(name), new.get(name)):
            problems.append(f"{name}: neither its old nor its new content ({len(content)} bytes)")
    problems += [f"{name}: lost" for name in old if name not in on_disk]
    return problems


def racer(make: Callable[[], Any], thread: str, go: Event, results: Any, index: int) -> None:
    """Wait for ``go``, then invoke the object ``make()`` builds on ``thread``; put the
    outcome (``ok``, ``refused`` or the error) into ``results``."""
    obj = make()
    go.wait(30)
    try:
        obj.invoke("Hello.", thread=thread, tool_choice="none")
        outcome = "ok"
    except ActiveSessionError:
        outcome = "refused"
    except Exception as exc:  # reported to the parent, which fails the test with it
        outcome = f"{type(exc).__name__}: {exc}"
    results.put((index, outcome))
