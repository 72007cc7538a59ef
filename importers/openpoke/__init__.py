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

The names used outside the package are re-exported here; the rest stay in the private
``_modules`` (where the functions named above live).
"""

from importers._errors import ImporterError
from importers.openpoke._addressing import materialize_at
from importers.openpoke._import import ImportReport, import_openpoke
from importers.openpoke._log import RawLine, format_line, parse_log
from importers.openpoke._mapping import (
    EXECUTION_ROLE,
    SUMMARY_TAG,
    is_openpoke_session,
    openpoke_meta,
    openpoke_state,
)
from importers.openpoke._materialize import INTERACTION_TOOLS, PLACEHOLDER_PROMPT, materialize_entry
from importers.openpoke._memory import conversation_entries, tracks_at, working_memory_at
from importers.openpoke._reader import find_data_dir, read_openpoke
from importers.openpoke._roster import roster_at, roster_history
from replay import AddressError  # raised by materialize_at, named here as before

__all__ = [
    "EXECUTION_ROLE",
    "INTERACTION_TOOLS",
    "PLACEHOLDER_PROMPT",
    "SUMMARY_TAG",
    "AddressError",
    "ImportReport",
    "ImporterError",
    "RawLine",
    "conversation_entries",
    "find_data_dir",
    "format_line",
    "import_openpoke",
    "is_openpoke_session",
    "materialize_at",
    "materialize_entry",
    "openpoke_meta",
    "openpoke_state",
    "parse_log",
    "read_openpoke",
    "roster_at",
    "roster_history",
    "tracks_at",
    "working_memory_at",
]
