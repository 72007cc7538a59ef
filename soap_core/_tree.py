"""The fork tree of a session: every context with its parent and children.

Lineage comes from ``origin_context_id`` and ``children`` (peteos' stored
``parent_mutation_counter`` is always 0 and cannot be used). A child listed in
``children`` that has no file was discarded (peteos saves only the forks that became
active); it is shown as such, not as an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from soap_core._marks import is_marked
from soap_core._session import Session

NodeKind = Literal["root", "fork", "replay", "discarded"]


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
    (a context never its own parent or child). Each list is kept with a set beside it, so
    a context naming 100,000 children costs 100,000 steps, not 100,000² / 2."""
    children: dict[str, list[str]] = {}
    listed: dict[str, set[str]] = {}
    parent_of: dict[str, str] = {}
    for context in session.contexts.values():
        own = children.setdefault(context.id, [])
        known = listed.setdefault(context.id, set(own))
        for child_id in context.children:
            if child_id != context.id and child_id not in known:
                known.add(child_id)
                own.append(child_id)
            if child_id != context.id:
                parent_of.setdefault(child_id, context.id)
    for context in session.contexts.values():
        origin = context.origin_context_id
        if origin is not None and origin != context.id:
            parent_of.setdefault(context.id, origin)
            if origin in children and context.id not in listed[origin]:
                listed[origin].add(context.id)
                children[origin].append(context.id)
    return children, parent_of


def _on_cycles(parent_of: dict[str, str]) -> set[str]:
    """The ids whose parent links lead back to themselves. Each link is followed once in
    all (a walk stops where an earlier one went), so a chain of n forks costs n steps,
    where a walk up from every context cost n² / 2."""
    state: dict[str, int] = {}  # 1: on the walk under way, 2: settled
    cycles: set[str] = set()
    for start in parent_of:
        path: list[str] = []
        current: str | None = start
        while current is not None and current not in state:
            state[current] = 1
            path.append(current)
            current = parent_of.get(current)
        if current is not None and state[current] == 1:  # this walk closed a loop
            cycles.update(path[path.index(current) :])
        for walked in path:
            state[walked] = 2
    return cycles


def fork_tree(session: Session) -> list[ContextNode]:
    """Every context of ``session`` (saved or only named) in depth-first order.

    Fork links read from files may loop (a context listing itself, two contexts each the
    other's origin): every context is still listed exactly once, those on a loop marked
    ``in_cycle``, and the walk keeps no recursion, so no file can make it fail."""
    children, parent_of = _links(session)
    self_linked = {
        c.id for c in session.contexts.values() if c.id in c.children or c.origin_context_id == c.id
    }
    looped = _on_cycles(parent_of)
    roots = [cid for cid in session.contexts if parent_of.get(cid) not in session.contexts]
    nodes: list[ContextNode] = []
    placed: set[str] = set()

    def node(context_id: str, depth: int) -> ContextNode:
        context = session.contexts.get(context_id)
        parent = parent_of.get(context_id)
        kind: NodeKind = "discarded" if context is None else "fork" if parent else "root"
        if context is not None and is_marked(context):
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
            in_cycle=context_id in self_linked or context_id in looped,
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


def describe_node(node: ContextNode, name: str | None = None) -> str:
    """How a listing describes a node: its name (else its kind), size and flags."""
    detail = (
        "discarded (no file)"
        if node.kind == "discarded"
        else f"{name or node.kind}, {node.messages} messages"
    )
    if node.active:
        detail += "  [active]"
    if node.parent_missing:
        detail += "  (origin not in this session)"
    if node.in_cycle:
        detail += "  (fork links loop back here)"
    return detail


TREE_INDENT_LIMIT = 24
"""Levels a text tree indents at most: a chain of 2,000 compaction forks indented four
spaces a level printed 8 MB of spaces; deeper lines stay at this indent, led by their
depth, so the bytes printed grow with the number of contexts only."""


def tree_lines(nodes: list[ContextNode], names: Mapping[str, str] | None = None) -> list[str]:
    """``fork_tree``'s nodes as the text tree ``soapwb tree`` prints: each child under its
    parent with ``├──`` (``└──`` for the last of its siblings), id, the node's name from
    ``names`` when given (the workbench's: ``main``, ``re-run of main@13``), then its
    description; a
    ``│`` continues each ancestor's line down to its next sibling.

    Whether a node is the last of its siblings is read in one pass from the end (a scan
    of the nodes after each one cost n² / 2: a minute for a context naming 100,000
    children)."""
    later: set[tuple[str | None, int]] = set()
    last = [False] * len(nodes)
    for at in range(len(nodes) - 1, -1, -1):
        key = (nodes[at].parent_id, nodes[at].depth)
        last[at] = key not in later
        later.add(key)
    lines = []
    ancestors_last: list[bool] = []  # for each level above a node: was that ancestor a last sibling
    for node, is_last in zip(nodes, last, strict=True):
        indent = ""
        if node.depth:
            levels = node.depth - 1
            del ancestors_last[levels:]
            shown = ancestors_last[:TREE_INDENT_LIMIT]
            indent = "".join("    " if done else "│   " for done in shown)
            indent += "    " * (min(levels, TREE_INDENT_LIMIT) - len(shown))
            if levels > TREE_INDENT_LIMIT:
                indent += f"[depth {node.depth}] "
            indent += "└── " if is_last else "├── "
            if len(ancestors_last) == levels:
                ancestors_last.append(is_last)
        else:
            ancestors_last.clear()
        lines.append(f"{indent}{node.id}  {describe_node(node, (names or {}).get(node.id))}")
    return lines
