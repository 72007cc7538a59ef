"""Invocation records linking an imported OpenPoke conversation's sessions.

They are the runtime's records (``soapwb.invocation/1``, written with
``write_invocation``), so ``soapwb trace`` and ``invocation_chain`` walk them as any other:

* **A turn** of the interaction agent: each ``user_message`` or ``agent_message`` starts
  one (OpenPoke runs its interaction agent once per incoming message), and it ends at the
  last entry before the next one; its ``result`` lists the entries it logged. No caller
  (the user, or OpenPoke's batch manager, is not an object in the store). Written into
  the interaction session.
* **A hand-off** to an execution agent: an ``agent_request`` at local time T was made from
  the interaction root at the last entry at or before T (``caller.message_index``),
  inside that entry's turn (``parent_invocation_id``), and ends at the next
  ``agent_response``: outcome ``error`` when that reads ``Error: …``, or when another
  request comes first (a timeout leaves no response). Written into both sessions.

Times are UTC (the entry's local time read in the data dir's zone), as in the runtime's
records, and ids keep the runtime's shape (UTC time, then 8 hex digits) but are
deterministic, so importing again rewrites nothing.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from importers.openpoke._log import LogEntry
from importers.openpoke._mapping import (
    EXECUTION_ROLE,
    INCOMING_TAGS,
    INTERACTION_OBJECT,
    INTERACTION_ROLE,
    stable_id,
)
from importers.openpoke._reader import ExecutionLog, entry_instant
from soap_core import (
    Context,
    InvocationRecord,
    Party,
    Session,
)

_NO_TIME = "00000000T000000000000"


@dataclass
class Imported:
    """A session the import wrote, its root context and the directory it lives in."""

    session: Session
    root: Context
    directory: Path


def _utc_text(moment: datetime | None, fallback: str) -> str:
    return moment.isoformat() if moment is not None else fallback


def _record_id(moment: datetime | None, *key: object) -> str:
    """Like the runtime's ids (a UTC time, then 8 hex digits), but deterministic."""
    stamp = moment.strftime("%Y%m%dT%H%M%S%f") if moment is not None else _NO_TIME
    return f"{stamp}-{uuid.UUID(stable_id(*key)).hex[:8]}"


def _party(role: str, object_id: str, imported: Imported, index: int) -> Party:
    """The object of an imported session, at message ``index`` of its root context."""
    root = imported.root
    return Party(role, object_id, imported.session.uuid, root.id, index, root.messages[index].id)


def _interaction_party(imported: Imported, index: int) -> Party:
    return _party(INTERACTION_ROLE, INTERACTION_OBJECT, imported, index)


def turns(imported: Imported, entries: tuple[LogEntry, ...], zone: ZoneInfo) -> list[InvocationRecord]:
    """One record per turn of the interaction agent."""
    starts = [e.index for e in entries if e.tag in INCOMING_TAGS]
    records = []
    for number, start in enumerate(starts):
        end = starts[number + 1] if number + 1 < len(starts) else len(entries)
        first, last = entries[start], entries[end - 1]
        began = entry_instant(first, zone)
        records.append(
            InvocationRecord(
                id=_record_id(began, imported.session.uuid, "turn", start),
                callee=_interaction_party(imported, start),
                caller=None,
                prompt=first.text,
                thread=None,
                started_at=_utc_text(began, first.timestamp),
                ended_at=_utc_text(entry_instant(last, zone), last.timestamp),
                outcome="ok",
                result=[{"index": e.index, "tag": e.tag, "text": e.text} for e in entries[start + 1 : end]],
            )
        )
    return records


def _call_site(entries: tuple[LogEntry, ...], moment: datetime | None, zone: ZoneInfo) -> int | None:
    """The last interaction entry at or before ``moment`` (UTC): instants, not local
    texts, so that a DST fall-back's repeated hour orders right (both logs' folds come
    from their own order, :func:`importers.openpoke._reader.resolve_folds`)."""
    if moment is None:
        return None
    site = None
    for entry in entries:
        instant = entry_instant(entry, zone)
        if instant is not None and instant <= moment:
            site = entry.index
    return site


def handoffs(
    execution: Imported,
    log: ExecutionLog,
    interaction: Imported | None,
    entries: tuple[LogEntry, ...],
    turns: list[InvocationRecord],
    zone: ZoneInfo,
) -> list[InvocationRecord]:
    """One record per ``agent_request``, ended by the next ``agent_response``."""
    records: list[InvocationRecord] = []
    open_record: InvocationRecord | None = None
    turn_of = {r.callee.message_index: r.id for r in turns}
    for entry in log.log.entries:
        if entry.tag == "agent_request":
            if open_record is not None:
                open_record.outcome = "error"
                open_record.error = "no agent_response before the next agent_request (timed out or crashed?)"
            began = entry_instant(entry, zone)
            site = _call_site(entries, began, zone)
            turn = max((i for i in turn_of if i is not None and site is not None and i <= site), default=None)
            open_record = InvocationRecord(
                id=_record_id(began, execution.session.uuid, "handoff", entry.index),
                callee=_party(EXECUTION_ROLE, log.name, execution, entry.index),
                caller=_interaction_party(interaction, site) if interaction and site is not None else None,
                prompt=entry.text,
                thread=log.name,
                started_at=_utc_text(began, entry.timestamp),
                parent_invocation_id=turn_of[turn] if turn is not None else None,
            )
            records.append(open_record)
        elif entry.tag == "agent_response" and open_record is not None:
            open_record.ended_at = _utc_text(entry_instant(entry, zone), entry.timestamp)
            if entry.text.startswith("Error:"):
                open_record.outcome, open_record.error = "error", entry.text
            else:
                open_record.outcome, open_record.result = "ok", entry.text
            open_record = None
    return records


def link_records(
    interaction: Imported | None,
    executions: list[tuple[ExecutionLog, Imported]],
    entries: tuple[LogEntry, ...],
    zone: ZoneInfo,
) -> list[tuple[InvocationRecord, list[Path]]]:
    """Every record of the import, with the session folders it goes into."""
    turn_records = turns(interaction, entries, zone) if interaction is not None else []
    records = [(record, [interaction.directory]) for record in turn_records if interaction is not None]
    for log, execution in executions:
        folders = [execution.directory] + ([interaction.directory] if interaction is not None else [])
        records.extend(
            (record, folders) for record in handoffs(execution, log, interaction, entries, turn_records, zone)
        )
    return records
