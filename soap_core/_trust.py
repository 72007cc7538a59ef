"""A long-running process trusts its catalog between file events.

The catalog's walk ``stat``\\ s every session and context file of the store (about
22,000 at 10,000 sessions: a quarter to a whole second), because peteos rewrites files in
place, which leaves their folders' times alone: nothing cheaper tells a short-lived
process what changed. A process that keeps a :class:`~soap_core.StoreFollower` on the
store (the workbench, ``soapwb follow``) is told instead: every final step of a write
under the store bumps the follower's generation, lost events included. So a refresh
walks only when that generation moved since the last complete walk began; otherwise the
catalog is as current as the files.

Only a follower on kernel file events counts (a polling one lags a second and sees less),
only while its observer runs, and only for a store whose folders all lie inside the
watched folder (a linked ``agents/`` elsewhere would change unseen).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Protocol


class Watcher(Protocol):
    @property
    def generation(self) -> int: ...

    def watching(self) -> bool:
        """Whether every change under the folder is still being counted."""
        ...


_lock = threading.Lock()
_watchers: dict[str, list[Watcher]] = {}
_walked: dict[tuple[str, bool], tuple[str, int]] = {}
"""(store, with records) -> (the catalog's build, the generation) of the last complete walk."""


def _key(root: Path | str) -> str:
    return os.path.realpath(root)


def watch(root: Path | str, watcher: Watcher) -> None:
    """Trust ``watcher``'s count of the changes under ``root`` from now on."""
    with _lock:
        _watchers.setdefault(_key(root), []).append(watcher)


def unwatch(root: Path | str, watcher: Watcher) -> None:
    with _lock:
        kept = [w for w in _watchers.get(_key(root), []) if w is not watcher]
        if kept:
            _watchers[_key(root)] = kept
        else:
            _watchers.pop(_key(root), None)


def watched_generation(roots: list[str]) -> int | None:
    """The change count of a watcher that sees every one of the store's real ``roots``
    (its first one, the config dir, being the watched folder); None if none does."""
    key = _key(roots[0])
    if not all(r == key or r.startswith(key + os.sep) for r in roots):
        return None
    with _lock:
        for watcher in _watchers.get(key, []):
            if watcher.watching():
                return watcher.generation
    return None


def unchanged_since_walk(roots: list[str], records: bool, build: str) -> tuple[bool, int | None]:
    """Whether the store is unchanged since the last complete walk (of the same kind,
    into the catalog's same ``build``: one emptied since must be walked again) began,
    and the generation a walk starting now begins at (None: not watched)."""
    generation = watched_generation(roots)
    if generation is None:
        return False, None
    with _lock:
        return _walked.get((_key(roots[0]), records)) == (build, generation), generation


def walked(roots: list[str], records: bool, generation: int | None, build: str) -> None:
    """Note a complete walk into ``build`` that began at ``generation``."""
    if generation is None:
        return
    with _lock:
        _walked[(_key(roots[0]), records)] = (build, generation)
        if records:  # a walk with records is a walk without
            _walked[(_key(roots[0]), False)] = (build, generation)
