"""The Sessions table narrowed and ordered by role, state, last activity and size (issue 23)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from soap_core import SessionOverview, Store
from tests.apptest import open_app_page
from workbench.session_filters import SINCE, SORTS, SessionFilter, filter_note, narrowed

NOW = datetime(2026, 12, 3, 12, 0, 0)


def row(
    role: str, uuid: str, last: str | None, messages: int, *, error: str | None = None
) -> SessionOverview:
    return SessionOverview(role, uuid, None, uuid == "a", 1, messages, messages * 10, None, last, error)


ROWS = [
    row("Analyst", "a", "2026-12-03T11:30:00", 40),
    row("Analyst", "b", "2026-11-20T09:00:00", 4),
    row("Researcher", "c", "2026-12-02T18:00:00", 12),
    row("Archivist", "d", None, 0, error="not valid JSON"),
]


def uuids(rows: list[SessionOverview]) -> list[str]:
    return [r.uuid for r in rows]


def test_every_session_is_kept_and_the_newest_comes_first_by_default() -> None:
    assert uuids(narrowed(ROWS, SessionFilter(), next(iter(SORTS)), NOW)) == ["a", "c", "b", "d"]
    assert filter_note(4, ROWS) is None


def test_each_filter_keeps_what_it_names() -> None:
    first = next(iter(SORTS))
    assert uuids(narrowed(ROWS, SessionFilter(roles=frozenset({"Analyst"})), first, NOW)) == ["a", "b"]
    assert uuids(narrowed(ROWS, SessionFilter(states=frozenset({"broken"})), first, NOW)) == ["d"]
    assert uuids(narrowed(ROWS, SessionFilter(states=frozenset({"active"})), first, NOW)) == ["a"]
    day = SessionFilter(since=SINCE["the last 24 hours"])
    assert uuids(narrowed(ROWS, day, first, NOW)) == ["a", "c"]
    assert uuids(narrowed(ROWS, SessionFilter(min_messages=10), first, NOW)) == ["a", "c"]
    both = SessionFilter(roles=frozenset({"Analyst"}), since=SINCE["the last 7 days"])
    assert uuids(narrowed(ROWS, both, first, NOW)) == ["a"]
    assert filter_note(1, ROWS) == "1 of 4 sessions shown (the filters above hide the rest)"


def test_each_order_sorts_by_what_it_names() -> None:
    everything = SessionFilter()
    assert uuids(narrowed(ROWS, everything, "last activity, oldest first", NOW)) == ["d", "b", "c", "a"]
    assert uuids(narrowed(ROWS, everything, "most tokens", NOW)) == ["a", "c", "b", "d"]
    assert uuids(narrowed(ROWS, everything, "most messages", NOW)) == ["a", "c", "b", "d"]
    assert uuids(narrowed(ROWS, everything, "role", NOW)) == ["b", "a", "d", "c"]


def test_the_page_filters_and_orders_the_table(workbench_store: Path) -> None:
    sessions = Store(workbench_store).sessions()
    roles = sorted({s.role for s in sessions})
    assert len(roles) > 1
    at = open_app_page(workbench_store, "sessions")
    assert len(at.dataframe[0].value) == len(sessions)
    at.multiselect(key="sessions_roles").select(roles[0]).run()
    table = at.dataframe[0].value
    assert set(table["role"]) == {roles[0]}
    assert len(table) == sum(1 for s in sessions if s.role == roles[0])
    assert any("sessions shown" in c.value for c in at.caption)
    at.multiselect(key="sessions_roles").unselect(roles[0]).run()
    at.selectbox(key="sessions_sort").set_value("most tokens").run()
    assert at.query_params["sort"] == "most tokens"
    tokens = list(at.dataframe[0].value["tokens"].fillna(0))
    assert tokens == sorted(tokens, reverse=True) and len(tokens) == len(sessions)
