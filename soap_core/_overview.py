"""Summaries of sessions and messages, as listings (CLI and pages) show them.

These are plain values computed from the model, so a command, a page and a test all
get the same figures from one function.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from soap_core._catalog import SessionRow
from soap_core._context import Context
from soap_core._errors import SoapError
from soap_core._message import Message
from soap_core._parts import TextPart, ThinkingPart, ToolPart, ToolResultPart, ToolUsePart
from soap_core._store import SessionSummary, Store


@dataclass(frozen=True)
class SessionOverview:
    """One row of the session listing: the summary plus figures of the active context."""

    role: str
    uuid: str
    thread_id: str | None
    is_active: bool
    contexts: int
    messages: int | None
    tokens: int | None
    first_timestamp: str | None
    last_timestamp: str | None
    error: str | None
    instance: str | None = None
    """The peteos 0.6 instance whose thread_store claims the session."""
    layout: str = "agents"
    """``agents`` (peteos <= 0.5, our runtime) or ``sessions`` (peteos 0.6)."""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)  # every field a plain value: no deep copy (10,000 rows in ls)


def session_overview(store: Store, summary: SessionSummary) -> SessionOverview:
    """The listing row of one session; reads its active context file only."""
    figures: dict[str, Any] = {
        "messages": None,
        "tokens": None,
        "first_timestamp": None,
        "last_timestamp": None,
    }
    error = summary.error
    if error is None and summary.figures is not None:
        known = summary.figures  # the catalog indexed the active context: no file read
        error = known.error
        if error is None:
            figures = {
                "messages": known.messages,
                "tokens": known.tokens,
                "first_timestamp": known.first_timestamp,
                "last_timestamp": known.last_timestamp,
            }
    elif error is None:
        try:
            context = store.load_active_context(summary)
        except SoapError as exc:
            error = str(exc)
        else:
            stamps = sorted(m.creation_timestamp for m in context.messages if m.creation_timestamp)
            figures = {
                "messages": len(context.messages),
                "tokens": context.total_token_count(),
                "first_timestamp": stamps[0] if stamps else None,
                "last_timestamp": stamps[-1] if stamps else None,
            }
    return SessionOverview(
        role=summary.role,
        uuid=summary.uuid,
        thread_id=summary.thread_id,
        is_active=summary.is_active,
        contexts=summary.context_files,
        error=error,
        instance=summary.instance,
        layout=summary.layout,
        **figures,
    )


def session_overviews(store: Store, *, refresh: bool = True) -> list[SessionOverview]:
    """Every session's listing row, in the listing's order (``soapwb ls``, the Sessions
    page): :func:`session_overview` of each of :meth:`Store.sessions`. With a catalog,
    each row is built straight from the catalog's, which knows the active context's
    figures: no summary in between, no path and no file read (10,000 sessions in 22 ms
    where the summaries' way, with their paths, takes 72). ``refresh``: as
    :meth:`Store.listing`'s."""
    overviews = store.listing(_overview_of_row, refresh=refresh)
    if overviews is None:
        return [session_overview(store, summary) for summary in store.sessions()]
    return overviews


def _overview_of_row(row: SessionRow) -> SessionOverview:
    """:func:`session_overview` of the summary ``row`` makes (``_summary_of``): a row
    holds no figures where it holds an error."""
    return SessionOverview(
        role=row.role,
        uuid=row.uuid if row.uuid is not None else row.name,
        thread_id=row.thread_id,
        is_active=row.is_active,
        contexts=row.context_files,
        messages=row.messages,
        tokens=row.tokens,
        first_timestamp=row.first_timestamp,
        last_timestamp=row.last_timestamp,
        error=row.error if row.error is not None else row.active_error,
        instance=row.instance,
        layout="sessions" if row.layout == "sessions" else "agents",
    )


@dataclass(frozen=True)
class MessageRow:
    """One message as a listing shows it."""

    index: int
    sequence_number: int | None
    id: str
    role: str
    message_type: str
    parts: tuple[str, ...]
    tokens: int
    cached_tokens: int | None
    stale: bool
    anchors_after: tuple[str, ...]
    preview: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def part_kinds(message: Message) -> tuple[str, ...]:
    return tuple(str(part.type) for part in message.content)


def preview(message: Message, width: int = 80) -> str:
    """A one-line glimpse of a message: its text, else its tool traffic."""
    pieces: list[str] = []
    for part in message.content:
        if isinstance(part, TextPart):
            pieces.append(part.text)
        elif isinstance(part, ThinkingPart):
            pieces.append(f"(thinking) {part.text}")
        elif isinstance(part, ToolUsePart):
            pieces.append(f"{part.name}({part.arguments})")
        elif isinstance(part, ToolResultPart):
            pieces.append(f"-> {part.content!s}" if part.content != "" else "-> (empty)")
        elif isinstance(part, ToolPart):
            pieces.append(f"tool {part.name}")
        else:
            pieces.append(f"[{part.type}]")
    line = " ".join(" ".join(pieces).split())
    return line if len(line) <= width else line[: width - 1] + "…"


def message_rows(
    context: Context, *, chronological: bool = False, indices: Sequence[int] | None = None
) -> list[MessageRow]:
    """Rows for every message, in display order (or by sequence number); ``indices``: for
    the messages at those display indices only (a page of a long context)."""
    ends: dict[int, list[str]] = {}
    for name, end in context.anchor_points:
        ends.setdefault(end, []).append(name)
    chosen = enumerate(context.messages) if indices is None else ((i, context.message_at(i)) for i in indices)
    rows = [
        MessageRow(
            index=i,
            sequence_number=m.sequence_number,
            id=m.id,
            role=m.role,
            message_type=m.message_type,
            parts=part_kinds(m),
            tokens=m.count_tokens(),
            cached_tokens=m.token_count,
            stale=m.token_count_is_stale,
            anchors_after=tuple(ends.get(i + 1, ())),
            preview=preview(m),
        )
        for i, m in chosen
    ]
    if chronological:
        rows.sort(key=lambda r: (r.sequence_number is None, r.sequence_number or 0))
    return rows


@dataclass(frozen=True)
class SearchHit:
    """A message whose content contains the searched text."""

    role: str
    session: str
    context_id: str
    index: int
    message_role: str
    snippet: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def searchable_text(message: Message) -> str:
    """Everything a person might search a message for: text, thinking, tool traffic."""
    return message.searchable_text()


def _snippet(text: str, at: int, width: int = 80) -> str:
    start = max(0, at - width // 2)
    line = " ".join(text[start : start + width].split())
    return ("…" if start else "") + line + ("…" if start + width < len(text) else "")


def search_store(store: Store, query: str, limit: int = 200, *, refresh: bool = True) -> list[SearchHit]:
    """Messages containing ``query`` (case-insensitive) in every readable session, each
    message once: in the active context where it matches there, else in the first fork
    (by file name) whose copy matches. Through the catalog's
    text index where the store has one, else by reading every session; ``refresh=False``
    skips the catalog's walk of the files when the caller has just made it."""
    needle = query.casefold()
    if not needle:
        return []
    catalog = store.catalog()
    if catalog is None:
        return _scan_search(store, needle, limit)
    if refresh:
        catalog.refresh(counts_behind=store.counts_behind)
    hits: list[SearchHit] = []
    seen: set[tuple[str, str]] = set()  # forks copy messages: each is listed once per session
    for hit in catalog.search(query):
        key = (hit.session_dir, hit.message_id)
        if key in seen:
            continue
        at = hit.text.casefold().find(needle)
        if at < 0:
            continue
        seen.add(key)
        hits.append(
            SearchHit(
                hit.role, hit.session, hit.context_id, hit.index, hit.message_role, _snippet(hit.text, at)
            )
        )
        if len(hits) >= limit:
            break
    return hits


def _scan_search(store: Store, needle: str, limit: int) -> list[SearchHit]:
    hits: list[SearchHit] = []
    for summary in store.scan_sessions():
        if summary.error:
            continue
        try:
            session = store.load_session(summary.ref, require_active=False)
        except SoapError:
            continue
        contexts = sorted(session.contexts.values(), key=lambda c: c.id != session.active_context_id)
        seen: set[str] = set()  # forks copy messages: each is listed once, the active context first
        for context in contexts:
            for index, message in enumerate(context.messages):
                if message.id in seen:
                    continue
                text = searchable_text(message)
                at = text.casefold().find(needle)
                if at >= 0:
                    seen.add(message.id)
                    hits.append(
                        SearchHit(
                            summary.role, summary.uuid, context.id, index, message.role, _snippet(text, at)
                        )
                    )
                    if len(hits) >= limit:
                        return hits
    return hits
