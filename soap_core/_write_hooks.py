"""Who hears about the store's writes: the mirrors of remote stores.

A store on object storage is a local folder kept in sync with its bucket
(:mod:`soap_core._remote`). Every file the store writes goes through
:func:`soap_core._jsonio.write_text_atomic`, and every new session folder through
:func:`soap_core._tempfiles.new_folder`; both tell this registry once the file or folder
is in place, and the mirror whose folder holds it uploads it, in the order the store
wrote it (contexts first, ``session.json`` last).

The registry is empty unless a remote store is open, and then costs one prefix check per
write; a listener's error (a conflict on the bucket) propagates to the writer, so a save
that could not reach the bucket fails like one that could not reach the disk.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Protocol


class WriteListener(Protocol):
    """What a mirror does when a file or a new folder appears under its root."""

    def file_written(self, path: Path) -> None: ...

    def folder_made(self, path: Path) -> None: ...


_listeners: dict[str, WriteListener] = {}
_lock = threading.Lock()


def listen(root: Path, listener: WriteListener) -> None:
    """Tell ``listener`` about every write under ``root`` from now on."""
    with _lock:
        _listeners[os.path.abspath(root)] = listener


def stop_listening(root: Path) -> None:
    with _lock:
        _listeners.pop(os.path.abspath(root), None)


def _listener_for(path: Path) -> WriteListener | None:
    if not _listeners:
        return None
    target = os.path.abspath(path)
    with _lock:
        for root, listener in _listeners.items():
            if target.startswith(root + os.sep):
                return listener
    return None


def file_written(path: Path) -> None:
    """``path`` was just replaced whole (an atomic write)."""
    listener = _listener_for(path)
    if listener is not None:
        listener.file_written(path)


def folder_made(path: Path) -> None:
    """The folder ``path`` just appeared whole (a new session, renamed into place)."""
    listener = _listener_for(path)
    if listener is not None:
        listener.folder_made(path)
