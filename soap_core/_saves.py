"""Saves from many processes: none of them loses what another one wrote.

A session is loaded, changed in memory and saved; meanwhile another process may have
saved the same session (a replay adding a fork, an agent appending to its context, a
second workbench tab). Saving blindly would put back the files as this process read
them, and the other process's messages or forks would be gone. So every save of a
session folder that exists:

* holds an exclusive ``flock`` on the folder's save lock for the length of the save, so
  two saves never interleave. The lock files live in the store's ``.soapwb-saves/``
  (one per session folder, named by a digest of its real path), not in the session
  folders, which stay as peteos wrote them;
* compares what is on disk with what this process read. The lock file holds a token
  that every save replaces (:func:`new_token`), and each file's signature (size,
  modification and change times, inode) is noted when it is read or written
  (:class:`SavedBase`): the same token and the same signature mean nobody saved since,
  and the file is written at once. Otherwise the file on disk is read and compared by
  content with what was read (:meth:`~soap_core.Context.saved_fingerprint`);
* merges what can be merged. A context file changed on both sides, where one side only
  added or removed ``children`` (a fork made elsewhere), gets the other side's content
  with both sides' children; ``session.json`` is merged key by key (and one level into
  ``state_data``) where the two sides changed different keys. A new context's file is
  new on both sides;
* refuses the rest with :class:`SaveConflictError`, naming the file, before anything is
  written: the caller reloads and makes its change again (:meth:`Store.update_session`
  does that).

A session that was never read from disk (made in memory: the generator, an import, a
crash test's writer) has nothing to compare with: it replaces the files it holds, still
under the lock, and still changes the token, so that every process that loaded the
session before notices.

peteos itself writes in place without the lock: its writes change the file's
signature, which sends the save to the content comparison.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soap_core._errors import StoreError
from soap_core._jsonio import fingerprint
from soap_core._paths import real_entry

SAVE_LOCKS_DIR = ".soapwb-saves"
SAVE_LOCK_TIMEOUT_S = 120.0
"""How long a save waits for another process's save of the same session (one save of a
context of 100,000 messages takes a few seconds)."""
UNKNOWN = "?"
"""The signature of a file whose content on disk is not what memory holds (a merge
wrote the other side's messages): never equal to a real one, so the next save compares
content."""


class SaveConflictError(StoreError):
    """Another process changed the same part of a session since it was loaded: nothing
    was written. Load the session again and redo the change."""


@dataclass
class SavedBase:
    """What a session was read as, or last written as: what a save compares the disk
    with. ``signatures`` has one entry per file of the session that was read or written
    (by file name, ``session.json`` included)."""

    token: str
    signatures: dict[str, str] = field(default_factory=dict)
    session_dict: dict[str, Any] | None = None
    """``session.json`` as read or written, normalised through :class:`Session`."""


def file_signature(path: Path) -> str | None:
    """Size, modification and change times and inode of ``path``; None if it is missing.
    A rewrite in place moves the change time even when it restores the modification
    time (``cp -p``, ``rsync --inplace``); a rename brings another inode."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return f"{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}:{info.st_ino}"


def save_lock_path(config_dir: Path, directory: Path) -> Path:
    """The save lock of the session folder ``directory``, in the store's config dir (the
    folder's real path names it: two ways to one folder share one lock)."""
    key = real_entry(directory).encode("utf-8", "surrogatepass")
    return config_dir / SAVE_LOCKS_DIR / f"{hashlib.sha256(key).hexdigest()[:32]}.lock"


def read_token(lock_path: Path) -> str:
    """The save token in ``lock_path``, without taking the lock ('' when no save of ours
    took the lock yet). Read before the session's files, so that a save running
    meanwhile makes the token differ and the next save compares content."""
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        return os.pread(fd, 64, 0).decode("ascii", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def new_token() -> str:
    return os.urandom(8).hex()


class SaveLock:
    """An exclusive hold on one session folder's saves (see :func:`save_lock`)."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd = fd
        self.path = path
        self.token = os.pread(fd, 64, 0).decode("ascii", "replace")
        """The token as the previous save left it."""

    def replace_token(self) -> str:
        """Write a new token (before the files: a reader that reads the files while they
        are written either sees the old token, or the new one with the old signatures)."""
        token = new_token()
        try:
            os.pwrite(self._fd, token.encode("ascii"), 0)
            os.ftruncate(self._fd, len(token))
        except OSError as exc:
            raise StoreError(self.path, f"cannot write the save lock: {exc.strerror}") from None
        self.token = token
        return token


def open_lock_file(path: Path, name: str) -> int:
    """The lock file ``path`` (``name`` in errors) open for writing, created if missing,
    never through a link; StoreError if it cannot be."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if os.path.islink(path):
            raise StoreError(path, f"{name} is a symlink: not followed") from None
        raise StoreError(path, f"cannot open {name}: {exc.strerror}") from None


@contextlib.contextmanager
def save_lock(path: Path, *, timeout: float = SAVE_LOCK_TIMEOUT_S) -> Iterator[SaveLock]:
    """Hold the saves of one session folder: an exclusive ``flock`` on its lock file
    ``path`` (:func:`save_lock_path`), waited for up to ``timeout`` seconds (then a
    StoreError naming it). The kernel lets go of it when its holder dies, so a killed
    writer never blocks a session. Neither the lock folder nor the file is followed if
    it is a link (a planted link would have a file made or truncated elsewhere), and
    lock files are never deleted (one deleted while another process waits on it would
    let two processes hold "the" lock)."""
    try:
        os.mkdir(path.parent)
    except FileExistsError:
        pass
    except OSError as exc:
        raise StoreError(path.parent, f"cannot make the save lock folder: {exc.strerror}") from None
    if os.path.islink(path.parent):
        raise StoreError(path.parent, "the save lock folder is a symlink: not followed")
    fd = open_lock_file(path, "the save lock")
    try:
        deadline = time.monotonic() + timeout
        delay = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StoreError(
                        path, f"another process held this session's save lock for {timeout:g} s"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
        try:
            yield SaveLock(fd, path)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


# -- merging ---------------------------------------------------------------------------------


def merged_children(base: Sequence[str], ours: Sequence[str], theirs: Sequence[str]) -> list[str]:
    """Children after both sides' changes: theirs, less what we removed, then what we
    added that they do not have (each id once)."""
    base_set, ours_set = set(base), set(ours)
    removed = base_set - ours_set
    merged = [c for c in dict.fromkeys(theirs) if c not in removed]
    present = set(merged)
    merged += [c for c in dict.fromkeys(ours) if c not in base_set and c not in present]
    return merged


def with_children(value: dict[str, Any], children: Sequence[str]) -> dict[str, Any]:
    """``value`` with its ``children`` replaced (in place in the key order)."""
    return {**value, "children": list(children)}


def only_children_differ(
    path: Path, value: dict[str, Any], base_children: Sequence[str], base_digest: bytes
) -> bool:
    """Whether ``value`` is the context read as ``base_digest`` but for its children."""
    return (
        "children" in value and fingerprint([str(path), with_children(value, base_children)]) == base_digest
    )


def merged_session_dict(
    path: Path, base: dict[str, Any], ours: dict[str, Any], theirs: dict[str, Any]
) -> dict[str, Any]:
    """``session.json`` with both sides' changes, key by key (``state_data`` entry by
    entry); SaveConflictError naming the first key both sides changed differently."""
    return _merged_keys(path, "$", base, ours, theirs)


_MISSING = object()


def _merged_keys(
    path: Path, where: str, base: dict[str, Any], ours: dict[str, Any], theirs: dict[str, Any]
) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for key in dict.fromkeys([*theirs, *ours]):
        b, o, t = base.get(key, _MISSING), ours.get(key, _MISSING), theirs.get(key, _MISSING)
        if o in (t, b):
            value = t
        elif t == b:
            value = o
        elif where == "$" and key == "state_data" and all(isinstance(x, dict) for x in (b, o, t)):
            value = _merged_keys(path, "$.state_data", b, o, t)
        else:
            raise SaveConflictError(
                path,
                f"{where}.{key} was changed by another process since this session was loaded "
                "(to a value other than this save's): nothing was saved; load the session again",
            )
        if value is not _MISSING:
            merged[key] = value
    return merged
