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
  log_store.py:ExecutionAgentLogStore._append``, timestamped then, to the second);
* the agent then runs, and its result reaches the conversation log as an ``agent_message``
  holding one ``[SUCCESS] <name>: …`` or ``[FAILED] <name>: …`` line per agent of the
  batch (``server/agents/execution_agent/batch_manager.py:_format_batch_payload``), so a
  name is on the roster by the first entry that reports it; trigger runs report through
  the same batch manager, for agents that exist already;
* a name is **never removed**, except by ``DELETE /chat/history``
  (``server/routes/chat.py:clear_history``, ``AgentRoster.clear``), which deletes the
  conversation log and every execution log with it, so a log that survives never saw
  its names removed.

So the names join in roster.json's order, each at its first ``agent_request``, and each
before its first report. What is certain at entry ``i`` (logged at second ``t``):

* **on the roster**: a name reported at or before entry ``i``, or whose first request
  was logged at an earlier second than ``t``; and every name before one of those in
  roster.json (it joined earlier);
* **not yet**: a name whose first request, or the first request of a name before it in
  roster.json, was logged at a later second than ``t``.

Anything else is not known from the files: a first request in the same second as the
entry (the roster is read just after the entry is logged, and the name may have been
added on either side of that), or a name no ``agent_request`` of its own dates (no log,
or a log whose slug another name shares) between the bounds its neighbours give. Such a
name is left out (a name usually joins in the turn just before its first report) and the
notes name it and why.
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
_STATUSES = ("[SUCCESS] ", "[FAILED] ")


def reported_names(text: str, names: set[str]) -> list[str]:
    """The roster names an ``agent_message`` reports on: lines ``[SUCCESS] <name>: …`` or
    ``[FAILED] <name>: …``. A name may itself hold ``": "``, so each place one could end
    is tried, shortest first."""
    found: list[str] = []
    for line in text.split("\n"):
        status = next((s for s in _STATUSES if line.startswith(s)), None)
        if status is None:
            continue
        rest = line[len(status) :]
        end = rest.find(": ")
        while end != -1:
            if rest[:end] in names:
                found.append(rest[:end])
                break
            end = rest.find(": ", end + 1)
    return found


def _first_reports(data: OpenPokeData) -> dict[str, int]:
    """For each roster name, the index of the first ``agent_message`` reporting on it."""
    names = set(data.roster)
    first: dict[str, int] = {}
    for entry in data.entries:
        if entry.tag == "agent_message":
            for name in reported_names(entry.text, names):
                first.setdefault(name, entry.index)
    return first


def roster_history(data: OpenPokeData) -> list[dict[str, Any]]:
    """For each roster.json name, in its order, the evidence of when it joined: the UTC
    instant of its first ``agent_request`` (``added_by``, or None and why not) and the
    index of the first entry reporting on it (``reported_in``, or None). Stored in the
    interaction session's state at import."""
    logs = {log.slug: log for log in data.execution_logs}
    reports = _first_reports(data)
    claimed: set[str] = set()
    history: list[dict[str, Any]] = []
    for name in data.roster:
        slug = slugify(name)
        log = logs.get(slug)
        item: dict[str, Any] = {"name": name, "added_by": None, "reported_in": reports.get(name)}
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


@dataclass(frozen=True)
class _Joined:
    """What bounds one name's joining: its own first request and its neighbours'."""

    name: str
    added: datetime | None  # its own first agent_request
    source: str
    unknown: str
    not_before: datetime | None  # the latest first request of a name up to it in roster order
    by_time: datetime | None  # the earliest first request of a name from it on
    by_entry: int | None  # the earliest report of a name from it on


def _bounds(history: list[Any]) -> list[_Joined]:
    items = [i for i in history if isinstance(i, dict) and isinstance(i.get("name"), str)]
    added = [_moment(i.get("added_by")) for i in items]
    reported = [i.get("reported_in") if isinstance(i.get("reported_in"), int) else None for i in items]
    after: list[datetime | None] = [None] * len(items)
    by_entry: list[int | None] = [None] * len(items)
    later_time: datetime | None = None
    later_entry: int | None = None
    for k in range(len(items) - 1, -1, -1):
        if added[k] is not None and (later_time is None or added[k] < later_time):  # type: ignore[operator]
            later_time = added[k]
        if reported[k] is not None and (later_entry is None or reported[k] < later_entry):  # type: ignore[operator]
            later_entry = reported[k]
        after[k], by_entry[k] = later_time, later_entry
    joined: list[_Joined] = []
    earlier: datetime | None = None
    for k, item in enumerate(items):
        if added[k] is not None and (earlier is None or added[k] > earlier):  # type: ignore[operator]
            earlier = added[k]
        joined.append(
            _Joined(
                item["name"],
                added[k],
                str(item.get("source", "")),
                str(item.get("unknown", "no first agent_request")),
                earlier,
                after[k],
                by_entry[k],
            )
        )
    return joined


def _at_import(roster: list[str], why: str) -> ActiveAgents:
    return ActiveAgents(
        tuple(roster), (f"active agents: roster.json as read at import ({len(roster)} names): {why}",)
    )


def roster_at(session: Session, entry_index: int) -> ActiveAgents:
    """The roster OpenPoke read when entry ``entry_index`` arrived (module docstring)."""
    state = openpoke_state(session)
    roster = [str(name) for name in state.get("roster", [])]
    history = state.get("roster_history")
    if not isinstance(history, list):
        return _at_import(
            roster,
            "this session was imported before the roster's history was kept; import it again to rebuild it "
            "per entry",
        )
    entry = next((e for e in conversation_entries(session) if e.index == entry_index), None)
    arrived = entry.instant(session_zone(session)) if entry is not None else None
    names: list[str] = []
    later: list[str] = []
    same: list[str] = []
    unsure: list[str] = []
    joined = _bounds(history)
    for item in joined:
        reported = item.by_entry is not None and item.by_entry <= entry_index
        if reported or (arrived is not None and item.by_time is not None and item.by_time < arrived):
            names.append(item.name)
        elif arrived is not None and item.not_before is not None and arrived < item.not_before:
            later.append(item.name)
        elif item.added is not None and item.added == arrived:
            same.append(f"{item.name!r} ({item.source})")
        else:
            unsure.append(f"{item.name!r} ({_window(item, entry_index, arrived)})")
    notes = [
        f"active agents: rebuilt at entry {entry_index} from the execution logs and the agents' reports: "
        f"{len(names)} of the {len(joined)} roster.json names (a name joins with its first agent_request, "
        "before its first report, in roster.json's order, and never leaves)"
        + (f"; not yet added: {', '.join(repr(n) for n in later)}" if later else "")
    ]
    if same:
        notes.append(
            f"active agents: first agent_request in the same second as entry {entry_index}, so it may have "
            f"been added just before or just after OpenPoke read the roster; left out: {', '.join(same)}"
        )
    if unsure:
        notes.append(
            f"active agents: whether these had joined by entry {entry_index} is not known; left out: "
            + ", ".join(unsure)
        )
    return ActiveAgents(tuple(names), tuple(notes))


def _window(item: _Joined, entry_index: int, arrived: datetime | None) -> str:
    why = item.unknown if item.added is None else f"first agent_request {item.source}"
    if arrived is None:
        return f"{why}; entry {entry_index} has no readable timestamp and nothing reports the name by then"
    if item.by_time is not None and item.by_time == arrived:
        return f"{why}; a name after it in roster.json was first asked in the same second"
    if item.not_before is not None and item.not_before == arrived:
        return f"{why}; a name before it in roster.json was first asked in the same second"
    first_report = f"entry {item.by_entry}" if item.by_entry is not None else "no entry"
    return f"{why}; it joined after {_utc(item.not_before) or 'the log began'}, and {first_report} reports it"


def _utc(moment: datetime | None) -> str:
    return "" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")
