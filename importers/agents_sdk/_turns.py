"""The turns of an imported session as invocation records: one per ``Runner.run`` the
file shows (a user item and what the agents did until the next one), listing its calls,
so the traceback and the timeline show the session's turns.

A turn belongs to the context that holds it whole: the root's turns there, and in a fork
(a history ``pop_item`` rewrote) the turns from the one it diverged in on, under ids of
their own, so the first history keeps its records.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from importers.agents_sdk._items import META_KEY, call_id, meta_of, stable_id
from soap_core import Context, InvocationRecord, Message, Party, Session, is_marked


def own_start(session: Session, context: Context) -> int:
    """How many of ``context``'s first messages it copied from the context it forks."""
    parent = session.contexts.get(context.origin_context_id or "")
    if parent is None:
        return 0
    ids = {m.id for m in parent.messages}
    return next((i for i, m in enumerate(context.messages) if m.id not in ids), len(context.messages))


def turns(session: Session, context: Context) -> list[list[Message]]:
    """The turns ``context`` holds whole (see the module's notes), imported messages only."""
    found: list[list[Message]] = []
    for message in context.messages:
        if META_KEY not in (message.metadata or {}):
            continue
        if message.role == "user" or not found:
            found.append([])
        found[-1].append(message)
    start = own_start(session, context)
    if start == 0:
        return found
    owned = {m.id for m in context.messages[start:]}
    return [turn for turn in found if any(m.id in owned for m in turn)]


def turn_id(key: str, context: Context, turn: Sequence[Message]) -> str:
    """The record id of a turn: in the calls' shape, its first message's time and row."""
    first = turn[0]
    stamp = (first.creation_timestamp or "")[:19].replace("-", "").replace(":", "")
    rows = meta_of(first).get("rows") or [0]
    return f"{stamp}{rows[0] % 1_000_000:06d}-{stable_id(key, 'turn', context.id, first.id)[:8]}"


def turn_records(
    session: Session, key: str, directory: Path, start_agent: str | None
) -> tuple[list[tuple[InvocationRecord, list[Path]]], dict[str, str]]:
    """An invocation record per turn of every imported context, and the turn of each call
    (call id to invocation id)."""
    records: list[tuple[InvocationRecord, list[Path]]] = []
    of_call: dict[str, str] = {}
    for context in session.contexts.values():
        if is_marked(context):  # the workbench's replays and re-runs: not the app's turns
            continue
        for turn in turns(session, context):
            answers = [m for m in turn if m.role == "assistant"]
            record_id = turn_id(key, context, turn)
            calls = [call_id(key, m) for m in answers]
            of_call.update(dict.fromkeys(calls, record_id))
            agent = next((meta_of(m).get("agent") for m in answers if meta_of(m).get("agent")), None)
            last = turn[-1]
            record = InvocationRecord(
                id=record_id,
                callee=Party(session.role, start_agent or agent or session.role, session.uuid, context.id),
                caller=None,
                prompt=turn[0].text() if turn[0].role == "user" else "",
                thread=None,
                started_at=turn[0].creation_timestamp or "",
                ended_at=last.creation_timestamp,
                outcome="ok" if last.role == "assistant" and not last.tool_uses() else "running",
                result=last.text() if last.role == "assistant" and not last.tool_uses() else None,
                calls=calls,
            )
            records.append((record, [directory]))
    return records, of_call
