"""Names before ids and errors before paths, as the pages show them (AppTest): the
session pickers, OpenPoke execution agents by their agent name, the Sessions table's
error column and a page's error line."""

from __future__ import annotations

from pathlib import Path

from importers.openpoke import import_openpoke
from soap_core import Store
from tests.apptest import open_app_page

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "soap"
OPENPOKE = Path(__file__).resolve().parent / "fixtures" / "openpoke" / "long"
SESSION = "20250611-3f0c2b6e-8a41-4d8e-9c1a-5b7d2e9f4a10"
SESSION_DIR = f"agents/HelloPete/{SESSION}"


def unescaped(text: str) -> str:
    return text.replace("\\", "")  # the pages escape Markdown in messages


class TestSessionPickers:
    def test_the_session_picker_reads_name_size_time_then_a_short_id(self) -> None:
        at = open_app_page(FIXTURE, "fork_tree")
        picker = next(box for box in at.selectbox if box.label == "Session")
        [label] = picker.options
        assert label.startswith("HelloPete · 2 contexts · 2025-06-11 ")
        assert label.endswith(" · 3f0c2b6e")

    def test_openpoke_execution_agents_are_named_by_their_agent(self, tmp_path: Path) -> None:
        report = import_openpoke(OPENPOKE, tmp_path / "store")
        assert report.execution_sessions, "the fixture has execution agents"
        at = open_app_page(tmp_path / "store", "sessions")
        options = next(box for box in at.selectbox if box.label == "Session").options
        for agent in report.execution_sessions:
            assert any(o.startswith(f"{agent} (OpenPokeExecution) · ") for o in options), (agent, options)
        table = at.dataframe[0].value
        assert set(report.execution_sessions) <= set(table["name"].dropna())

    def test_a_page_of_an_execution_agent_heads_it_with_its_name(self, tmp_path: Path) -> None:
        report = import_openpoke(OPENPOKE, tmp_path / "store")
        agent, uuid = next(iter(report.execution_sessions.items()))
        at = open_app_page(tmp_path / "store", "fork_tree", session=uuid)
        assert at.text[0].value.startswith(f"{agent} (OpenPokeExecution) · 1 context")


class TestErrorsFirst:
    def test_the_sessions_table_tells_the_problem_then_the_file_in_the_store(self, store_copy: Path) -> None:
        (store_copy / SESSION_DIR / "session.json").write_text("{\n\n  oops")
        at = open_app_page(store_copy, "sessions")
        [error] = at.dataframe[0].value["error"].dropna().tolist()
        assert error.startswith("not valid JSON")
        assert "line 3" in error
        assert error.endswith(f" — {SESSION_DIR}/session.json")

    def test_a_page_error_tells_the_problem_then_where(self) -> None:
        at = open_app_page(FIXTURE, "fork_tree", session=SESSION, context="ffff")
        error = unescaped(at.error[0].value)
        assert error == f"context 'ffff': no such context in this session — {SESSION_DIR}"

    def test_the_sessions_table_names_sessions_before_their_ids(self) -> None:
        at = open_app_page(FIXTURE, "sessions")
        columns = list(at.dataframe[0].value.columns)
        assert columns.index("role") < columns.index("session")
        assert "name" not in columns  # no session here names its agent apart from its role
        assert Store(FIXTURE).sessions()
