"""Which objects of a bucket listing a mirror takes now, and which it holds back.

A writer puts a save's objects one PUT at a time, contexts first and ``session.json``
last, and ends every save that put anything into a session folder with a PUT of the
folder's seal, ``.soapwb-seal`` (a few random bytes: its ETag changes at every save,
where ``session.json`` may not change at all). A reader's listing can fall between two
of those PUTs. So, per session folder, with its *commit* being the versions of its
``session.json`` and its seal:

* a folder whose ``session.json`` is not there (a new session being written) is held
  back whole: the store would list it as broken;
* a context object that changed while the commit did not (compared by ETag and
  modification time with what the mirror holds) belongs to a save still running: held
  back, the session stays as it was;
* when the commit changed, the contexts put up to its time are taken with it
  (contexts first, ``session.json`` last, so the mirror never names a context it does
  not hold yet); one put later than both is the next save's, held back.

The seal is never mirrored as a file (the store never sees it); the manifest notes its
version. A writer that does not seal (peteos, ``aws s3 sync``) is seen when its
``session.json`` changes, or after :data:`HOLD_BACK_S`.

Anything held back longer than :data:`HOLD_BACK_S` (by its modification time) is taken
anyway: its writer died between two PUTs, or was not ours, and the store then shows the
folder as a local store would (a fork without its parent's mark, a folder without
``session.json`` listed as broken). Records (``calls/``, ``invocations/``) and files
outside session folders are taken at once: no session is half without them.

S3 gives modification times to the second: a context of the next save put in the same
second as this save's seal is taken with this one (shown a save early: never a session
naming a file the mirror lacks).

Pure functions of the listing, the manifest and the clock: tested without a bucket.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from soap_core._layout import AGENTS_DIR, DOT_PETEOS, SESSIONS_DIR

SESSION_FILE = "session.json"
SEAL_FILE = ".soapwb-seal"
"""The object a writer puts into a session folder at the end of each save."""
HOLD_BACK_S = 30.0
"""How long a half-saved session's new objects are held back, at most."""


@dataclass(frozen=True)
class ObjectVersion:
    """One object as a listing shows it: its version token (the ETag, or size and
    modification time where the filesystem has no ETag), size and modification time."""

    etag: str
    size: int
    modified: float | None = None
    """Seconds since the epoch, by the storage's clock; None when not known (an object
    this mirror just put: the PUT answer has its ETag only)."""

    def same_as(self, held: ObjectVersion) -> bool:
        """Whether this listed version is the one the mirror holds (``held``)."""
        if self.etag != held.etag:
            return False
        return held.modified is None or self.modified is None or self.modified == held.modified


@dataclass
class PullPlan:
    """What a pull does: ``fetch`` in this order, ``remove`` from the mirror, ``held``
    back for now, and ``refresh`` (same bytes, newer time) noted without a download."""

    fetch: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    refresh: list[str] = field(default_factory=list)


def session_prefixes(root_name: str, tops: set[str]) -> tuple[str | None, str | None]:
    """Where the ``agents`` and ``sessions`` folders are, relative to the mirror's root,
    as :func:`soap_core._layout.locate` finds them: ``root_name`` is the last part of the
    store's URL, ``tops`` the first path parts of its objects."""
    if root_name == AGENTS_DIR and AGENTS_DIR not in tops:
        return "", None
    if root_name == SESSIONS_DIR and SESSIONS_DIR not in tops:
        return None, ""
    base = f"{DOT_PETEOS}/" if DOT_PETEOS in tops and not tops & {AGENTS_DIR, SESSIONS_DIR} else ""
    return f"{base}{AGENTS_DIR}/", f"{base}{SESSIONS_DIR}/"


def session_folder(key: str, prefixes: tuple[str | None, str | None]) -> str | None:
    """The session folder (a key prefix without the slash) ``key`` lies in, if any."""
    agents, sessions = prefixes
    if agents is not None and key.startswith(agents):
        parts = key[len(agents) :].split("/")
        return agents + "/".join(parts[:2]) if len(parts) >= 3 else None
    if sessions is not None and key.startswith(sessions):
        parts = key[len(sessions) :].split("/")
        return sessions + parts[0] if len(parts) >= 2 else None
    return None


def plan_pull(
    listed: Mapping[str, ObjectVersion],
    held: Mapping[str, ObjectVersion],
    prefixes: tuple[str | None, str | None],
    now: float,
    *,
    hold_back: bool = True,
) -> PullPlan:
    """The plan that brings the mirror (holding ``held``) to the listing ``listed``."""
    plan = PullPlan()
    plan.remove = sorted(key for key in held if key not in listed)
    changed = [key for key, version in listed.items() if key not in held or not version.same_as(held[key])]
    plan.refresh = sorted(
        key for key in listed if key in held and key not in changed and listed[key] != held[key]
    )
    seals = [key for key in changed if key.rsplit("/", 1)[-1] == SEAL_FILE]
    plan.refresh = sorted([*plan.refresh, *seals])  # noted, never fetched
    taken: list[str] = []
    for key in changed:
        if key in seals:
            continue
        folder = session_folder(key, prefixes) if hold_back else None
        if folder is None or _taken(key, folder, listed, held, now):
            taken.append(key)
        else:
            plan.held.append(key)
    last = f"/{SESSION_FILE}"
    plan.fetch = sorted(taken, key=lambda key: (key.endswith(last), key))
    plan.held.sort()
    return plan


def _taken(
    key: str, folder: str, listed: Mapping[str, ObjectVersion], held: Mapping[str, ObjectVersion], now: float
) -> bool:
    version = listed[key]
    if version.modified is not None and now - version.modified > HOLD_BACK_S:
        return True  # its writer is gone, or was not ours: shown as it is
    marker, seal = f"{folder}/{SESSION_FILE}", f"{folder}/{SEAL_FILE}"
    committed = listed.get(marker)
    if committed is None:
        return False  # a session still being made
    if key == marker or "/" in key[len(folder) + 1 :]:
        return True  # session.json itself, or a record in a sub-folder
    if _same(committed, held.get(marker)) and _same(listed.get(seal), held.get(seal)):
        return False  # a context of a save not sealed yet
    times = [v.modified for v in (committed, listed.get(seal)) if v is not None and v.modified is not None]
    return version.modified is None or not times or version.modified <= max(times)


def _same(listed: ObjectVersion | None, held: ObjectVersion | None) -> bool:
    if listed is None or held is None:
        return listed is held
    return listed.same_as(held)
