"""OpenPoke in the workbench: open a data dir through a temporary store, show the two tracks.

Plain functions, no Streamlit: the Sessions page imports an OpenPoke directory on the
fly with :func:`import_to_temporary_store`, and the Context page lays out
:func:`two_tracks` for an imported interaction session.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

from importers.openpoke import (
    ImportReport,
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


def report_lines(report: ImportReport) -> list[str]:
    """What an import did, one line each, for the page."""
    lines = [
        f"{report.entries} conversation entries read from {report.data_dir} (time zone {report.timezone})",
        f"{len(report.sessions)} sessions in the temporary store {report.store_dir}",
    ]
    if report.summary is not None:
        lines.append(f"a working-memory summary up to entry {report.summary.last_index}")
    lines += [f"skipped {s.file}:{s.line}: {s.reason}" for s in report.skipped]
    lines += report.notices
    return lines


def is_interaction(session: Session) -> bool:
    return is_openpoke_session(session) and openpoke_state(session).get("kind") == "interaction"


@dataclass(frozen=True)
class TwoTracks:
    """The raw log and the working memory at one entry, as texts for two columns."""

    entry: int
    raw_log: str
    raw_source: str
    skipped: list[str]
    working_memory: str
    rule: str
    notes: list[str]


def entry_choices(session: Session) -> list[tuple[int, str]]:
    """(entry index, label) of every imported entry, for a picker."""
    return [(e.index, f"{e.index}  {e.tag}  {e.timestamp}") for e in conversation_entries(session)]


def two_tracks(session: Session, entry: int) -> TwoTracks:
    tracks = tracks_at(session, entry)
    memory = tracks.working_memory
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
    )
