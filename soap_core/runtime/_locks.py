"""The no-circle restriction: a session runs in at most one invocation at a time.

Two guards, for two kinds of circle:

* In this process, the chain of running invocations is a context variable; invoking a
  session that is already on it is refused with the chain in the message.
* Across processes, a running session holds an exclusive ``flock`` on
  ``<session_dir>/.soapwb.lock`` (a dot file: no sOAP reader looks at it) whose
  content names the owner (pid, host, since). The kernel drops the lock when the owner
  dies, so a crashed process can never block a session forever: an ``is_active: true``
  left in ``session.json`` with no lock held is recognised as stale.

The lock file is opened without following a link: a link planted in a store would
otherwise have its target truncated.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soap_core._errors import SoapError, StoreError
from soap_core._records import utc_now

LOCK_FILE = ".soapwb.lock"


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
    fd = _open_lock_file(session_dir / LOCK_FILE)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ActiveSessionError(session_uuid, _describe_owner(fd)) from None
        previous = _read_owner(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(owner_info()).encode(), 0)
        try:
            yield previous
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _open_lock_file(path: Path) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if os.path.islink(path):
            raise StoreError(path, "the lock file is a symlink: not followed") from None
        raise StoreError(path, f"cannot open the lock file: {exc.strerror}") from None


def _read_owner(fd: int) -> dict[str, Any] | None:
    raw = os.pread(fd, 4096, 0)
    try:
        owner = json.loads(raw) if raw else None
    except ValueError:
        return None
    return owner if isinstance(owner, dict) else None


def _describe_owner(fd: int) -> str:
    owner = _read_owner(fd)
    if owner is None:
        return "held by another process"
    alive = "" if pid_alive(int(owner.get("pid", 0) or 0)) else ", not running here"
    return f"held by pid {owner.get('pid')} on {owner.get('host')} since {owner.get('since')}{alive}"
