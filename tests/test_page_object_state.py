"""The Object state page, run headless with AppTest: the state after each invocation is
the one the records hold, the diff between two invocations shows what changed (the
Analyst's errors_seen going 3 → 6), and a peteos store says it has no records.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from streamlit.testing.v1 import AppTest

from soap_core import Store
from soap_core.runtime import InvocationRecord, read_invocations
from tests.apptest import open_app_page
from workbench.object_state_views import StateChange, diff_table, state_changes, state_table

APP = Path(__file__).resolve().parents[1] / "app.py"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "soap"
SESSION = "20250611-3f0c2b6e-8a41-4d8e-9c1a-5b7d2e9f4a10"


def open_page(store: Path, **params: str) -> AppTest:
    return open_app_page(store, "object_state", **params)


def uuid_of(store: Path, role: str) -> str:
    [summary] = [s for s in Store(store).sessions() if s.role == role]
    return summary.uuid


def analyst_records(store: Path) -> list[InvocationRecord]:
    uuid = uuid_of(store, "Analyst")
    return [r for r in read_invocations(Store(store).find(uuid).path) if r.callee.session == uuid]


def records(table: pd.DataFrame) -> list[dict[str, Any]]:
    return table.astype(object).where(table.notna(), None).to_dict("records")


def changes_shown(at: AppTest) -> dict[str, tuple[str, Any, Any]]:
    """Attribute → (change, before, after) from the diff table (the second table)."""
    return {r["attribute"]: (r["change"], r["before"], r["after"]) for r in records(at.dataframe[1].value)}


class TestTheStateTable:
    def test_each_invocation_has_the_state_its_record_holds(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session=uuid_of(workbench_store, "Analyst"))
        expected = analyst_records(workbench_store)
        rows = records(at.dataframe[0].value)
        assert [r["invocation"] for r in rows] == [r.id for r in expected]
        assert [r["outcome"] for r in rows] == [r.outcome for r in expected]
        # a column with a gap is text, the gap in words (the browser's grid would say "None")
        assert [r["errors_seen"] for r in rows] == [
            str((r.state_after or {}).get("errors_seen", "-")) for r in expected
        ]
        assert [r["errors_seen"] for r in rows] == ["3", "3", "3", "-", "3", "6"]
        assert [r["questions"] for r in rows] == ["0", "1", "1", "-", "1", "1"]

    def test_the_refused_invocation_has_no_state_and_is_counted(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session=uuid_of(workbench_store, "Analyst"))
        refused = [r for r in records(at.dataframe[0].value) if r["outcome"] == "refused"]
        assert len(refused) == 1
        assert refused[0]["errors_seen"] == "-"
        assert "6 invocations, 1 without a recorded state" in at.text[0].value

    def test_records_of_calls_the_session_made_are_left_out(self, workbench_store: Path) -> None:
        uuid = uuid_of(workbench_store, "Researcher")
        at = open_page(workbench_store, session=uuid)
        rows = records(at.dataframe[0].value)
        own = [
            r for r in read_invocations(Store(workbench_store).find(uuid).path) if r.callee.session == uuid
        ]
        assert [r["invocation"] for r in rows] == [r.id for r in own]
        assert len(rows) == 1
        assert any("two invocations" in info.value for info in at.info)

    def test_the_numeric_attributes_are_plotted_across_invocations(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session=uuid_of(workbench_store, "Analyst"))
        [chart] = at.get("plotly_chart")
        spec = json.loads(chart.proto.spec)
        lines = {trace["name"]: trace["y"] for trace in spec["data"]}
        assert lines == {"errors_seen": [3, 3, 3, 3, 6], "questions": [0, 1, 1, 1, 1]}
        axes = {trace["name"]: trace.get("yaxis", "y") for trace in spec["data"]}
        assert len(set(axes.values())) == 2, axes  # each quantity on its own scale


class TestTheDiff:
    def test_by_default_the_first_and_the_last_invocation_are_compared(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session=uuid_of(workbench_store, "Analyst"))
        first, *_, last = analyst_records(workbench_store)
        assert (at.query_params["state_a"], at.query_params["state_b"]) == (first.id, last.id)
        assert changes_shown(at) == {"errors_seen": ("changed", 3, 6), "questions": ("changed", 0, 1)}

    def test_errors_seen_goes_from_3_to_6_between_the_first_and_a_later_invocation(
        self, workbench_store: Path
    ) -> None:
        all_records = analyst_records(workbench_store)
        first = all_records[0]
        [later] = [r for r in all_records if r.prompt == "Count again."]
        at = open_page(
            workbench_store, session=uuid_of(workbench_store, "Analyst"), state_a=first.id, state_b=later.id
        )
        assert changes_shown(at)["errors_seen"] == ("changed", 3, 6)
        assert not at.json  # the diff is shown once, as the table
        expected = state_changes(first.state_after, later.state_after)
        assert {c.attribute: (c.change, c.before, c.after) for c in expected} == changes_shown(at)

    def test_an_attribute_that_did_not_change_is_not_in_the_diff(self, workbench_store: Path) -> None:
        first, second, *_ = analyst_records(workbench_store)
        at = open_page(
            workbench_store, session=uuid_of(workbench_store, "Analyst"), state_a=first.id, state_b=second.id
        )
        assert changes_shown(at) == {"questions": ("changed", 0, 1)}

    def test_picking_another_invocation_records_it(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session=uuid_of(workbench_store, "Analyst"))
        second = analyst_records(workbench_store)[1]
        picker = next(box for box in at.selectbox if box.label.startswith("To"))
        picker.set_value(second.id).run()
        assert not at.exception
        assert at.query_params["state_b"] == second.id
        assert changes_shown(at) == {"questions": ("changed", 0, 1)}

    def test_the_refused_invocation_cannot_be_picked(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session=uuid_of(workbench_store, "Analyst"))
        [refused] = [r for r in analyst_records(workbench_store) if r.outcome == "refused"]
        picker = next(box for box in at.selectbox if box.label.startswith("From"))
        assert refused.id not in picker.options
        assert len(picker.options) == 5

    def test_an_unknown_invocation_is_a_warning_and_the_default_is_used(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session=uuid_of(workbench_store, "Analyst"), state_a="nope")
        assert any("nope" in warning.value for warning in at.warning)
        assert at.query_params["state_a"] == analyst_records(workbench_store)[0].id

    def test_equal_states_say_so(self, workbench_store: Path) -> None:
        [_, second, third, *_] = analyst_records(workbench_store)
        at = open_page(
            workbench_store, session=uuid_of(workbench_store, "Analyst"), state_a=second.id, state_b=third.id
        )
        assert "The two states are equal." in [text.value for text in at.text]
        assert len(at.dataframe) == 1


class TestTheDiffFunction:
    def test_added_removed_and_nested_changes_are_named_by_path(self) -> None:
        before = {"count": 1, "gone": "x", "items": [1, {"k": 1}]}
        after = {"count": 2, "new": None, "items": [1, {"k": 2}, 3]}
        assert state_changes(before, after) == [
            StateChange("count", "changed", 1, 2),
            StateChange("gone", "removed", "x", None),
            StateChange("items[1].k", "changed", 1, 2),
            StateChange("items[2]", "added", None, 3),
            StateChange("new", "added", None, None),
        ]

    def test_an_attribute_named_like_a_column_keeps_its_own_column(self) -> None:
        from soap_core.runtime import Party

        record = InvocationRecord(
            id="i1",
            callee=Party("R", "o", "s"),
            caller=None,
            prompt="p",
            thread=None,
            started_at="t",
            outcome="ok",
            state_after={"prompt": "mine", "n": [1, 2]},
        )
        [row] = records(state_table([record]))
        assert row["prompt"] == "p"
        assert row["prompt (state)"] == "mine"
        assert row["n"] == "[1, 2]"

    def test_a_column_of_mixed_types_converts_to_a_table_the_browser_can_get(self) -> None:
        """streamlit sends tables as Arrow; a column holding 3 in one row and "three" in
        another fails that conversion (and prints its error in the terminal)."""
        import pyarrow as pa

        from soap_core.runtime import Party

        def record(n: int, value: Any) -> InvocationRecord:
            return InvocationRecord(
                id=f"i{n}",
                callee=Party("R", "o", "s"),
                caller=None,
                prompt="p",
                thread=None,
                started_at="t",
                outcome="ok",
                state_after={"mixed": value, "same": n},
            )

        table = state_table([record(1, 3), record(2, "three"), record(3, None)])
        pa.Table.from_pandas(table)
        assert list(table["mixed"]) == ["3", "three", None] and list(table["same"]) == [1, 2, 3]
        changes = diff_table(state_changes({"a": 3, "b": "x"}, {"a": "three", "b": 4}))
        pa.Table.from_pandas(changes)
        assert list(changes["before"]) == ["3", "x"] and list(changes["after"]) == ["three", "4"]


class TestOtherSessions:
    def test_a_peteos_store_says_there_is_no_state(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        assert any("no invocation records" in info.value for info in at.info)
        assert not at.dataframe

    def test_an_unknown_session_offers_the_picker(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session="no-such-session")
        assert at.warning and not at.error
        assert not at.dataframe

    def test_without_a_session_it_asks_for_one(self) -> None:
        at = open_page(FIXTURE)
        assert at.info
        assert not at.dataframe
