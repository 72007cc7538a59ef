"""Fork tree page: every context of a session as a tree, to open one or diff two.

Compaction forks, replay forks and discarded children (named by a parent, never saved)
are drawn by kind, each named before its id. The forks of each replay run are folded
into one node named by what the run changed, unless "Show replay forks" is on. A click
on a node, or the picker below the tree, opens it on the Context page. The chosen node,
the toggle and the pair sent to Diff live in the query parameters (``context``,
``forks=all``, ``diff_a``, ``diff_b``), so the view can be shared as a link.
"""

from __future__ import annotations

import streamlit as st

from replay import SessionNames, replay_marks, session_names
from soap_core import REPLAY_KEY, BranchMark, ContextNode, Session, SoapError
from workbench.fork_tree_views import (
    TreeItem,
    clicked_context,
    find_node,
    fork_tree_figure,
    hover_lines,
    item_of,
    node_table,
    run_lines,
    tree_items,
    tree_summary,
)
from workbench.loading import show_error_and_stop
from workbench.selection import keep_in_url, selected_scope
from workbench.views import blanks_as, context_label, escape_markdown, load_error_line, session_heading

CHART_KEY = "fork_tree_chart"
FORKS_KEY = "fork_tree_show_forks"
DIFF_KEY = "fork_tree_diff_pair"
DIFF_PARAMS = ("diff_a", "diff_b")


def open_clicked_node() -> None:
    """Chart callback: a clicked node becomes ``?context=``, which the picker below follows."""
    state = st.session_state.get(CHART_KEY) or {}
    clicked = clicked_context(state.get("selection", {}).get("points", []))
    if clicked is not None:
        st.query_params["context"] = clicked


def show_forks_toggle(names: SessionNames) -> bool:
    """The "Show replay forks" toggle, kept in ``?forks=all``; off, each run is one node."""
    if not names.runs:
        return False
    if FORKS_KEY not in st.session_state:
        st.session_state[FORKS_KEY] = st.query_params.get("forks") == "all"
    shown = st.toggle(
        "Show replay forks", key=FORKS_KEY, help="Off: the forks of each replay run are one node."
    )
    keep_in_url("forks", "all" if shown else None)
    return shown


def pick_item(session: Session, names: SessionNames, items: list[TreeItem]) -> tuple[TreeItem, ContextNode]:
    """The item showing ``?context=`` (id or prefix; else the active context, else the
    first), picked by name, and the context of it to open: that one if the item shows
    it, else the item's own (a run's first fork)."""
    nodes = list(names.nodes)
    wanted = st.query_params.get("context") or session.active_context_id or nodes[0].id
    try:
        current = find_node(session, nodes, wanted)
    except SoapError as exc:
        show_error_and_stop(exc)
    by_id = {item.id: item for item in items}
    shown = item_of(items, current.id) or items[0]
    ids = list(by_id)
    chosen = by_id[
        st.selectbox("Node", ids, index=ids.index(shown.id), format_func=lambda iid: by_id[iid].label)
    ]
    node = current if current.id in chosen.members else next(n for n in nodes if n.id == chosen.id)
    st.query_params["context"] = node.id
    return chosen, node


def pick_fork(session: Session, names: SessionNames, run: TreeItem, node: ContextNode) -> ContextNode:
    """One of the forks a folded run stands for (and what grew from them), by name."""
    members = list(run.members)
    by_node = {n.id: n for n in names.nodes}
    picked = st.selectbox(
        "Fork of this run",
        members,
        index=members.index(node.id),
        format_func=lambda cid: context_label(session, cid) if cid in session.contexts else names.names[cid],
    )
    st.query_params["context"] = picked
    return by_node[picked]


def show_item(
    root: str, session: Session, names: SessionNames, items: list[TreeItem], marks: dict[str, BranchMark]
) -> None:
    """The chosen node's details (a run's, then the fork of it picked) and a link that
    opens the context on the Context page."""
    item, node = pick_item(session, names, items)
    lines = hover_lines(node, marks.get(node.id), names.names)
    if item.run is not None and len(item.members) > 1:
        st.text("\n".join(run_lines(item, marks, names.names)))
        node = pick_fork(session, names, item, node)
        lines = hover_lines(node, marks.get(node.id), names.names)
    elif item.run is not None and item.run.started:
        lines.insert(1, f"ran {item.run.started}")
    st.text("\n".join(lines))
    if node.id in marks:
        with st.expander("Replay record"):
            st.json(dict(session.contexts[node.id].extra[REPLAY_KEY]), expanded=1)  # as the file holds it
    if node.kind == "discarded":
        st.info(
            "This context was discarded: its parent names it, but it was never saved, so there is nothing to open."
        )
        return
    st.page_link(
        "workbench/pages/context.py",
        label="Open in Context",
        icon=":material/arrow_forward:",
        query_params={"store": root, "session": session.uuid, "context": node.id},
    )


def diff_pair(saved: list[str]) -> None:
    """Set up the pair to diff: the picker's own state once it has one, else ``?diff_a=`` and
    ``?diff_b=``. The picker is keyed, so a pick never makes it a new widget (which
    dropped the first pick when the second was made)."""
    state = st.session_state.get(DIFF_KEY)
    if state is None or any(cid not in saved for cid in state):
        preset = [st.query_params.get(key) for key in DIFF_PARAMS]
        st.session_state[DIFF_KEY] = [cid for cid in dict.fromkeys(preset) if cid in saved]


def send_to_diff(root: str, session: Session, nodes: list[ContextNode]) -> None:
    """Two saved contexts, kept in ``?diff_a=`` and ``?diff_b=``, linked to Replay & diff."""
    saved = [n.id for n in nodes if n.kind != "discarded" and n.id in session.contexts]
    if len(saved) < 2:
        st.info(f"Diff needs two saved contexts; this session has {len(saved)}.")
        return
    diff_pair(saved)
    chosen = st.multiselect(
        "Two contexts to diff",
        saved,
        format_func=lambda cid: context_label(session, cid),
        max_selections=2,
        key=DIFF_KEY,
        placeholder="Pick two contexts",
        select_all=False,  # "Select all" of dozens of contexts would pass the limit of two
    )
    for key, value in zip(DIFF_PARAMS, [*chosen, None, None], strict=False):
        keep_in_url(key, value)
    if len(chosen) < 2:
        st.text("Pick two contexts to compare them on the Replay & diff page.")
        return
    st.page_link(
        "workbench/pages/replay.py",
        label="Diff these two",
        icon=":material/difference:",
        query_params={"store": root, "session": session.uuid, "diff_a": chosen[0], "diff_b": chosen[1]},
    )


st.title("Fork tree")
page_scope = selected_scope()
root, session = page_scope.root, page_scope.session
for name, error in session.load_errors.items():
    st.warning(escape_markdown(load_error_line(name, error, root)))
names = session_names(session)
if not names.nodes:
    st.info("This session has no contexts.")
    st.stop()
marks = replay_marks(session)
st.text(session_heading(session))
st.text(tree_summary(names.nodes, len(names.runs)))
show_all = show_forks_toggle(names)
items = tree_items(names, fold_runs=not show_all)
st.plotly_chart(
    fork_tree_figure(items, marks, names.names),
    on_select=open_clicked_node,
    selection_mode="points",
    key=CHART_KEY,
)
folded = len(marks) if not show_all else 0
st.caption(
    "Click a node to open it; discarded contexts are hollow, the active one is ringed in red."
    + (f" The {folded} replay forks are shown as one node per run." if folded else "")
)
st.dataframe(
    blanks_as(node_table(items), {"messages": "-", "forks": "-"}),  # a discarded context, a lone fork
    hide_index=True,
    column_config={
        "name": st.column_config.TextColumn(width="large"),
        "active": st.column_config.CheckboxColumn(width="small"),
        "time": st.column_config.TextColumn(width="medium"),
    },
)
st.subheader("Open a context")
show_item(root, session, names, items, marks)
st.subheader("Send two contexts to Diff")
send_to_diff(root, session, list(names.nodes))
