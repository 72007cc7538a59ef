"""OpenPoke (``shlokkhemani/OpenPoke``) as a source of sOAP sessions.

* :func:`read_openpoke` reads a ``server/data`` dir exactly as OpenPoke does and reports
  the lines OpenPoke would skip (:mod:`._log`, :mod:`._reader`).
* :func:`import_openpoke` writes the interaction agent, its summary (as a fork) and each
  execution agent as sessions, linked by invocation records; idempotent (:mod:`._import`,
  mapping in :mod:`._mapping`).
* :func:`working_memory_at` and :func:`tracks_at` give the two tracks at an entry: the raw
  log and the working memory as the model saw it (:mod:`._memory`).
* :func:`materialize_entry` rebuilds the interaction agent's request at an entry; replay's
  ``materialize`` dispatches to it for imported sessions (:mod:`._materialize`), and
  :func:`entry_position` finds an entry by its number; :func:`roster_at` gives the
  ``<active_agents>`` of that request (:mod:`._roster`).
* Times: :func:`resolve_folds` reads a DST fall-back's repeated hour by the log's order,
  once, in the reader; :func:`entry_instant` is every entry's UTC instant (:mod:`._reader`).

Public names are re-exported here; the ``_modules`` behind them are private.
"""

from importers._errors import ImporterError
from importers.openpoke._addressing import materialize_at, resolve_target
from importers.openpoke._import import ImportReport, SessionReport, SummaryReport, import_openpoke
from importers.openpoke._log import (
    LogEntry,
    ParsedLog,
    RawLine,
    SkippedLine,
    decode_payload,
    encode_payload,
    format_line,
    parse_line,
    parse_log,
    render_entry,
    render_transcript,
)
from importers.openpoke._mapping import (
    EXECUTION_ROLE,
    INTERACTION_ROLE,
    META_KEY,
    SOURCE,
    STATE_KEY,
    SUMMARY_TAG,
    is_openpoke_session,
    openpoke_meta,
    openpoke_state,
)
from importers.openpoke._materialize import (
    INTERACTION_TOOLS,
    OPENPOKE_MODEL,
    OPENPOKE_PARAMETERS,
    PLACEHOLDER_PROMPT,
    entry_position,
    materialize_entry,
    openpoke_request,
    render_request_content,
)
from importers.openpoke._memory import (
    KnownSummary,
    OpenPokeTracks,
    TranscriptEntry,
    WorkingMemoryState,
    conversation_entries,
    known_summaries,
    tracks_at,
    working_memory_at,
)
from importers.openpoke._reader import (
    ExecutionLog,
    OpenPokeData,
    WorkingMemory,
    entry_instant,
    find_data_dir,
    read_openpoke,
    resolve_folds,
    slugify,
    to_utc,
)
from importers.openpoke._roster import ActiveAgents, roster_at, roster_history
from replay import AddressError  # raised by materialize_at, named here as before
from soap_core import SOURCE_KEY

__all__ = [
    "EXECUTION_ROLE",
    "INTERACTION_ROLE",
    "INTERACTION_TOOLS",
    "META_KEY",
    "OPENPOKE_MODEL",
    "OPENPOKE_PARAMETERS",
    "PLACEHOLDER_PROMPT",
    "SOURCE",
    "SOURCE_KEY",
    "STATE_KEY",
    "SUMMARY_TAG",
    "ActiveAgents",
    "AddressError",
    "ExecutionLog",
    "ImportReport",
    "ImporterError",
    "KnownSummary",
    "LogEntry",
    "OpenPokeData",
    "OpenPokeTracks",
    "ParsedLog",
    "RawLine",
    "SessionReport",
    "SkippedLine",
    "SummaryReport",
    "TranscriptEntry",
    "WorkingMemory",
    "WorkingMemoryState",
    "conversation_entries",
    "decode_payload",
    "encode_payload",
    "entry_instant",
    "entry_position",
    "find_data_dir",
    "format_line",
    "import_openpoke",
    "is_openpoke_session",
    "known_summaries",
    "materialize_at",
    "materialize_entry",
    "openpoke_meta",
    "openpoke_request",
    "openpoke_state",
    "parse_line",
    "parse_log",
    "read_openpoke",
    "render_entry",
    "render_request_content",
    "render_transcript",
    "resolve_folds",
    "resolve_target",
    "roster_at",
    "roster_history",
    "slugify",
    "to_utc",
    "tracks_at",
    "working_memory_at",
]
