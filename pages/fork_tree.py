"""Fork tree page: every context of a session as a tree, to open one or diff two.

Compaction forks, replay forks and discarded children (named by a parent, never saved)
are drawn by kind; a click on a node, or the picker below the tree, opens it on the
Context page. The chosen node and the pair sent to Diff live in the query parameters
(``context``, ``diff_a``, ``diff_b``), so the view can be shared as a link.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from soap_core import ContextNode, Session, SoapError, fork_tree
from workbench.fork_tree_views import (
    clicked_context,
    find_node,
    fork_tree_figure,
    hover_lines,
    node_label,
    node_table,
    replay_records,
    tree_summary,
)
from workbench.loading import chosen_store, show_error_and_stop
from workbench.selection import selected_session
from workbench.views import escape_markdown

CHART_KEY = "fork_tree_chart"


def open_clicked_node() -> None:
    """Chart callback: a clicked node becomes ``?context=``, which the picker below follows."""
    state = st.session_state.get(CHART_KEY) or {}
    clicked = clicked_context(state.get("selection", {}).get("points", []))
    if clicked is not None:
        st.query_params["context"] = clicked


def pick_node(session: Session, nodes: list[ContextNode]) -> ContextNode:
    """The node of ``?context=`` (id or prefix), else the active context, else the first."""
    wanted = st.query_params.get("context") or session.active_context_id or nodes[0].id
    try:
        current = find_node(session, nodes, wanted)
    except SoapError as exc:
        show_error_and_stop(exc)
    ids = [n.id for n in nodes]
    by_id = {n.id: n for n in nodes}
    chosen = st.selectbox(
        "Node", ids, index=ids.index(current.id), format_func=lambda cid: node_label(by_id[cid])
    )
    st.query_params["context"] = chosen
    return by_id[chosen]


def show_node(root: str, session: Session, node: ContextNode, replays: dict[str, dict[str, Any]]) -> None:
    """The chosen node's details and a link that opens it on the Context page."""
    st.text("\n".join(hover_lines(node, replays.get(node.id))))
    if node.id in replays:
        st.json(replays[node.id], expanded=1)
    if node.kind == "discarded":
        st.info(
            "This context was discarded: its parent names it, but it was never saved, so there is nothing to open."
        )
        return
    st.page_link(
        "pages/context.py",
        label="Open in Context",
        icon=":material/arrow_forward:",
        query_params={"store": root, "session": session.uuid, "context": node.id},
    )


def send_to_diff(root: str, session: Session, nodes: list[ContextNode]) -> None:
    """Two saved contexts, kept in ``?diff_a=`` and ``?diff_b=``, linked to Replay & diff."""
    saved = [n for n in nodes if n.kind != "discarded"]
    if len(saved) < 2:
        st.info(f"Diff needs two saved contexts; this session has {len(saved)}.")
        return
    ids = [n.id for n in saved]
    by_id = {n.id: n for n in saved}
    preset = [st.query_params.get(key) for key in ("diff_a", "diff_b")]
    chosen = st.multiselect(
        "Two contexts to diff",
        ids,
        default=[cid for cid in dict.fromkeys(preset) if cid in by_id],
        format_func=lambda cid: node_label(by_id[cid]),
        max_selections=2,
    )
    for key, value in zip(("diff_a", "diff_b"), [*chosen, None, None], strict=False):
        if value is None:
            st.query_params.pop(key, None)
        else:
            st.query_params[key] = value
    if len(chosen) < 2:
        st.text("Pick two contexts to compare them on the Replay & diff page.")
        return
    st.page_link(
        "pages/replay.py",
        label="Diff these two",
        icon=":material/difference:",
        query_params={"store": root, "session": session.uuid, "diff_a": chosen[0], "diff_b": chosen[1]},
    )


st.title("Fork tree")
root = chosen_store()
session = selected_session(root)
for name, error in session.load_errors.items():
    st.warning(escape_markdown(f"unreadable context file {name}: {error}"))
nodes = fork_tree(session)
if not nodes:
    st.info("This session has no contexts.")
    st.stop()
replays = replay_records(session)
st.text(f"{session.role} / {session.uuid}  {tree_summary(nodes)}")
st.plotly_chart(
    fork_tree_figure(nodes, replays),
    on_select=open_clicked_node,
    selection_mode="points",
    key=CHART_KEY,
)
st.caption("Click a node to open it; discarded contexts are hollow, the active one is ringed in red.")
st.dataframe(node_table(nodes), hide_index=True)
st.subheader("Open a context")
show_node(root, session, pick_node(session, nodes), replays)
st.subheader("Send two contexts to Diff")
send_to_diff(root, session, nodes)
