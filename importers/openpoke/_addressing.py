"""Addressing a request with ``--at``: log entries of an OpenPoke session, display
positions elsewhere, and an OpenPoke checkout for the system prompt; one function for
the command line and the pages.

Plain ``N`` is a log entry number for a session imported from OpenPoke, as the README
promises: entry numbers are OpenPoke's own (``last_index`` counts them) and never move,
while the display positions of the active summary fork shift with every new summary.
Elsewhere it is a display index. ``entry:N`` and ``message:N`` say which.
"""

from __future__ import annotations

from pathlib import Path

from importers.openpoke._mapping import SUMMARY_TAG, is_openpoke_session, openpoke_meta
from importers.openpoke._materialize import entry_position, materialize_entry
from replay import Materialized, materialize, number_of, resolve_index
from soap_core import Context, Session


def resolve_target(session: Session, context_id: str | None, at: str) -> tuple[Context, int | str, list[str]]:
    """The context and the ``at`` (display index or message id) that ``--at`` names, and
    notes for the output."""
    context = session.context(context_id) if context_id else session.active_context
    kind, sep, rest = at.partition(":")
    if sep and kind in ("entry", "message"):
        number = number_of(rest, at)
        if kind == "message":
            return context, number, []
        return (*entry_position(session, number, context if context_id else None), [])
    if is_openpoke_session(session) and at.strip().lstrip("-").isdigit():
        target, index = entry_position(session, int(at), context if context_id else None)
        note = None if context_id else _position_note(context, int(at), target, index)
        return target, index, [note] if note else []
    return context, at, []


def _position_note(active: Context, number: int, target: Context, index: int) -> str | None:
    """A warning when plain ``N`` (an entry) and display index N of the active context
    (what ``soapwb show`` numbers) are different messages."""
    shown = number + len(active.messages) if number < 0 else number
    if not 0 <= shown < len(active.messages) or active.messages[shown].id == target.messages[index].id:
        return None
    meta = openpoke_meta(active.messages[shown])
    if meta is not None and meta["tag"] == SUMMARY_TAG:
        what = "the working memory's summary"
    elif meta is not None and isinstance(meta.get("index"), int):
        what = f"entry {meta['index']}"
    else:
        what = "not a log entry"
    return (
        f"--at {number} is log entry {number}; message {shown} of the active context {active.id} "
        f"(as `soapwb show` numbers it) is {what}: --at message:{shown} gives that one"
    )


def materialize_at(
    session: Session, context_id: str | None, at: str, *, openpoke_root: Path | None = None
) -> Materialized:
    """The request ``context_id``/``at`` name, with ``openpoke_root`` for an OpenPoke entry
    (replay asks this of OpenPoke sessions only: it refuses ``entry:N`` and a checkout for
    the others itself)."""
    context, target, notes = resolve_target(session, context_id, at)
    root = openpoke_root
    rebuilt = (
        materialize_entry(session, context, resolve_index(context, target), openpoke_root=root)
        if root is not None
        else None
    )
    found = rebuilt or materialize(session, context, target)
    if root is not None and rebuilt is None:
        notes.append("--openpoke-root not used: this message is not an imported OpenPoke entry")
    found.notes[:0] = notes  # first: a warning about what --at meant
    return found
