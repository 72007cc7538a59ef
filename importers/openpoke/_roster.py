"""The execution-agent roster as it stood when an entry arrived.

OpenPoke sends the roster in every interaction request (``<active_agents>``, built by
``server/agents/interaction_agent/agent.py:_render_active_agents``, which re-reads
``execution_agents/roster.json`` right after the incoming entry is logged:
``runtime.py:InteractionAgentRuntime.execute`` and ``handle_agent_message`` record the
entry, then call ``prepare_message_with_history``). The file keeps no history, but how it
changes is simple:

* a name is **added** only in ``server/agents/interaction_agent/tools.py:send_message_to_agent``
  (``roster.add_agent``, appended at the end when it is new), immediately followed by
  ``get_execution_agent_logs().record_request``, which writes the name's first
  ``agent_request`` to ``execution_agents/<slug>.log`` (``server/services/execution/
  log_store.py:ExecutionAgentLogStore._append``, timestamped then);
* a name is **never removed**, except by ``DELETE /chat/history``
  (``server/routes/chat.py:clear_history``, ``AgentRoster.clear``), which deletes the
  conversation log and every execution log with it, so a log that survives never saw
  its names removed;
* trigger runs (``server/services/trigger_scheduler.py``) call the batch manager
  directly: they log no ``agent_request`` and add no name.

So the roster at entry ``i`` is roster.json's names, in its order, whose first
``agent_request`` was logged at an earlier second than entry ``i``. A request in the
same second is ambiguous (the roster is read just after entry ``i`` is logged, and the
name may have been added on either side of that): it is left out, and the notes say so.
A name whose log holds no ``agent_request`` (no log at all, or one whose slug another
name shares) cannot be dated: it is kept, as at import, and the notes say that too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from importers.openpoke._mapping import openpoke_state
from importers.openpoke._memory import conversation_entries, session_zone
from importers.openpoke._reader import OpenPokeData, entry_instant, parse_updated_at, slugify
from soap_core import Session

_FIRST = "agent_request"


def roster_history(data: OpenPokeData) -> list[dict[str, Any]]:
    """For each roster.json name, in its order, when it joined the roster: the UTC
    instant of its first ``agent_request`` (``added_by``), or None and why not.
    Stored in the interaction session's state at import."""
    logs = {log.slug: log for log in data.execution_logs}
    claimed: set[str] = set()
    history: list[dict[str, Any]] = []
    for name in data.roster:
        slug = slugify(name)
        log = logs.get(slug)
        item: dict[str, Any] = {"name": name, "added_by": None}
        if log is None:
            item["unknown"] = f"no execution_agents/{slug}.log"
        elif slug in claimed:
            item["unknown"] = f"execution_agents/{slug}.log is another roster name's too (the same slug)"
        else:
            claimed.add(slug)
            first = next((e for e in log.log.entries if e.tag == _FIRST), None)
            instant = entry_instant(first, data.zone) if first is not None else None
            if first is None or instant is None:
                item["unknown"] = f"{log.log.file} has no timed {_FIRST}"
            else:
                item["added_by"] = instant.isoformat()
                item["source"] = f"{log.log.file}:{first.line} ({first.timestamp})"
        history.append(item)
    return history


@dataclass(frozen=True)
class ActiveAgents:
    """The ``<active_agents>`` of the request at one entry, and how it was rebuilt."""

    names: tuple[str, ...]
    notes: tuple[str, ...]


def _moment(value: object) -> datetime | None:
    return parse_updated_at(value) if isinstance(value, str) and value else None


def roster_at(session: Session, entry_index: int) -> ActiveAgents:
    """The roster OpenPoke read when entry ``entry_index`` arrived (module docstring)."""
    state = openpoke_state(session)
    roster = [str(name) for name in state.get("roster", [])]
    history = state.get("roster_history")
    if not isinstance(history, list):
        return ActiveAgents(
            tuple(roster),
            (
                f"active agents: roster.json as read at import ({len(roster)} names): this session was "
                "imported before the roster's history was kept; import it again to rebuild it per entry",
            ),
        )
    entry = next((e for e in conversation_entries(session) if e.index == entry_index), None)
    arrived = entry.instant(session_zone(session)) if entry is not None else None
    if arrived is None:
        return ActiveAgents(
            tuple(roster),
            (
                f"active agents: roster.json as read at import ({len(roster)} names): entry {entry_index} has "
                "no readable timestamp to rebuild it at",
            ),
        )
    names: list[str] = []
    later: list[str] = []
    same: list[str] = []
    unknown: list[str] = []
    for item in history:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            continue
        name, added = item["name"], _moment(item.get("added_by"))
        if added is None:
            names.append(name)
            unknown.append(f"{name!r} ({item.get('unknown', 'no first agent_request')})")
        elif added < arrived:
            names.append(name)
        elif added == arrived:
            same.append(f"{name!r} ({item.get('source')})")
        else:
            later.append(name)
    notes = [
        f"active agents: rebuilt at entry {entry_index} from the execution logs: {len(names)} of the "
        f"{len(history)} roster.json names (a name joins with its first agent_request and never leaves)"
        + (f"; not yet added: {', '.join(repr(n) for n in later)}" if later else "")
    ]
    if same:
        notes.append(
            f"active agents: first agent_request in the same second as entry {entry_index}, so it may have "
            f"been added just before or just after OpenPoke read the roster; left out: {', '.join(same)}"
        )
    if unknown:
        notes.append(
            "active agents: when these joined is unknown, kept as in roster.json at import: "
            + ", ".join(unknown)
        )
    return ActiveAgents(tuple(names), tuple(notes))
