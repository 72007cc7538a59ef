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


def fork_tree(session: Session) -> list[ContextNode]:
    """Every context of ``session`` (saved or only named) in depth-first order."""
    children: dict[str, list[str]] = {}
    parent_of: dict[str, str] = {}
    for context in session.contexts.values():
        listed = children.setdefault(context.id, [])
        listed.extend(c for c in context.children if c not in listed)
        for child_id in context.children:
            parent_of.setdefault(child_id, context.id)
    for context in session.contexts.values():
        origin = context.origin_context_id
        if origin is not None:
            parent_of.setdefault(context.id, origin)
            if origin in children and context.id not in children[origin]:
                children[origin].append(context.id)
    roots = [cid for cid in session.contexts if parent_of.get(cid) not in session.contexts]
    nodes: list[ContextNode] = []

    def visit(context_id: str, depth: int) -> None:
        context = session.contexts.get(context_id)
        parent = parent_of.get(context_id)
        kind: NodeKind = "discarded" if context is None else "fork" if parent else "root"
        if context is not None and REPLAY_KEY in context.extra:
            kind = "replay"
        nodes.append(
            ContextNode(
                id=context_id,
                parent_id=parent,
                children=tuple(children.get(context_id, ())),
                kind=kind,
                depth=depth,
                active=context_id == session.active_context_id,
                messages=len(context.messages) if context else None,
                file=session.context_files.get(context_id),
                parent_missing=parent is not None and parent not in session.contexts,
            )
        )
        for child_id in children.get(context_id, ()):
            visit(child_id, depth + 1)

    for root in roots:
        visit(root, 0)
    return nodes


def describe_node(node: ContextNode) -> str:
    """How a listing describes a node: kind, size and flags."""
    detail = "discarded (no file)" if node.kind == "discarded" else f"{node.kind}, {node.messages} messages"
    if node.active:
        detail += "  [active]"
    if node.parent_missing:
        detail += "  (origin not in this session)"
    return detail
