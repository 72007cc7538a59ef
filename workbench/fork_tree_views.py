"""The Fork tree page's figures: the layout of a session's contexts, the plotly figure
drawn from it, and the node table.

Plain functions without Streamlit, so that a test can check what the page draws
against :func:`soap_core.fork_tree` without running the page.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from soap_core import REPLAY_KEY, ContextNode, ContextNotFoundError, Session
from workbench.views import short_id

NODE_COLUMNS = ("id", "kind", "parent", "messages", "active")

KIND_STYLE: Mapping[str, tuple[str, str]] = {
    "root": ("square", "#1f77b4"),
    "fork": ("circle", "#2ca02c"),
    "replay": ("diamond", "#9467bd"),
    "discarded": ("circle-open", "#7f7f7f"),
}
"""Marker symbol and colour per node kind; discarded contexts are hollow (no file)."""

_HOVER_VALUE_LIMIT = 200


@dataclass(frozen=True)
class TreeLayout:
    """Where each context sits (x = fork depth, y = depth-first order) and which edges join them."""

    positions: dict[str, tuple[int, int]]
    edges: list[tuple[str, str]]
    """(parent id, child id), only for parents that are nodes of the tree."""


def tree_layout(nodes: Sequence[ContextNode]) -> TreeLayout:
    """One row per context in depth-first order, indented by depth, like a file tree.

    Depth-first order puts every child below its parent and before the parent's next
    sibling, so elbow edges from parent to child never cross another node.
    """
    positions = {node.id: (node.depth, row) for row, node in enumerate(nodes)}
    edges = [(n.parent_id, n.id) for n in nodes if n.parent_id is not None and n.parent_id in positions]
    return TreeLayout(positions, edges)


def replay_records(session: Session) -> dict[str, dict[str, Any]]:
    """The replay record (``extra["soapwb_replay"]``) of every replay fork, by context id."""
    return {
        cid: dict(context.extra[REPLAY_KEY])
        for cid, context in session.contexts.items()
        if isinstance(context.extra.get(REPLAY_KEY), Mapping)
    }


def _plain(text: str) -> str:
    """``text`` as plotly shows it literally: plotly reads a subset of HTML in hover
    labels, so markup from the files is escaped and long values are cut."""
    if len(text) > _HOVER_VALUE_LIMIT:
        text = text[:_HOVER_VALUE_LIMIT] + "…"
    return html.escape(text, quote=False)


def hover_lines(node: ContextNode, replay: Mapping[str, Any] | None) -> list[str]:
    """What hovering a node tells, as plain lines: id, kind, size, and replay details."""
    messages = "no file" if node.messages is None else f"{node.messages} messages"
    lines = [node.id, f"{node.kind}, {messages}" + ("  [active]" if node.active else "")]
    if node.parent_missing:
        lines.append(f"origin {node.parent_id} not in this session")
    if replay:
        if replay.get("label") is not None:
            lines.append(f"label: {replay['label']}")
        what = {"rerun": "re-run of the agent from", "continue": "conversation continued from"}.get(
            str(replay.get("kind")), "replay of"
        )
        lines.append(f"{what} {replay.get('of_context')} message #{replay.get('of_index')}")
        lines.append("overrides: " + json.dumps(replay.get("overrides") or {}, ensure_ascii=False))
        if replay.get("tools"):
            lines.append("tools: " + json.dumps(replay["tools"], ensure_ascii=False))
        if replay.get("error"):
            lines.append(f"error: {replay['error']}")
    return lines


def hover_text(node: ContextNode, replay: Mapping[str, Any] | None) -> str:
    """The hover label of a node: :func:`hover_lines`, escaped, joined by line breaks."""
    return "<br>".join(_plain(line) for line in hover_lines(node, replay))


def _edge_coordinates(layout: TreeLayout) -> tuple[list[float | None], list[float | None]]:
    xs: list[float | None] = []
    ys: list[float | None] = []
    for parent, child in layout.edges:
        (px_, py_), (cx, cy) = layout.positions[parent], layout.positions[child]
        xs += [px_, px_, cx, None]
        ys += [py_, cy, cy, None]
    return xs, ys


def fork_tree_figure(
    nodes: Sequence[ContextNode], replays: Mapping[str, Mapping[str, Any]] | None = None
) -> go.Figure:
    """The fork tree drawn with plotly: elbow edges, one marker trace per node kind (so
    the legend names the kinds), and a ring around the active context.

    Every marker carries its context id as ``customdata``, which is what a click on it
    returns to the page.
    """
    replays = replays or {}
    layout = tree_layout(nodes)
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
    for kind, (symbol, colour) in KIND_STYLE.items():
        members = [node for node in nodes if node.kind == kind]
        if not members:
            continue
        figure.add_trace(
            go.Scatter(
                x=[layout.positions[n.id][0] for n in members],
                y=[layout.positions[n.id][1] for n in members],
                mode="markers+text",
                marker={"symbol": symbol, "color": colour, "size": 16, "line": {"width": 2, "color": colour}},
                text=[_plain(short_id(n.id)) for n in members],
                textposition="middle right",
                hovertext=[hover_text(n, replays.get(n.id)) for n in members],
                hoverinfo="text",
                customdata=[[n.id] for n in members],
                name=kind,
                selected={"marker": {"size": 22}},
                unselected={"marker": {"opacity": 1}, "textfont": {"color": "#444444"}},
            )
        )
    active = [node for node in nodes if node.active]
    if active:
        figure.add_trace(
            go.Scatter(
                x=[layout.positions[n.id][0] for n in active],
                y=[layout.positions[n.id][1] for n in active],
                mode="markers",
                marker={"symbol": "circle-open", "size": 28, "color": "#d62728", "line": {"width": 3}},
                hovertext=[hover_text(n, replays.get(n.id)) for n in active],
                hoverinfo="text",
                customdata=[[n.id] for n in active],
                name="active",
                unselected={"marker": {"opacity": 1}},
            )
        )
    depth = max((node.depth for node in nodes), default=0)
    figure.update_layout(
        height=max(240, 48 * len(nodes) + 80),
        margin={"l": 20, "r": 20, "t": 40, "b": 20},
        xaxis={"title": "fork depth", "dtick": 1, "range": [-0.5, depth + 1.5], "zeroline": False},
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


def node_table(nodes: Sequence[ContextNode]) -> pd.DataFrame:
    """The nodes as a table; a discarded context has no message count."""
    rows = [(n.id, n.kind, n.parent_id, n.messages, n.active) for n in nodes]
    table = pd.DataFrame.from_records(rows, columns=list(NODE_COLUMNS))
    return table.astype({"messages": "Int64"})


def node_label(node: ContextNode) -> str:
    """How a node is named in a picker: id, kind, size and whether it is active."""
    size = "no file" if node.messages is None else f"{node.messages} messages"
    return f"{node.id}  ({node.kind}, {size})" + ("  active" if node.active else "")


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


def tree_summary(nodes: Sequence[ContextNode]) -> str:
    """One line counting the contexts of the tree by kind."""
    counts = {kind: sum(1 for n in nodes if n.kind == kind) for kind in KIND_STYLE}
    listed = ", ".join(f"{count} {kind}" for kind, count in counts.items() if count)
    return f"{len(nodes)} context{'' if len(nodes) == 1 else 's'}: {listed or 'none'}"
