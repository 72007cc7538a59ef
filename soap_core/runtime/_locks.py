"""The no-circle restriction: a session runs in at most one invocation at a time.

Two guards, for two kinds of circle:

* In this process, the chain of running invocations is a context variable; invoking a
  session that is already on it is refused with the chain in the message.
* Across processes, a running session holds an exclusive ``flock`` on
  ``<session_dir>/.soapwb.lock`` (a dot file: no sOAP reader looks at it) whose
  content names the owner (pid, host, since). The kernel drops the lock when the owner
  dies, so a crashed process can never block a session forever: an ``is_active: true``
  left in ``session.json`` with no lock held is recognised as stale.

A third lock makes a thread's first session unique: finding a thread's session and
creating it when there is none happens under an exclusive ``flock`` on a lock file of
that (object, thread), ``<agents>/.soapwb-threads/<digest>.lock``, so of two processes
invoking a new thread at once, the second finds the session the first created.
Lock files are opened without following a link (a link planted in a store would
otherwise have its target truncated) and are never deleted (deleting a lock file while
another process waits on it would let two processes hold "the" lock).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soap_core._errors import SoapError, StoreError
from soap_core._records import LOCK_FILE, read_lock_owner, utc_now
from soap_core._saves import open_lock_file

THREAD_LOCKS_DIR = ".soapwb-threads"
THREAD_LOCK_TIMEOUT_S = 60.0
"""How long an invoke waits for another process to finish creating the thread's session
(which takes one save)."""
_RETRIES_S = (0.002, 0.005, 0.01, 0.02)
"""Short waits before a session lock is declared held: a reader checking whether a
``running`` record is stale holds it shared for an instant (:mod:`soap_core._records`)."""


class ActiveSessionError(SoapError):
    """The session asked for is already running an invocation (the no-circle rule)."""

    def __init__(self, session: str, detail: str) -> None:
        self.session = session
        self.detail = detail
        super().__init__(
            f"Session {session} is already active; recursive invoke on an active session is not allowed ({detail})"
        )

    def __reduce__(self) -> tuple[type[ActiveSessionError], tuple[str, str]]:
        return (type(self), (self.session, self.detail))


@dataclass(frozen=True)
class Frame:
    """One running invocation on the current chain."""

    role: str
    object_id: str
    session: str
    invocation_id: str
    session_dir: Path


CHAIN: ContextVar[tuple[Frame, ...]] = ContextVar("soapwb_chain", default=())


def owner_info() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "since": utc_now()}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def session_lock(session_dir: Path, session_uuid: str) -> Iterator[dict[str, Any] | None]:
    """Hold the session for one invocation; yields the previous owner if it was stale.

    Raises ActiveSessionError if the session is on this chain or held by a live process.
    """
    chain = CHAIN.get()
    if any(frame.session == session_uuid for frame in chain):
        path = " -> ".join(f"{f.role}/{f.session}" for f in chain)
        raise ActiveSessionError(session_uuid, f"it is up the current invocation chain: {path}")
    session_dir.mkdir(parents=True, exist_ok=True)
    fd = open_lock_file(session_dir / LOCK_FILE, "the lock file")
    try:
        if not _lock_soon(fd):
            raise ActiveSessionError(session_uuid, _describe_owner(fd))
        previous = read_lock_owner(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(owner_info()).encode(), 0)
        try:
            yield previous
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _lock_soon(fd: int) -> bool:
    """Take the exclusive lock, retrying a few milliseconds; False if it stays held."""
    for delay in (*_RETRIES_S, None):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if delay is None:
                return False
            time.sleep(delay)
    return False


def thread_lock_path(agents_dir: Path, role: str, object_id: str, thread: str) -> Path:
    """The lock file of one object's thread (a digest: thread ids are any text)."""
    key = "\0".join((role, object_id, thread)).encode("utf-8", "surrogatepass")
    return agents_dir / THREAD_LOCKS_DIR / f"{hashlib.sha256(key).hexdigest()[:32]}.lock"


@contextlib.contextmanager
def thread_lock(agents_dir: Path, role: str, object_id: str, thread: str) -> Iterator[None]:
    """Hold the (object, thread) while its session is looked up and, if new, created.

    Held for one lookup and one save, never for a run; a wait longer than
    :data:`THREAD_LOCK_TIMEOUT_S` is an error naming the lock file."""
    path = thread_lock_path(agents_dir, role, object_id, thread)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_lock_file(path, "the lock file")
    try:
        deadline = time.monotonic() + THREAD_LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StoreError(
                        path, f"thread {thread!r} of {role}: another process held its creation lock too long"
                    ) from None
                time.sleep(0.005)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _describe_owner(fd: int) -> str:
    owner = read_lock_owner(fd)
    if owner is None:
        return "held by another process"
    alive = "" if pid_alive(int(owner.get("pid", 0) or 0)) else ", not running here"
    return f"held by pid {owner.get('pid')} on {owner.get('host')} since {owner.get('since')}{alive}"
