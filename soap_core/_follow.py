"""Following a store while agents write to it: a generation number that moves when it changes.

A :class:`StoreFollower` watches one store and bumps :attr:`~StoreFollower.generation` at
every change a page could show: a new session, a rewritten context, a new call or
invocation record, a writer letting go of its session's lock (its invocation ended, or its
process died, which changes no file at all). A page compares the generation with the one
its run started from and reruns when it moved (:mod:`workbench.live`); the command line
prints what appeared (``soapwb follow``). Nothing here reads the store's data: it only
says *when*.

Where the kernel tells of file events (inotify, through ``watchdog``), they are used.
Only the *final* step of a write counts, so a reader never goes to a half-written file:

* an atomic write is a rename of a temp file (:func:`soap_core._tempfiles.is_temp_name`)
  onto its name, and a new session folder is a temp folder renamed into place: the
  rename counts, never what happens inside a temp file or folder;
* a file written in place (peteos) counts when its writer closes it, not at each write;
* a lock file counts only when a writer closes it (its release), never when a reader
  probes it (a read-only open), or the probe of a page's own rerun would bump again;
* the catalog's own database and locks never count: a page's rerun refreshes the
  catalog, and counting that would rerun the page forever.

Where the kernel cannot watch (no inotify, its limits reached, a network file system or
a store on object storage), a thread polls a cheap signature every
:data:`POLL_EVERY_S` instead, calling ``refresh`` first: for a remote store, the pull that
brings the local mirror up to date with the bucket.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable
from pathlib import Path, PurePath
from typing import TYPE_CHECKING

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    EventsLostEvent,
    FileClosedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)

from soap_core import _trust as trust
from soap_core._catalog import is_catalog_file
from soap_core._layout import INSTANCE_FILE
from soap_core._remote import RemoteStore
from soap_core._store import Store
from soap_core._tempfiles import is_temp_name

if TYPE_CHECKING:  # the observers' modules load inotify: imported when a follower starts
    from watchdog.observers.api import BaseObserver

POLL_EVERY_S = 1.0
"""How often the polling fallback takes the store's signature."""
LOCK_SUFFIX = ".lock"

Signature = Callable[[], Hashable]


def counts(event: FileSystemEvent, root: Path) -> bool:
    """Whether ``event`` (under ``root``) is the last step of a change a page could show
    (module docstring): a rename onto a final name, a deletion, a close after writing,
    a new folder."""
    if isinstance(event, FileMovedEvent | DirMovedEvent):
        return _store_data(_text(event.dest_path), root)
    if isinstance(event, FileClosedEvent):  # in place, or a lock's holder letting go
        return _store_data(_text(event.src_path), root, locks=True)
    if isinstance(event, FileDeletedEvent | DirDeletedEvent | DirCreatedEvent):
        return _store_data(_text(event.src_path), root)
    # The kernel's queue overflowed: anything may have changed. Else opened, modified, a
    # folder's mtime: a step of a write not yet done.
    return isinstance(event, EventsLostEvent)


def _text(path: str | bytes) -> str:
    return path.decode("utf-8", "surrogateescape") if isinstance(path, bytes) else path


def _store_data(path: str, root: Path, *, locks: bool = False) -> bool:
    """Whether ``path`` is the store's data: not a temp file or in a temp folder, not
    the catalog's, and not a lock file unless ``locks``."""
    pure = PurePath(path)
    try:
        parts = pure.relative_to(root).parts
    except ValueError:
        parts = pure.parts
    if any(is_temp_name(part) for part in parts) or is_catalog_file(Path(pure.name)):
        return False
    return locks or not pure.name.endswith(LOCK_SUFFIX)


class _Bumper(FileSystemEventHandler):
    def __init__(self, follower: StoreFollower) -> None:
        self.follower = follower

    def on_any_event(self, event: FileSystemEvent) -> None:
        if counts(event, self.follower.root):
            self.follower.bump()


class StoreFollower:
    """The changes of one store as a number that only grows (:attr:`generation`).

    ``signature``: what the polling fallback compares (by default
    :func:`files_signature`);
    ``refresh``: called before each poll (a remote store's pull); ``poll``: poll even
    where file events would work (tests, and stores the kernel cannot see change);
    ``background``: put the watches in place in a thread (one per folder: seconds for a
    store of 10,000 sessions, which a page's first draw need not wait for), then bump
    once, so that what was written meanwhile is read again."""

    def __init__(
        self,
        root: str | Path,
        *,
        signature: Signature | None = None,
        refresh: Callable[[], None] | None = None,
        poll: bool = False,
        poll_every_s: float = POLL_EVERY_S,
        background: bool = False,
    ) -> None:
        self.root = Path(root)
        self._signature = signature or (lambda: files_signature(self.root))
        self._refresh = refresh
        self._poll_every_s = poll_every_s
        self._generation = 0
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stopped = threading.Event()
        self._observer: BaseObserver | None = None
        self._poller: threading.Thread | None = None
        self.polling = poll or refresh is not None
        if not self.polling and background:
            threading.Thread(target=self._watch_or_poll, name=f"soapwb-watch {root}", daemon=True).start()
            return
        self.polling = self.polling or not self._watch()
        if self.polling:
            self._start_polling()

    def _start_polling(self) -> None:
        self._poller = threading.Thread(target=self._poll, name=f"soapwb-follow {self.root}", daemon=True)
        self._poller.start()

    def _watch_or_poll(self) -> None:
        if self._watch():
            self.bump()  # changes made while the watches were put in place: read them again
        elif not self._stopped.is_set():
            self.polling = True
            self._start_polling()

    @classmethod
    def of(cls, store: Store, *, background: bool = False) -> StoreFollower:
        """The follower of ``store``: file events on a folder; on object storage, a poll
        of the mirror, each look (every :data:`POLL_EVERY_S`) pulling what changed on the
        bucket first: one listing of the bucket a second while a page is open, so that a
        save shows within about a second plus one listing."""
        if isinstance(store, RemoteStore):
            remote = store
            return cls(store.root, refresh=lambda: remote.refresh(force=True), poll=True)
        return cls(store.root, background=background)

    @property
    def generation(self) -> int:
        """How many changes were seen since the follower started (a read of one int)."""
        return self._generation

    def bump(self) -> None:
        with self._changed:
            self._generation += 1
            self._changed.notify_all()

    def wait_for_change(self, seen: int, timeout_s: float) -> int:
        """The generation once it differs from ``seen``, or after ``timeout_s``."""
        with self._changed:
            self._changed.wait_for(lambda: self._generation != seen, timeout=timeout_s)
            return self._generation

    def watching(self) -> bool:
        """Whether every change under the store is being counted by file events (the
        catalog then trusts the count between them: :mod:`soap_core._trust`)."""
        observer = self._observer
        return observer is not None and observer.is_alive() and not self._stopped.is_set()

    def stop(self) -> None:
        trust.unwatch(self.root, self)
        with self._lock:
            self._stopped.set()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
        if self._poller is not None:
            self._poller.join(timeout=5)

    def _watch(self) -> bool:
        """Start the file-event observer; False where the kernel cannot watch the store
        (inotify unavailable or out of watches, a folder that went away)."""
        if not self.root.is_dir():
            return False
        from watchdog.observers import Observer  # 10 ms of imports: only for a follower

        observer = Observer()
        try:
            observer.schedule(_Bumper(self), str(self.root), recursive=True)
            observer.start()
        except OSError:
            observer.stop()
            return False
        with self._lock:
            if self._stopped.is_set():  # stopped while the watches were put in place
                observer.stop()
                return True
            self._observer = observer
        trust.watch(self.root, self)  # its watches are in place: every change from now on counts
        return True

    def _poll(self) -> None:
        last = self._take_signature()
        while not self._stopped.wait(self._poll_every_s):
            now = self._take_signature()
            if now != last:
                last = now
                self.bump()

    def _take_signature(self) -> Hashable:
        """The signature after the refresh; an error (the bucket unreachable a moment)
        is a signature too, so the page reruns and shows it, and again once it clears."""
        try:
            if self._refresh is not None:
                self._refresh()
            return self._signature()
        except Exception as exc:  # any failure of a pull is a state to show
            return ("error", type(exc).__name__, str(exc))


def _stat_entry(path: Path) -> tuple[str, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (str(path), info.st_mtime_ns, info.st_size)


def _entries(folder: Path) -> list[Path]:
    """The entries of ``folder`` that are the store's data (no temp files, no catalog)."""
    try:
        with os.scandir(folder) as found:
            return sorted(folder / e.name for e in found if not is_temp_name(e.name))
    except OSError:
        return []


def files_signature(root: str | Path) -> tuple[tuple[str, int, int], ...]:
    """``(path, mtime_ns, size)`` of the store's folders, its session folders and what
    they hold (``calls/`` and ``invocations/`` too, whose times move with every new
    record): ``stat`` calls only, what the polling fallback compares. Temp files of
    writes in flight and the catalog's files are left out, and so is the store folder's
    own time, which the catalog's SQLite files move: a page's own reads must not look
    like changes."""
    from soap_core._store import Store  # the store imports much; the follower needs little of it

    store = Store(root)
    paths = [store.agents_dir, store.layout.instances_dir]
    paths.extend(d / INSTANCE_FILE for d in _entries(store.layout.instances_dir))  # rewritten in place
    for parent in store.session_parent_dirs():
        paths.append(parent)
        for session_dir in _entries(parent):
            paths.append(session_dir)
            paths.extend(p for p in _entries(session_dir) if not is_catalog_file(p))
    return tuple(entry for entry in map(_stat_entry, paths) if entry is not None)
