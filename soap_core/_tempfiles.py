"""The temp files of atomic writes, and the leftovers of writers that were killed.

An atomic write creates ``.<name>.<tag>.tmp`` beside its target and renames it over the
target; a writer killed between the two leaves the temp file behind. Each temp file's
name says who wrote it, ``.<name>.<host>-<pid>.<random>.tmp`` (``host``: 8 hex digits of
the host name's hash), so the next write into that folder, or the next listing of it, can
tell a leftover from a live writer's file:

* written on this host by a process that no longer exists: orphaned, removed at once;
* written by this very process: live while this process is writing it (a set of the
  paths in flight), orphaned otherwise (a dead process with our pid, reused);
* anything else (another host, a live pid, the older names without host and pid): removed
  only once it is :data:`STALE_AFTER_S` old, far longer than any write takes.

A live writer's file is therefore never removed: its pid is alive, or it is this
process's and in flight. Removing is best effort: a folder that cannot be written keeps
its leftovers and nothing fails.

A new session folder is made the same way (:func:`new_folder`): its files are written
into a temp folder of that name beside it, which is renamed into place once complete, so
a session appears whole or not at all; a killed writer's temp folder is a leftover too.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import shutil
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from soap_core._write_hooks import folder_made

STALE_AFTER_S = 3600.0
"""Age after which any temp file of ours is a leftover, whoever wrote it."""

HOST_TAG = hashlib.blake2b(socket.gethostname().encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()
_TAGGED = re.compile(r"^\..+\.(?P<host>[0-9a-f]{8})-(?P<pid>\d+)\.[A-Za-z0-9_]{8}\.tmp$")
_UNTAGGED = re.compile(r"^\..+\.[A-Za-z0-9_]{8}\.tmp$")

_in_flight: set[str] = set()
_in_flight_lock = threading.Lock()


def temp_prefix(path: Path) -> str:
    """The ``mkstemp`` prefix of a temp file for ``path`` (the suffix is ``.tmp``)."""
    return f".{path.name}.{HOST_TAG}-{os.getpid()}."


def is_temp_name(name: str) -> bool:
    """Whether ``name`` is a temp file an atomic write of ours makes (or made)."""
    return (
        name.startswith(".") and name.endswith(".tmp") and bool(_TAGGED.match(name) or _UNTAGGED.match(name))
    )


@contextlib.contextmanager
def in_flight(path: str) -> Iterator[None]:
    """Mark ``path`` as this process's live temp file while the block runs."""
    with _in_flight_lock:
        _in_flight.add(path)
    try:
        yield
    finally:
        with _in_flight_lock:
            _in_flight.discard(path)


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False


def is_leftover(path: str, now: float | None = None) -> bool:
    """Whether the temp file ``path`` can be removed: its writer is provably gone, or it
    is older than :data:`STALE_AFTER_S` (module docstring)."""
    match = _TAGGED.match(os.path.basename(path))
    if match is not None and match["host"] == HOST_TAG:
        pid = int(match["pid"])
        if pid == os.getpid():
            with _in_flight_lock:
                if path not in _in_flight:
                    return True
        elif _pid_gone(pid):
            return True
    try:
        age = (now if now is not None else time.time()) - os.lstat(path).st_mtime
    except OSError:
        return False
    return age > STALE_AFTER_S


def sweep_names(folder: Path | str, names: Iterable[str]) -> int:
    """Remove the leftovers among ``names`` (entries of ``folder``); how many went."""
    removed = 0
    now = time.time()
    for name in names:
        if not is_temp_name(name):
            continue
        path = os.path.join(folder, name)
        if is_leftover(path, now):
            with contextlib.suppress(OSError):
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)  # a new session folder its writer never finished
                else:
                    os.unlink(path)
                removed += 1
    return removed


def sweep_leftovers(folder: Path | str) -> int:
    """Remove the leftover temp files of killed writers in ``folder``; how many went."""
    try:
        with os.scandir(folder) as entries:
            names = [e.name for e in entries if e.name.endswith(".tmp") and e.name.startswith(".")]
    except OSError:
        return 0
    return sweep_names(folder, names) if names else 0


SWEEP_EVERY_S = 5.0
"""A writing process sweeps a folder at its first write there, then at most this often."""

_swept: dict[str, float] = {}
_swept_pid = os.getpid()
_swept_lock = threading.Lock()


def sweep_after_write(folder: Path | str) -> int:
    """:func:`sweep_leftovers` for a folder this process has just written into: at the
    process's first write there, then at most every :data:`SWEEP_EVERY_S`. A listing per
    write made N writes into one folder (an import's call records) cost N listings of a
    growing folder, quadratic; a killed writer's leftover is still gone at the next
    writing process's first write and at every listing."""
    global _swept_pid
    key, now = os.fspath(folder), time.monotonic()
    with _swept_lock:
        if _swept_pid != os.getpid():  # a forked child: its parent's sweeps are not its own
            _swept.clear()
            _swept_pid = os.getpid()
        last = _swept.get(key)
        if last is not None and now - last < SWEEP_EVERY_S:
            return 0
        if len(_swept) > 10_000:
            _swept.clear()
        _swept[key] = now
    return sweep_leftovers(folder)


def _fsync_folder(folder: Path | str) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a folder be fsynced
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def new_folder(directory: Path, *, sync: bool = True) -> Iterator[Path]:
    """A folder that appears at ``directory`` whole: the block writes into the temp folder
    it is given, which is renamed to ``directory`` when the block ends (and removed if it
    fails). FileExistsError if ``directory`` appeared meanwhile (then nothing is moved).
    ``sync=False`` (a generated store) skips the fsyncs.

    The parent is not swept for other writers' leftovers: it is a role folder holding
    every session of the role, and listing it at each new session made creating N
    sessions quadratic. Listings sweep it (``Store`` and the catalog both do)."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = directory.parent / f"{temp_prefix(directory)}{secrets.token_hex(4)}.tmp"
    with in_flight(str(staging)):
        os.mkdir(staging)
        try:
            yield staging
            if sync:
                _fsync_folder(staging)
            if os.path.lexists(directory):
                raise FileExistsError(f"{directory} appeared while it was being created")
            try:
                os.rename(staging, directory)
            except OSError as exc:  # made by another process between the check and the rename
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    raise FileExistsError(f"{directory} appeared while it was being created") from None
                raise
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    if sync:
        _fsync_folder(directory.parent)
    folder_made(directory)  # a remote store's mirror uploads it (soap_core._write_hooks)
