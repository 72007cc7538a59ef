"""OpenPoke in the workbench: open a data dir through a temporary store, show the two tracks.

Plain functions, no Streamlit: the Sessions page imports an OpenPoke directory on the
fly with :func:`import_to_temporary_store` and shows :func:`import_summary` (a headline,
the sessions by agent name, the diagnostics folded); the Context page names an imported
session by its agent (:func:`session_name`) and lays out :func:`two_tracks` for an
interaction session, the chosen entry marked in the raw log.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

from importers.openpoke import (
    ImportReport,
    RawLine,
    conversation_entries,
    find_data_dir,
    import_openpoke,
    is_openpoke_session,
    openpoke_state,
    tracks_at,
)
from soap_core import Session


def temporary_store_for(data_dir: Path) -> Path:
    """One temporary store per OpenPoke directory: opening it again reuses (and updates)
    the same store, since importing is idempotent and incremental."""
    key = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"soapwb-openpoke-{key}"


def import_to_temporary_store(directory: str) -> ImportReport:
    """Import an OpenPoke checkout or ``server/data`` dir into its temporary store."""
    data_dir = find_data_dir(Path(directory).expanduser())
    return import_openpoke(data_dir, temporary_store_for(data_dir))


def report_facts(report: ImportReport) -> list[str]:
    """What an import read and wrote, one line each."""
    lines = [
        f"{report.entries} conversation entries read from {report.data_dir} (time zone {report.timezone})",
        f"{len(report.sessions)} sessions in the temporary store {report.store_dir}",
    ]
    if report.summary is not None:
        lines.append(f"a working-memory summary up to entry {report.summary.last_index}")
    lines += [f"execution agent {name}: {count} entries" for name, count in report.execution_agents.items()]
    return lines


def report_diagnostics(report: ImportReport) -> list[str]:
    """The lines OpenPoke skips and the importer's notices, one line each."""
    return [f"skipped {s.file}:{s.line}: {s.reason}" for s in report.skipped] + list(report.notices)


@dataclass(frozen=True)
class ImportedSession:
    """One session an import wrote, named by its agent."""

    name: str
    """``the interaction agent`` or the execution agent's roster name."""
    role: str
    uuid: str
    status: str
    messages: int


@dataclass(frozen=True)
class ImportSummary:
    """What the Sessions page shows after an import: a line to read, the sessions to
    open, and the diagnostics (skipped lines, notices) to unfold when wanted."""

    headline: str
    store: str
    """The temporary store the sessions were written to."""
    sessions: list[ImportedSession]
    details: list[str]
    """Where it read from and what it found (:func:`report_facts`)."""
    diagnostics: list[str]
    """The lines OpenPoke skips and the importer's notices (the ones worth a look)."""


def import_summary(report: ImportReport) -> ImportSummary:
    """An import report as the Sessions page lays it out."""
    sessions = [
        ImportedSession(
            "the interaction agent" if s.uuid == report.interaction_session else s.name,
            s.role,
            s.uuid,
            s.status,
            s.messages,
        )
        for s in report.sessions
    ]
    agents = len(report.execution_agents)
    headline = (
        f"Imported {report.entries} conversation entries and {agents} execution "
        f"agent{'' if agents == 1 else 's'}: {len(sessions)} session{'' if len(sessions) == 1 else 's'}"
    )
    return ImportSummary(
        headline, str(report.store_dir), sessions, report_facts(report), report_diagnostics(report)
    )


def diagnostics_label(summary: ImportSummary) -> str:
    """``Import diagnostics (3)``: the label of the folded report, with what is worth a look."""
    found = len(summary.diagnostics)
    return f"Import diagnostics ({found} to look at)" if found else "Import details (nothing skipped)"


def session_name(session: Session) -> str | None:
    """How an imported OpenPoke session is named on a page (its agent), or None for a
    session that is not one."""
    if not is_openpoke_session(session):
        return None
    state = openpoke_state(session)
    if state.get("kind") == "execution":
        agent = state.get("agent")
        return f"OpenPoke execution agent {agent}" if isinstance(agent, str) else "OpenPoke execution agent"
    return "OpenPoke interaction agent"


def is_interaction(session: Session) -> bool:
    return is_openpoke_session(session) and openpoke_state(session).get("kind") == "interaction"


LOG_TAIL = 12
"""Raw log lines shown before the chosen entry's (the whole log is folded below them)."""


@dataclass(frozen=True)
class TwoTracks:
    """The raw log and the working memory at one entry, as texts to stack full width."""

    entry: int
    raw_log: str
    """The log's lines up to and including the entry's, as in the file."""
    raw_source: str
    skipped: list[str]
    working_memory: str
    rule: str
    notes: list[str]
    entry_line: str
    """The chosen entry's line as it is in the file ("" when the log does not hold it)."""
    entry_line_number: int | None
    marked_tail: str
    """The last :data:`LOG_TAIL` lines before the entry's and the entry's own, numbered,
    the entry's marked ``▶`` and lines OpenPoke skips marked ``✗``."""
    lines: int
    """Lines in :attr:`raw_log`."""


def entry_choices(session: Session) -> list[tuple[int, str]]:
    """(entry index, label) of every imported entry, for a picker."""
    return [(e.index, f"{e.index}  {e.tag}  {e.timestamp}") for e in conversation_entries(session)]


def marked_lines(lines: tuple[RawLine, ...], entry: int) -> list[str]:
    """Each raw line numbered as in its file, the entry's marked ``▶``, a skipped one ``✗``."""
    width = len(str(lines[-1].number)) if lines else 1
    marked = []
    for line in lines:
        mark = "▶" if line.entry_index == entry else "✗" if line.skipped_reason else " "
        marked.append(f"{mark} {line.number:>{width}}  {line.text}")
    return marked


def two_tracks(session: Session, entry: int) -> TwoTracks:
    tracks = tracks_at(session, entry)
    memory = tracks.working_memory
    marked = marked_lines(tracks.raw_lines, entry)
    chosen = next((line for line in reversed(tracks.raw_lines) if line.entry_index == entry), None)
    return TwoTracks(
        entry=entry,
        raw_log="\n".join(line.text for line in tracks.raw_lines),
        raw_source=tracks.raw_lines_source,
        skipped=[
            f"line {line.number}: {line.skipped_reason}" for line in tracks.raw_lines if line.skipped_reason
        ],
        working_memory=memory.transcript or "(empty: nothing before this entry)",
        rule=memory.rule,
        notes=list(memory.notes),
        entry_line=chosen.text if chosen else "",
        entry_line_number=chosen.number if chosen else None,
        marked_tail="\n".join(marked[-(LOG_TAIL + 1) :]),
        lines=len(marked),
    )
