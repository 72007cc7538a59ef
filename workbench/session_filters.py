"""Narrowing and ordering the Sessions table: by role, by state, by last activity, by size.

A store of thousands of sessions is read by scrolling only when it can be cut down first:
the sessions of one role, the broken ones, those active in the last day, the big ones.
Plain functions over the listing rows, so the page only lays the choices out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from soap_core import SessionOverview, parse_stamp

STATES = ("readable", "broken", "active")
"""``readable``: its files read; ``broken``: one of them did not (the error column says
which); ``active``: its thread's current session."""

SINCE = {
    "any time": None,
    "the last hour": timedelta(hours=1),
    "the last 24 hours": timedelta(days=1),
    "the last 7 days": timedelta(days=7),
    "the last 30 days": timedelta(days=30),
}
"""Last-activity windows, by how the picker names them."""


def _last(overview: SessionOverview) -> str:
    return overview.last_timestamp or ""


SORTS: dict[str, tuple[Callable[[SessionOverview], Any], bool]] = {
    "last activity, newest first": (_last, True),
    "last activity, oldest first": (_last, False),
    "most tokens": (lambda o: o.tokens or 0, True),
    "most messages": (lambda o: o.messages or 0, True),
    "role": (lambda o: (o.role.casefold(), _last(o)), False),
}
"""Orders of the table, by how the picker names them: a key and whether it runs down."""


@dataclass(frozen=True)
class SessionFilter:
    """What the table keeps: every session when left as made."""

    roles: frozenset[str] = field(default_factory=frozenset)
    """Empty: every role."""
    states: frozenset[str] = field(default_factory=frozenset)
    """Empty: every state; else a session in any of them (:data:`STATES`)."""
    since: timedelta | None = None
    min_messages: int = 0

    def keeps(self, overview: SessionOverview, now: datetime) -> bool:
        if self.roles and overview.role not in self.roles:
            return False
        if self.states and not self.states & set(states_of(overview)):
            return False
        if self.min_messages and (overview.messages or 0) < self.min_messages:
            return False
        if self.since is not None:
            last = _moment(overview.last_timestamp)
            if last is None or last < now - self.since:
                return False
        return True


def states_of(overview: SessionOverview) -> list[str]:
    """The states a session is in (:data:`STATES`)."""
    found = ["broken" if overview.error else "readable"]
    return [*found, "active"] if overview.is_active else found


def _moment(stamp: str | None) -> datetime | None:
    """A listing timestamp as a naive local time (how peteos and our runtime write them);
    one with an offset is turned into local time; None when it is not a time."""
    moment = parse_stamp(stamp)
    return None if moment is None else moment.astimezone().replace(tzinfo=None)


def narrowed(
    overviews: Iterable[SessionOverview], chosen: SessionFilter, sort: str, now: datetime | None = None
) -> list[SessionOverview]:
    """The rows ``chosen`` keeps, in the order ``sort`` names (:data:`SORTS`); one pass
    and one sort, whatever the store's size."""
    moment = now or datetime.now()
    kept = [o for o in overviews if chosen.keeps(o, moment)]
    key, descending = SORTS.get(sort, SORTS[next(iter(SORTS))])
    return sorted(kept, key=key, reverse=descending)


def filter_note(shown: int, overviews: Sequence[SessionOverview]) -> str | None:
    """``12 of 340 sessions shown`` when the filters hide some; None when all are shown."""
    if shown == len(overviews):
        return None
    return f"{shown:,} of {len(overviews):,} sessions shown (the filters above hide the rest)"


PICKER_ROWS = 1_000
"""The picker offers the table's first rows; any other session is typed in. Ten thousand
options cost a first open of the page about a third of a second in the browser."""


def matches_session(session_uuid: str, ref: str) -> bool:
    """The store's rule: the uuid, or a prefix of it with or without its date."""
    return session_uuid.startswith(ref) or session_uuid.partition("-")[2].startswith(ref)


def typed_session(typed: str, overviews: Sequence[SessionOverview]) -> str | None:
    """The session a typed text names: its id, or the one id it begins, with or without
    its date (the short id a label ends with is such a beginning); None when no id or
    several do."""
    text = typed.strip()
    if not text:
        return None
    found = [o.uuid for o in overviews if o.uuid == text] or [
        o.uuid for o in overviews if matches_session(o.uuid, text)
    ]
    return found[0] if len(found) == 1 else None
