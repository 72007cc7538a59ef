"""The Fork tree page's figures: the items of a session's tree, the plotly figure drawn
from them, and the node table.

A session after a few replays holds dozens of replay forks. By default each run that
made them is drawn as one node (a :class:`TreeItem` of kind ``replay run``) standing for
its forks and whatever grew from them, named by what it changed; with the forks shown,
every context is a node of its own. Plain functions without Streamlit, so that a test
can check what the page draws against :func:`soap_core.fork_tree` without running it.
"""

from __future__ import annotations

import dataclasses
import html
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from replay import ForkRun, SessionNames, short_id
from soap_core import BranchMark, ContextNode, ContextNotFoundError, Session

RUN_KIND = "replay run"
"""The kind of a node that stands for every fork of one replay run."""

NODE_COLUMNS = ("name", "kind", "messages", "forks", "parent", "time", "active", "id")

KIND_STYLE: Mapping[str, tuple[str, str]] = {
    "root": ("square", "#1f77b4"),
    "fork": ("circle", "#2ca02c"),
    "replay": ("diamond", "#9467bd"),
    RUN_KIND: ("diamond-wide", "#9467bd"),
    "discarded": ("circle-open", "#7f7f7f"),
}
"""Marker symbol and colour per node kind; discarded contexts are hollow (no file)."""

DISCARDED_SHOWN = 50
"""Discarded children of one parent drawn each as a node; the rest are one node."""

_HOVER_VALUE_LIMIT = 200
_CHART_TEXT_LIMIT = 70


@dataclass(frozen=True)
class TreeItem:
    """One node of the drawn tree: a context, or a replay run folded into one node."""

    id: str
    """What a click opens: the context, or the run's first fork."""
    kind: str
    name: str
    parent: str | None
    """The item this one hangs from, if it is in the tree."""
    depth: int
    messages: int | None
    active: bool
    members: tuple[str, ...]
    """The contexts it stands for: itself, or a run's forks and all that grew from them."""
    node: ContextNode | None = None
    run: ForkRun | None = None

    @property
    def label(self) -> str:
        """The item named for a chart or picker: name, then size (a run counts its forks)."""
        if self.run is not None or self.messages is None:
            return self.name
        return f"{self.name} · {self.messages} message{'' if self.messages == 1 else 's'}"


@dataclass(frozen=True)
class TreeLayout:
    """Where each item sits (x = branch column, y = depth-first order) and which edges join them."""

    positions: dict[str, tuple[int, int]]
    edges: list[tuple[str, str]]
    """(parent id, child id), only for parents that are in the tree."""


def _context_item(node: ContextNode, names: SessionNames, parent: str | None, depth: int) -> TreeItem:
    return TreeItem(
        id=node.id,
        kind=node.kind,
        name=names.names.get(node.id, node.kind),
        parent=parent,
        depth=depth,
        messages=node.messages,
        active=node.active,
        members=(node.id,),
        node=node,
    )


def _tidy_order(names: SessionNames) -> list[tuple[ContextNode, str | None]]:
    """The nodes depth-first, each with its parent in the tree, siblings in a readable
    order: the contexts of the session's own as ``fork_tree`` lists them, then the
    replay forks run by run (oldest first), each run's in sample order."""
    nodes = {node.id: node for node in names.nodes}
    position = {node.id: row for row, node in enumerate(names.nodes)}
    run_order = {run.id: row for row, run in enumerate(names.runs)}
    sample = {cid: row for run in names.runs for row, cid in enumerate(run.fork_ids)}

    def key(node_id: str) -> tuple[int, int, int]:
        run = names.run_of.get(node_id)
        if run is None:
            return (0, position[node_id], 0)
        return (1, run_order[run.id], sample[node_id])

    children: dict[str | None, list[str]] = {}
    for node in names.nodes:
        parent = node.parent_id if node.parent_id in nodes and node.parent_id != node.id else None
        children.setdefault(parent, []).append(node.id)
    ordered: list[tuple[ContextNode, str | None]] = []
    placed: set[str] = set()
    for start in [*children.get(None, []), *nodes]:  # then what only a loop of links leads to
        stack: list[tuple[str, str | None]] = [(start, None)] if start not in placed else []
        while stack:
            node_id, parent = stack.pop()
            if node_id in placed:
                continue
            placed.add(node_id)
            ordered.append((nodes[node_id], parent))
            below = sorted((c for c in children.get(node_id, []) if c not in placed), key=key)
            stack.extend((c, node_id) for c in reversed(below))
    return ordered


def tree_items(names: SessionNames, fold_runs: bool = True) -> list[TreeItem]:
    """The nodes to draw, in depth-first order: every context, or with ``fold_runs``
    one node per replay run in place of its forks (and of the contexts below them;
    a later run made from one of those hangs from the run's node).

    A parent naming more than :data:`DISCARDED_SHOWN` discarded children shows that many,
    and one node standing for the rest (a context naming 100,000 drew 100,000 markers,
    each with its hover, in a chart 4 million pixels high)."""
    owner: dict[str, str] = {}  # context id -> the item that shows it
    items: dict[str, TreeItem] = {}
    members: dict[str, list[str]] = {}
    discarded: Counter[str | None] = Counter()  # discarded children shown, by parent item
    folds: dict[str | None, str] = {}  # parent item -> the item standing for the rest
    for node, tree_parent in _tidy_order(names):
        parent = owner.get(tree_parent) if tree_parent is not None else None
        depth = items[parent].depth + 1 if parent is not None else 0
        run = names.run_of.get(node.id) if fold_runs else None
        if node.kind == "discarded" and run is None:
            discarded[parent] += 1
        if node.kind == "discarded" and run is None and discarded[parent] > DISCARDED_SHOWN:
            fold = folds.setdefault(parent, node.id)
            owner[node.id] = fold
            if fold not in items:
                items[fold] = TreeItem(fold, "discarded", "", parent, depth, None, False, ())
                members[fold] = []
            members[fold].append(node.id)
        elif run is not None and run.id in items:
            owner[node.id] = run.id
            members[run.id].append(node.id)
        elif run is not None:
            owner[node.id] = run.id
            members[run.id] = [node.id]
            items[run.id] = TreeItem(
                run.id, RUN_KIND, names.run_names[run.id], parent, depth, node.messages, False, (), run=run
            )
        elif parent is not None and items[parent].kind == RUN_KIND:
            owner[node.id] = parent  # what grew from a folded run is folded in it
            members[parent].append(node.id)
        else:
            owner[node.id] = node.id
            items[node.id] = _context_item(node, names, parent, depth)
    by_id = {node.id: node for node in names.nodes}
    for fold in folds.values():
        listed = members.pop(fold)
        name = f"{len(listed):,} more discarded fork{'' if len(listed) == 1 else 's'}"
        items[fold] = dataclasses.replace(items[fold], name=name, members=tuple(listed))
    for run_id, listed in members.items():
        item = items[run_id]
        assert item.run is not None
        placed = set(listed)
        forks = [cid for cid in item.run.fork_ids if cid in placed]  # in sample order
        fork_set = set(forks)
        ordered = (*forks, *(cid for cid in listed if cid not in fork_set))
        active = any(by_id[cid].active for cid in listed)
        items[run_id] = dataclasses.replace(item, members=ordered, active=active)
    return list(items.values())


def tree_layout(items: Sequence[TreeItem]) -> TreeLayout:
    """One row per item in depth-first order, like a file tree, and one column per
    branch: an only child stays below its parent (a chain of compactions is one
    column), the children of a parent with several move one column right.

    Depth-first order puts every child below its parent and before the parent's next
    sibling, so elbow edges from parent to child never cross another node.
    """
    children = Counter(item.parent for item in items if item.parent is not None)
    column: dict[str, int] = {}
    for item in items:  # a parent comes before its children
        if item.parent is None or item.parent not in column:
            column[item.id] = 0
        else:
            column[item.id] = column[item.parent] + (0 if children[item.parent] == 1 else 1)
    positions = {item.id: (column[item.id], row) for row, item in enumerate(items)}
    edges = [(i.parent, i.id) for i in items if i.parent is not None and i.parent in positions]
    return TreeLayout(positions, edges)


def _plain(text: str, limit: int = _HOVER_VALUE_LIMIT) -> str:
    """``text`` as plotly shows it literally: plotly reads a subset of HTML in hover
    labels, so markup from the files is escaped and long values are cut."""
    if len(text) > limit:
        text = text[:limit] + "…"
    return html.escape(text, quote=False)


def hover_lines(
    node: ContextNode, mark: BranchMark | None, names: Mapping[str, str] | None = None
) -> list[str]:
    """What hovering a node tells, as plain lines: name, kind, size, replay details, id;
    ``names`` (:attr:`SessionNames.names`) name the node and the context it replayed."""
    names = names or {}
    messages = "no file" if node.messages is None else f"{node.messages} messages"
    lines = [names[node.id]] if node.id in names else []
    lines.append(f"{node.kind}, {messages}" + ("  [active]" if node.active else ""))
    if node.parent_missing:
        lines.append(f"origin {node.parent_id} not in this session")
    if mark is not None:
        lines.extend(_mark_lines(mark, names))
    lines.append(f"id {node.id}")
    return lines


def _mark_lines(mark: BranchMark, names: Mapping[str, str]) -> list[str]:
    lines = []
    if mark.label is not None:
        lines.append(f"label: {mark.label}")
    what = {"rerun": "re-run of the agent from", "continue": "conversation continued from"}.get(
        mark.kind, "replay of"
    )
    named = names.get(mark.of_context) if mark.of_context is not None else None
    lines.append(f"{what} {named or mark.of_context} message #{mark.of_index}")
    lines.append("overrides: " + json.dumps(dict(mark.overrides or {}), ensure_ascii=False))
    if mark.tools:
        lines.append("tools: " + json.dumps(dict(mark.tools), ensure_ascii=False))
    if mark.error:
        lines.append(f"error: {mark.error}")
    return lines


def run_lines(
    item: TreeItem, marks: Mapping[str, BranchMark], names: Mapping[str, str] | None = None
) -> list[str]:
    """What a folded run tells: its name, when it ran, its forks and their record."""
    run = item.run
    assert run is not None
    forks = len(run.fork_ids)
    below = len(item.members) - forks
    lines = [
        item.name,
        f"{forks} fork{'' if forks == 1 else 's'}" + (f", {below} more below them" if below else ""),
    ]
    if run.started:
        lines.append(f"ran {run.started}")
    if run.id in marks:
        lines.extend(_mark_lines(marks[run.id], names or {}))
    if run.failed:
        lines.append(f"{run.failed} failed")
    lines.append(
        "forks " + ", ".join(short_id(cid) for cid in run.fork_ids[:8]) + (" …" if forks > 8 else "")
    )
    return lines


def fold_lines(item: TreeItem) -> list[str]:
    """What the node standing for many discarded children tells: how many, and the
    first and last of them."""
    first, last = item.members[0], item.members[-1]
    return [
        item.name,
        "named as children by their parent, never saved",
        f"ids {short_id(first)} … {short_id(last)}" if len(item.members) > 1 else f"id {first}",
    ]


def item_lines(
    item: TreeItem, marks: Mapping[str, BranchMark], names: Mapping[str, str] | None = None
) -> list[str]:
    """The hover of any item, as plain lines."""
    if item.node is not None:
        return hover_lines(item.node, marks.get(item.id), names)
    if item.run is None:
        return fold_lines(item)
    return run_lines(item, marks, names)


def hover_text(node: ContextNode, mark: BranchMark | None, names: Mapping[str, str] | None = None) -> str:
    """The hover label of a node: :func:`hover_lines`, escaped, joined by line breaks."""
    return "<br>".join(_plain(line) for line in hover_lines(node, mark, names))


def _item_hover(item: TreeItem, marks: Mapping[str, BranchMark], names: Mapping[str, str]) -> str:
    return "<br>".join(_plain(line) for line in item_lines(item, marks, names))


def _edge_coordinates(layout: TreeLayout) -> tuple[list[float | None], list[float | None]]:
    xs: list[float | None] = []
    ys: list[float | None] = []
    for parent, child in layout.edges:
        (px_, py_), (cx, cy) = layout.positions[parent], layout.positions[child]
        xs += [px_, px_, cx, None]
        ys += [py_, cy, cy, None]
    return xs, ys


def _kind_trace(
    kind: str,
    members: list[TreeItem],
    layout: TreeLayout,
    marks: Mapping[str, BranchMark],
    names: Mapping[str, str],
) -> go.Scatter:
    symbol, colour = KIND_STYLE[kind]
    return go.Scatter(
        x=[layout.positions[i.id][0] for i in members],
        y=[layout.positions[i.id][1] for i in members],
        mode="markers+text",
        marker={
            "symbol": symbol,
            "color": colour,
            "size": 20 if kind == RUN_KIND else 16,
            "line": {"width": 2, "color": colour},
        },
        text=["\u2002" + _plain(i.label, _CHART_TEXT_LIMIT) for i in members],  # clear of the ring
        textposition="middle right",
        cliponaxis=False,
        hovertext=[_item_hover(i, marks, names) for i in members],
        hoverinfo="text",
        customdata=[[i.id] for i in members],
        name=kind,
        selected={"marker": {"size": 24}},
        unselected={"marker": {"opacity": 1}, "textfont": {"color": "#444444"}},
    )


_CHART_PX = 1150
_CHAR_PX = 6.5
_COLUMN_PX = 48


def _x_extent(items: Sequence[TreeItem], layout: TreeLayout) -> float:
    """The right end of the x axis: columns ``_COLUMN_PX`` apart in a chart about
    ``_CHART_PX`` wide, closer where the name beside the rightmost marker would not fit
    (names are cut at ``_CHART_TEXT_LIMIT`` characters)."""
    extent = _CHART_PX / _COLUMN_PX - 0.3
    for item in items:
        share = min(len(item.label), _CHART_TEXT_LIMIT + 1) * _CHAR_PX / _CHART_PX + 0.04
        extent = max(extent, (layout.positions[item.id][0] + 0.6) / (1 - share) - 0.3)
    return extent


def fork_tree_figure(
    items: Sequence[TreeItem],
    marks: Mapping[str, BranchMark] | None = None,
    names: Mapping[str, str] | None = None,
) -> go.Figure:
    """The tree drawn with plotly: elbow edges, one marker trace per kind (so the legend
    names the kinds), each node named beside it, and a ring around the active context;
    ``names`` (:attr:`SessionNames.names`) name the contexts in the hovers.

    Every marker carries its context id (a run: its first fork's) as ``customdata``,
    which is what a click on it returns to the page.
    """
    marks, names = marks or {}, names or {}
    layout = tree_layout(items)
    edge_x, edge_y = _edge_coordinates(layout)
    figure = go.Figure()
    figure.add_trace(
        go.Scatter(
            x=edge_x,
            y=edge_y,
            mode="lines",
            line={"color": "#b0b0b0", "width": 1.5},
            hoverinfo="skip",
            name="edges",
        )
    )
    for kind in KIND_STYLE:
        members = [item for item in items if item.kind == kind]
        if members:
            figure.add_trace(_kind_trace(kind, members, layout, marks, names))
    active = [item for item in items if item.active]
    if active:
        figure.add_trace(
            go.Scatter(
                x=[layout.positions[i.id][0] for i in active],
                y=[layout.positions[i.id][1] for i in active],
                mode="markers",
                marker={"symbol": "circle-open", "size": 28, "color": "#d62728", "line": {"width": 3}},
                hovertext=[_item_hover(i, marks, names) for i in active],
                hoverinfo="text",
                customdata=[[i.id] for i in active],
                name="active",
                unselected={"marker": {"opacity": 1}},
            )
        )
    figure.update_layout(
        height=max(240, 40 * len(items) + 100),
        margin={"l": 20, "r": 20, "t": 40, "b": 20},
        xaxis={
            "range": [-0.3, _x_extent(items, layout)],
            "showticklabels": False,
            "zeroline": False,
            "fixedrange": True,
        },
        yaxis={"autorange": "reversed", "showticklabels": False, "showgrid": False, "zeroline": False},
        clickmode="event+select",
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
    )
    return figure


def clicked_context(points: Sequence[Mapping[str, Any]]) -> str | None:
    """The context id of the first clicked point of a chart selection, if any.

    Streamlit hands back ``customdata`` as the list each marker was given; a bare
    value is accepted too.
    """
    for point in points:
        data = point.get("customdata")
        if isinstance(data, list) and data:
            data = data[0]
        if isinstance(data, str) and data:
            return data
    return None


def _missing_parent(item: TreeItem) -> str | None:
    """A parent the tree does not hold (unreadable, or of another session), by short id."""
    parent = item.node.parent_id if item.node else None
    return f"{short_id(parent)} (not in this session)" if parent else None


def node_table(items: Sequence[TreeItem]) -> pd.DataFrame:
    """The drawn nodes as a table, name first and id last; a discarded context has no
    message count, a folded run counts its forks (the columns ``forks`` and ``time`` are
    there only when some run is folded). Text cells are never empty values, which the
    page would show as "None": a root's parent reads "— (root)", a context's time ""."""
    names = {item.id: item.name for item in items}
    rows = [
        (
            item.name,
            item.kind,
            item.messages,
            len(item.run.fork_ids) if item.run else None,
            (names.get(item.parent or "") if item.parent else _missing_parent(item)) or "— (root)",
            (item.run.started or "") if item.run else "",
            item.active,
            item.id,
        )
        for item in items
    ]
    table = pd.DataFrame.from_records(rows, columns=list(NODE_COLUMNS))
    table = table.astype({"messages": "Int64", "forks": "Int64"})
    if not any(item.run for item in items):  # only folded runs count forks and have a time
        table = table.drop(columns=["forks", "time"])
    return table


def item_of(items: Sequence[TreeItem], context_id: str) -> TreeItem | None:
    """The item that shows ``context_id``: its own, or the run folded over it."""
    return next((item for item in items if context_id in item.members), None)


def find_node(session: Session, nodes: Sequence[ContextNode], ref: str) -> ContextNode:
    """The node whose id is ``ref``, else the only one starting with it.

    Like :meth:`Session.context`, but discarded contexts (named, without a file) can be
    found too, since the tree shows them; raises ContextNotFoundError otherwise.
    """
    exact = [n for n in nodes if n.id == ref]
    matches = exact or [n for n in nodes if n.id.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    problem = "matches several contexts" if matches else "no such context in this session"
    raise ContextNotFoundError(session.directory or session.uuid, f"context {ref!r}: {problem}")


def tree_summary(nodes: Sequence[ContextNode], runs: int = 0) -> str:
    """One line counting the contexts of the tree by kind (and the runs of the replays)."""
    counts = {kind: sum(1 for n in nodes if n.kind == kind) for kind in KIND_STYLE if kind != RUN_KIND}
    listed = [f"{count} {kind}" for kind, count in counts.items() if count]
    if runs and counts["replay"]:
        index = list(counts).index("replay")
        at = sum(1 for kind in list(counts)[:index] if counts[kind])
        listed[at] += f" (from {runs} run{'' if runs == 1 else 's'})"
    return f"{len(nodes)} context{'' if len(nodes) == 1 else 's'}: {', '.join(listed) or 'none'}"
