"""What the Context page shows of a long context: one page of messages, and an outline.

A context of an agent that ran for days holds 100,000 messages; a browser cannot draw
them all (it took minutes), and nobody reads them all. The page shows ``PAGE_SIZE``
messages at a time. :func:`build_index` walks the whole context once, and the page caches
what it returns, so that turning a page or following a link costs only the page's own
messages: every other function here takes time in the size of a page, not of the context.

Plain functions without Streamlit, so that a test can check what the page shows.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from replay import short_id
from soap_core import (
    COMPACTION,
    TOOL_CALL,
    TURN,
    CallPairs,
    Context,
    ContextNode,
    MessageFacts,
    MessageRow,
    Session,
    collector_paused,
    describe_node,
    facts_of,
    fork_tree,
    message_rows,
    preview,
)

PAGE_SIZE = 50
"""Messages on one page: enough to read a few turns, few enough to draw at once."""
OUTLINE_SPAN = 60
"""Outline entries shown around the current page (the outline of 100,000 messages is
itself too long to show)."""
LANDMARK_SPAN = 20
"""Compactions and forks shown, the ones nearest the current page first."""

OutlineKind = Literal["turn", "tool call", "compaction", "fork"]


@dataclass(frozen=True)
class ForkPoint:
    """A context forked from this one, and the last message they share."""

    child_id: str
    kind: str
    """``fork`` or ``replay``, as the fork tree names it."""
    messages: int
    index: int | None
    """The display index (in the parent) of the last message the child copied; None if
    they share no message (a child that rewrote everything it kept)."""


@dataclass(frozen=True)
class ContextIndex:
    """What the page needs from every message of one context, computed in one pass.

    Kept small (a string and arrays of ints) because ``st.cache_data`` copies it on every
    rerun; the messages themselves stay in the loaded session. Token counts are not in
    it: counting 100,000 messages takes seconds, and the page needs the total only after
    it has drawn its messages.
    """

    messages: int
    kinds: str
    """One code per message in display order: ``t`` a turn starts (a user message with
    text), ``c`` a tool call, ``s`` a compaction summary, ``.`` anything else."""
    turns: array[int]
    """Display indices of the messages that start a turn, in order."""
    tool_calls: int
    compactions: tuple[int, ...]
    forks: tuple[ForkPoint, ...]
    chronological: array[int]
    """Display indices in sequence-number order (as ``message_rows(chronological=True)``)."""
    chronological_position: array[int]
    """The inverse: the position of each display index in :attr:`chronological`."""
    calls: CallPairs
    """Which message answers each tool call, so that a page can nest a result under its
    call, or say on which page it is, without reading other pages."""

    def order(self, chronological: bool) -> Sequence[int]:
        """The display indices in the order the page lists them."""
        return self.chronological if chronological else range(self.messages)

    def position(self, index: int, chronological: bool) -> int:
        """Where display index ``index`` stands in :meth:`order`."""
        return self.chronological_position[index] if chronological else index

    def page_of(self, index: int, chronological: bool) -> int:
        """The page holding display index ``index`` in the order shown."""
        return page_of(self.position(index, chronological))

    def turn_number(self, index: int) -> int:
        """1 for the first turn; 0 before it. The turn a message belongs to."""
        return bisect.bisect_right(self.turns, index)


@dataclass(frozen=True)
class OutlineEntry:
    """One line of the outline: a message worth jumping to."""

    index: int
    kind: OutlineKind
    label: str


Facts = Callable[[Context], MessageFacts]
"""Where :func:`build_index` gets a context's facts: ``Store.message_facts`` (from the
catalog, no message built) or, by default, :func:`soap_core.facts_of` its messages."""


def _facts_of_messages(context: Context) -> MessageFacts:
    return facts_of(context.messages)


def fork_points(
    session: Session, context: Context, facts: Facts = _facts_of_messages, ids: Sequence[str] | None = None
) -> list[ForkPoint]:
    """Every saved child of ``context`` and where it branched off.

    A fork copies messages keeping their ids, so the branch point is the last message of
    the parent whose id the child holds; this needs no trust in the stored mutation
    counters, which peteos writes as 0. ``ids`` are the context's message ids, if known.
    """
    nodes = {node.id: node for node in fork_tree(session)}
    node = nodes.get(context.id)
    if node is None or not node.children:
        return []
    parent_ids = facts(context).ids if ids is None else ids
    points = []
    for child_id in node.children:
        child = session.contexts.get(child_id)
        if child is None:
            continue  # discarded: the fork tree shows it
        kind = nodes[child_id].kind
        points.append(
            ForkPoint(child_id, kind, child.message_count, _last_shared(parent_ids, facts(child).ids))
        )
    return points


def _last_shared(parent_ids: Sequence[str], child_ids: Sequence[str]) -> int | None:
    """The last index of ``parent_ids`` holding an id of ``child_ids``, None if none does:
    a set of the child's ids (built in C) and a walk back from the parent's end, which
    stops at the branch point; a map of every parent id cost a Python pass over them all."""
    held = set(child_ids)
    for index in range(len(parent_ids) - 1, -1, -1):
        if parent_ids[index] in held:
            return index
    return None


def build_index(session: Session, context: Context, facts: Facts = _facts_of_messages) -> ContextIndex:
    """The :class:`ContextIndex` of ``context``: linear in its messages (and its forks').
    With ``facts=Store.message_facts`` no message of a context read through the catalog
    is built. The garbage collector is paused meanwhile: the facts are some 500,000
    short-lived objects, and its passes over them tripled the time."""
    with collector_paused():
        return _build_index(session, context, facts)


def chronological_order(sequence: Sequence[int | None]) -> Sequence[int]:
    """Display indices by sequence number (messages without one last, in display order),
    as ``message_rows(chronological=True)`` lists them; ``range`` when that is the
    display order already, as in a context only ever appended to."""
    if None not in sequence and list(sequence) == sorted(sequence):  # type: ignore[type-var]
        return range(len(sequence))
    return sorted(range(len(sequence)), key=lambda i: (sequence[i] is None, sequence[i] or 0))


def _build_index(session: Session, context: Context, facts: Facts) -> ContextIndex:
    known = facts(context)
    kinds = known.kinds
    order = chronological_order(known.sequence_numbers)
    chronological = array("l", order)
    if order == range(len(known)):  # appended in display order: its own inverse
        position = chronological
    else:
        position = array("l", bytes(len(known) * array("l").itemsize))
        for at, index in enumerate(order):
            position[index] = at
    return ContextIndex(
        messages=len(known),
        kinds=kinds,
        turns=array("l", _all(kinds, TURN)),
        tool_calls=kinds.count(TOOL_CALL),
        compactions=tuple(_all(kinds, COMPACTION)),
        forks=tuple(fork_points(session, context, facts, known.ids)),
        chronological=chronological,
        chronological_position=position,
        calls=known.calls,
    )


def _all(kinds: str, code: str) -> Iterator[int]:
    """The positions of ``code`` in ``kinds`` (``str.find`` leaps over the others)."""
    at = kinds.find(code)
    while at >= 0:
        yield at
        at = kinds.find(code, at + 1)


# -- pages ---------------------------------------------------------------------------


def page_count(messages: int, size: int = PAGE_SIZE) -> int:
    return max(1, -(-messages // size))


def page_of(position: int, size: int = PAGE_SIZE) -> int:
    """The 1-based page holding the message at ``position`` of the listing order."""
    return position // size + 1


def page_span(page: int, messages: int, size: int = PAGE_SIZE) -> range:
    """The positions (in listing order) on ``page``."""
    start = (page - 1) * size
    return range(start, min(start + size, messages))


def parse_index(raw: str | None) -> int | None:
    """A non-negative integer query parameter, or None for anything else."""
    return int(raw) if raw is not None and raw.strip().isdigit() else None


def chosen_page(messages: int, page: int | None, linked_position: int | None, size: int = PAGE_SIZE) -> int:
    """The page to show: ``?page=`` if it is one, else the linked message's page, else 1."""
    pages = page_count(messages, size)
    if page is not None and 1 <= page <= pages:
        return page
    if linked_position is not None:
        return page_of(linked_position, size)
    return 1


@dataclass(frozen=True)
class Listing:
    """What the page lists: which page of which order, and the linked message."""

    messages: int
    page: int
    span: range
    """Positions in the listing order."""
    indices: list[int]
    """The display indices of the messages on the page, in the order shown."""
    linked: int | None
    """The display index of ``?message=`` (checked to be in the context)."""
    chronological: bool

    @property
    def paged(self) -> bool:
        return self.messages > PAGE_SIZE


def choose_listing(index: ContextIndex, chronological: bool, page: int | None, linked: int | None) -> Listing:
    """The page to list for ``?page=`` and ``?message=`` (see :func:`chosen_page`)."""
    order = index.order(chronological)
    position = index.position(linked, chronological) if linked is not None else None
    chosen = chosen_page(index.messages, page, position)
    span = page_span(chosen, index.messages)
    return Listing(index.messages, chosen, span, [order[p] for p in span], linked, chronological)


View = tuple[str, int, int | None, bool]
"""(context id, page, linked message, chronological): what a run of the page showed."""


def scroll_target(previous: View | None, view: View, shown: Listing) -> int | None:
    """The message to scroll to in this run, if any: the linked one when it is on the
    page, else the page's first after the page was turned; nothing when the view is the
    one already shown (a rerun for another reason) or on a first visit without a link."""
    if view == previous:
        return None
    if shown.linked in shown.indices:
        return shown.linked
    if previous is not None and previous[0] == view[0] and shown.indices:
        return shown.indices[0]
    return None


def span_label(span: range, messages: int, page: int, chronological: bool) -> str:
    """``messages 15,000–15,049 of 100,000 · page 301 of 2,000`` (positions, by the order shown)."""
    pages = page_count(messages)
    order = " in chronological order" if chronological else ""
    if not span:
        return "no messages"
    return f"messages {span.start:,}–{span.stop - 1:,} of {messages:,}{order} · page {page:,} of {pages:,}"


def page_rows(context: Context, indices: Sequence[int]) -> list[MessageRow]:
    """The listing rows of the messages at ``indices`` only (a page of a long context)."""
    return message_rows(context, indices=indices)


# -- the outline ---------------------------------------------------------------------


def fork_label(fork: ForkPoint) -> str:
    return f"{fork.kind} {short_id(fork.child_id)} ({fork.messages:,} messages)"


def forks_after(index: ContextIndex) -> dict[int, list[ForkPoint]]:
    """The forks by the message they branched after (the page marks them there)."""
    found: dict[int, list[ForkPoint]] = {}
    for fork in index.forks:
        if fork.index is not None:
            found.setdefault(fork.index, []).append(fork)
    return found


def entry_label(index: ContextIndex, context: Context, at: int, kind: OutlineKind, width: int = 60) -> str:
    """One outline line; message text cut to ``width`` (the caller must still escape it)."""
    message = context.message_at(at)
    if kind == "turn":
        return f"#{at:,} turn {index.turn_number(at):,}: {preview(message, width)}"
    if kind == "tool call":
        names = ", ".join(dict.fromkeys(part.name for part in message.tool_uses()))
        return f"#{at:,} ↳ tool call {names}"
    return f"#{at:,} compaction: {preview(message, width)}"


_KIND_NAMES: dict[str, OutlineKind] = {TURN: "turn", TOOL_CALL: "tool call", COMPACTION: "compaction"}


def entries_at(
    index: ContextIndex, context: Context, at: int, forks: dict[int, list[ForkPoint]]
) -> list[OutlineEntry]:
    """The outline entries of the message at display index ``at``: its own, then the
    forks that branched after it."""
    entries = []
    kind = _KIND_NAMES.get(index.kinds[at])
    if kind is not None:
        entries.append(OutlineEntry(at, kind, entry_label(index, context, at, kind)))
    entries += [OutlineEntry(at, "fork", f"#{at:,} forked: {fork_label(fork)}") for fork in forks.get(at, ())]
    return entries


def outline_near(
    index: ContextIndex, context: Context, page: int, chronological: bool, span: int = OUTLINE_SPAN
) -> list[OutlineEntry]:
    """Turns, tool calls, compactions and forks of the current page and of the pages
    either side of it, in listing order: the ``span`` nearest the current page (all of
    its own first). Three pages are read, whatever the length of the context."""
    order = index.order(chronological)
    here = page_span(page, index.messages)
    window = range(max(0, here.start - PAGE_SIZE), min(index.messages, here.stop + PAGE_SIZE))
    forks = forks_after(index)
    found = [
        (position, entry)
        for position in window
        for entry in entries_at(index, context, order[position], forks)
    ]

    def distance(position: int) -> int:
        return max(here.start - position, position - here.stop + 1, 0)

    nearest = sorted(range(len(found)), key=lambda k: distance(found[k][0]))[:span]
    return [found[k][1] for k in sorted(nearest)]


def landmarks(index: ContextIndex, context: Context, page: int, chronological: bool) -> list[OutlineEntry]:
    """Compactions and forks, the :data:`LANDMARK_SPAN` nearest the current page, in
    listing order (there are few; a compaction is what a person looks for first)."""
    marks: list[tuple[int, ForkPoint | None]] = [(at, None) for at in index.compactions]
    marks += [(fork.index, fork) for fork in index.forks if fork.index is not None]
    centre = page_span(page, index.messages).start
    nearest = sorted(marks, key=lambda mark: abs(index.position(mark[0], chronological) - centre))
    entries = [
        OutlineEntry(at, "compaction", entry_label(index, context, at, "compaction"))
        if fork is None
        else OutlineEntry(at, "fork", f"#{at:,} forked: {fork_label(fork)}")
        for at, fork in nearest[:LANDMARK_SPAN]
    ]
    return sorted(entries, key=lambda e: index.position(e.index, chronological))


def outline_counts(index: ContextIndex) -> str:
    """``33,210 turns · 24,950 tool calls · 1 compaction · 2 forks``."""

    def count(n: int, one: str, many: str) -> str:
        return f"{n:,} {one if n == 1 else many}"

    return " · ".join(
        [
            count(len(index.turns), "turn", "turns"),
            count(index.tool_calls, "tool call", "tool calls"),
            count(len(index.compactions), "compaction", "compactions"),
            count(len(index.forks), "fork", "forks"),
        ]
    )


TREE_AROUND = 20
"""Contexts of the fork tree listed on either side of the shown one."""
TREE_INDENT_LIMIT = 24
"""Levels the listed tree indents at most."""


def fork_tree_excerpt(
    nodes: Sequence[ContextNode], shown_id: str | None = None, names: Mapping[str, str] | None = None
) -> list[str]:
    """The fork tree as indented lines (as :func:`workbench.views.fork_tree_lines` writes
    them), but only the :data:`TREE_AROUND` contexts before and after the shown one (the
    first, if none is shown), and never indented more than :data:`TREE_INDENT_LIMIT`
    levels beyond the least deep of them; a line says how many are left out.

    A session of 30,000 contexts listed them all, and a chain of 2,000 compaction forks
    indented by depth was 8 MB of text: what the page shows of the tree now stays the
    same size whatever the session holds (the Fork tree page draws it all)."""
    names = names or {}
    at = next((k for k, node in enumerate(nodes) if node.id == shown_id), 0)
    first, end = max(at - TREE_AROUND, 0), min(at + TREE_AROUND + 1, len(nodes))
    window = nodes[first:end]
    base = min((node.depth for node in window), default=0)
    lines = [f"… {first:,} context{'' if first == 1 else 's'} before these"] if first else []
    for node in window:
        indent = "    " * min(node.depth - base, TREE_INDENT_LIMIT)
        shown = "  <- shown" if node.id == shown_id else ""
        name = names.get(node.id, node.kind)
        lines.append(f"{indent}- {name}  {describe_node(node)}  {short_id(node.id)}{shown}")
    after = len(nodes) - end
    if after:
        lines.append(f"… {after:,} context{'' if after == 1 else 's'} after these")
    return lines
