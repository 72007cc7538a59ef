"""The fork tree of a session: every context with its parent and children.

Lineage comes from ``origin_context_id`` and ``children`` (peteos' stored
``parent_mutation_counter`` is always 0 and cannot be used). A child listed in
``children`` that has no file was discarded (peteos saves only the forks that became
active); it is shown as such, not as an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from soap_core._session import Session

NodeKind = Literal["root", "fork", "replay", "discarded"]
REPLAY_KEY = "soapwb_replay"  # set by replay on the forks it makes


@dataclass(frozen=True)
class ContextNode:
    """One context in the tree, in depth-first order with its ``depth``."""

    id: str
    parent_id: str | None
    children: tuple[str, ...]
    kind: NodeKind
    depth: int
    active: bool
    messages: int | None
    file: str | None
    parent_missing: bool = False
    in_cycle: bool = False
    """The fork links loop back to this context (``origin_context_id`` or ``children``
    naming itself or a descendant): it is listed once, where the walk first met it."""


def _links(session: Session) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Children and parent of every context, from ``children`` and ``origin_context_id``
    (a context never its own parent or child)."""
    children: dict[str, list[str]] = {}
    parent_of: dict[str, str] = {}
    for context in session.contexts.values():
        listed = children.setdefault(context.id, [])
        listed.extend(c for c in dict.fromkeys(context.children) if c not in listed and c != context.id)
        for child_id in context.children:
            if child_id != context.id:
                parent_of.setdefault(child_id, context.id)
    for context in session.contexts.values():
        origin = context.origin_context_id
        if origin is not None and origin != context.id:
            parent_of.setdefault(context.id, origin)
            if origin in children and context.id not in children[origin]:
                children[origin].append(context.id)
    return children, parent_of


def _in_cycle(start: str, parent_of: dict[str, str]) -> bool:
    seen = {start}
    current = parent_of.get(start)
    while current is not None and current not in seen:
        seen.add(current)
        current = parent_of.get(current)
    return current == start


def fork_tree(session: Session) -> list[ContextNode]:
    """Every context of ``session`` (saved or only named) in depth-first order.

    Fork links read from files may loop (a context listing itself, two contexts each the
    other's origin): every context is still listed exactly once, those on a loop marked
    ``in_cycle``, and the walk keeps no recursion, so no file can make it fail."""
    children, parent_of = _links(session)
    self_linked = {
        c.id for c in session.contexts.values() if c.id in c.children or c.origin_context_id == c.id
    }
    roots = [cid for cid in session.contexts if parent_of.get(cid) not in session.contexts]
    nodes: list[ContextNode] = []
    placed: set[str] = set()

    def node(context_id: str, depth: int) -> ContextNode:
        context = session.contexts.get(context_id)
        parent = parent_of.get(context_id)
        kind: NodeKind = "discarded" if context is None else "fork" if parent else "root"
        if context is not None and REPLAY_KEY in context.extra:
            kind = "replay"
        return ContextNode(
            id=context_id,
            parent_id=parent,
            children=tuple(children.get(context_id, ())),
            kind=kind,
            depth=depth,
            active=context_id == session.active_context_id,
            messages=context.message_count if context else None,
            file=session.context_files.get(context_id),
            parent_missing=parent is not None and parent not in session.contexts,
            in_cycle=context_id in self_linked or _in_cycle(context_id, parent_of),
        )

    def walk(root: str) -> None:
        stack = [(root, 0)]
        while stack:
            context_id, depth = stack.pop()
            if context_id in placed:
                continue
            placed.add(context_id)
            nodes.append(node(context_id, depth))
            stack.extend((c, depth + 1) for c in reversed(children.get(context_id, ())) if c not in placed)

    for root in roots:
        walk(root)
    for context_id in session.contexts:  # contexts only a loop of links leads to
        walk(context_id)
    return nodes


def describe_node(node: ContextNode) -> str:
    """How a listing describes a node: kind, size and flags."""
    detail = "discarded (no file)" if node.kind == "discarded" else f"{node.kind}, {node.messages} messages"
    if node.active:
        detail += "  [active]"
    if node.parent_missing:
        detail += "  (origin not in this session)"
    if node.in_cycle:
        detail += "  (fork links loop back here)"
    return detail
