"""OpenPoke on the pages: the import report as a headline, sessions named by their
agents and the diagnostics folded (Sessions page), and the two tracks stacked full
width with the chosen entry marked in the raw log (Context page)."""

from __future__ import annotations

from pathlib import Path

from importers.openpoke import conversation_entries, import_openpoke
from soap_core import Store
from tests.apptest import open_app_page
from workbench.openpoke_views import (
    LOG_TAIL,
    diagnostics_label,
    import_summary,
    session_name,
    two_tracks,
)

OPENPOKE = Path(__file__).resolve().parent / "fixtures" / "openpoke"
SOAP = Path(__file__).resolve().parent / "fixtures" / "soap"


class TestImportSummary:
    def test_the_long_log_reads_as_one_line_sessions_by_agent_and_folded_details(
        self, tmp_path: Path
    ) -> None:
        report = import_openpoke(OPENPOKE / "long", tmp_path / "store")
        summary = import_summary(report)
        assert summary.headline == "Imported 112 conversation entries and 1 execution agent: 2 sessions"
        names = sorted(s.name for s in summary.sessions)
        assert names == sorted(["the interaction agent", *report.execution_agents])
        assert summary.store == str(tmp_path / "store")
        assert summary.details[0].startswith("112 conversation entries read from ")
        assert summary.diagnostics == [
            *(f"skipped {s.file}:{s.line}: {s.reason}" for s in report.skipped),
            *report.notices,
        ]

    def test_skipped_lines_are_counted_in_the_label(self, tmp_path: Path) -> None:
        report = import_openpoke(OPENPOKE / "legacy", tmp_path / "store")
        summary = import_summary(report)
        assert report.skipped and len(summary.diagnostics) >= len(report.skipped)
        assert diagnostics_label(summary) == f"Import diagnostics ({len(summary.diagnostics)} to look at)"

    def test_imported_sessions_are_named_by_their_agent(self, tmp_path: Path) -> None:
        report = import_openpoke(OPENPOKE / "long", tmp_path / "store")
        store = Store(tmp_path / "store")
        interaction = store.load_session(report.interaction_session or "")
        assert session_name(interaction) == "OpenPoke interaction agent"
        [(agent, uuid)] = report.execution_sessions.items()
        assert session_name(store.load_session(uuid)) == f"OpenPoke execution agent {agent}"
        assert session_name(Store(SOAP).load_session("20250611-3f0c")) is None


class TestTwoTracks:
    def test_the_chosen_entry_is_the_marked_last_line_of_the_log_shown(self, tmp_path: Path) -> None:
        report = import_openpoke(OPENPOKE / "long", tmp_path / "store")
        session = Store(tmp_path / "store").load_session(report.interaction_session or "")
        tracks = two_tracks(session, 50)
        tail = tracks.marked_tail.splitlines()
        assert len(tail) == LOG_TAIL + 1 and tracks.entry_line_number is not None
        assert tail[-1] == f"▶ {tracks.entry_line_number}  {tracks.entry_line}"  # the widest number
        assert tracks.raw_log.splitlines()[-1] == tracks.entry_line
        assert not any(line.startswith("▶") for line in tail[:-1])
        assert tracks.lines == len(tracks.raw_log.splitlines())

    def test_lines_openpoke_skips_are_marked(self, tmp_path: Path) -> None:
        report = import_openpoke(OPENPOKE / "legacy", tmp_path / "store")
        session = Store(tmp_path / "store").load_session(report.interaction_session or "")
        tracks = two_tracks(session, conversation_entries(session)[-1].index)
        marks = [line[0] for line in tracks.marked_tail.splitlines()]
        assert "✗" in marks and marks[-1] == "▶"


class TestPages:
    def test_the_sessions_page_folds_the_diagnostics_and_links_each_agent(self) -> None:
        at = open_app_page(SOAP, "sessions")
        at.text_input(key="openpoke_dir").input(str(OPENPOKE / "long")).run()
        at.button(key="openpoke_open").click().run()
        assert not at.exception
        top = [t.value for t in at.main.text if t.value.startswith("Imported ")]
        assert top == ["Imported 112 conversation entries and 1 execution agent: 2 sessions"]
        [folded] = [e for e in at.expander if e.label.startswith("Import d")]
        assert not folded.proto.expanded
        assert any(t.value.startswith("112 conversation entries read from ") for t in folded.text)
        links = [link.proto.label for link in at.page_link if link.proto.page == "context"]
        assert any(label.startswith("the interaction agent") for label in links)
        assert any(label.startswith("Dana") for label in links), links

    def test_the_two_tracks_are_stacked_full_width_with_the_entry_marked(self, tmp_path: Path) -> None:
        report = import_openpoke(OPENPOKE / "long", tmp_path / "store")
        session = Store(tmp_path / "store").load_session(report.interaction_session or "")
        at = open_app_page(tmp_path / "store", "context", session=session.uuid, entry="111")
        expected = two_tracks(session, 111)
        assert not at.columns
        codes = list(at.code)
        assert expected.marked_tail in [c.value for c in codes]
        assert expected.raw_log in [c.value for c in codes] and expected.working_memory in [
            c.value for c in codes
        ]
        assert all(
            c.proto.wrap_lines for c in codes if c.value in (expected.marked_tail, expected.working_memory)
        )
        texts = [t.value for t in at.text]
        assert "OpenPoke interaction agent" in texts
        assert any(
            t.endswith(f"up to entry 111 (line {expected.entry_line_number}), marked ▶:") for t in texts
        )

    def test_an_execution_agents_context_is_headed_by_its_name(self, tmp_path: Path) -> None:
        report = import_openpoke(OPENPOKE / "long", tmp_path / "store")
        [(agent, uuid)] = report.execution_sessions.items()
        at = open_app_page(tmp_path / "store", "context", session=uuid)
        assert f"OpenPoke execution agent {agent}" in [t.value for t in at.text]
