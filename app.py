"""soap-workbench: the Streamlit entry point (``make run``).

It sets up the page, the store picker in the sidebar and the list of pages. The chosen
store path is kept in the ``store`` query parameter, so that a copied link opens the same
store, and in the picker's session state, so that it survives switching pages (which
clears the query parameters); the session, context and message are carried from page to
page the same way (:func:`workbench.selection.restore_selection`).
"""

from __future__ import annotations

import os

import streamlit as st

from workbench.live import follow
from workbench.selection import remember_selection, restore_selection

STORE_KEY = "store_path"
# The browser tab's icon: soap bubbles drawn here, sent to the browser as a data: URL.
# Without an icon of its own, Streamlit makes the current page's Material icon the tab's
# icon and fetches it from fonts.gstatic.com; the workbench asks nothing of another
# machine. (A comment, not a docstring: Streamlit would write a bare string on the page.)
FAVICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" stroke="#ff4b4b" '
    'stroke-width="2"><circle cx="9" cy="14" r="6"/><circle cx="17.5" cy="6.5" r="3.5"/>'
    '<circle cx="19" cy="18" r="2"/></svg>'
)


def first_store() -> None:
    """The store the session starts on: ``?store=``, else SOAPWB_STORE."""
    if STORE_KEY not in st.session_state:
        st.session_state[STORE_KEY] = st.query_params.get("store") or os.environ.get("SOAPWB_STORE", "")


def pick_store() -> str:
    """The store path or URL typed in the sidebar (it starts as :func:`first_store`)."""
    first_store()
    path = st.sidebar.text_input(
        "Store (folder or URL)",
        key=STORE_KEY,
        help="A peteos store of either generation: the folder holding peteos.json, its .peteos/, "
        "or the agents/ (peteos 0.5, our runtime) or sessions/ (peteos 0.6) folder itself; or "
        "such a folder on object storage, as a URL (s3://bucket/prefix, with the storage options "
        "`soapwb ui --storage-option` was given).",
    ).strip()
    if path:
        st.query_params["store"] = path
    elif "store" in st.query_params:
        del st.query_params["store"]
    return path


st.set_page_config(page_title="soap-workbench", page_icon=FAVICON, layout="wide")
# Before the sidebar is drawn: once it is, a person can click in it, and a click cuts this
# run short at its next element, so what a copied link names must already be kept.
first_store()
restore_selection()
page = st.navigation(
    [
        st.Page("workbench/pages/sessions.py", title="Sessions", icon=":material/list:", default=True),
        st.Page("workbench/pages/context.py", title="Context", icon=":material/chat:"),
        st.Page("workbench/pages/fork_tree.py", title="Fork tree", icon=":material/account_tree:"),
        st.Page("workbench/pages/traceback.py", title="Traceback", icon=":material/stacks:"),
        st.Page("workbench/pages/token_budget.py", title="Token budget", icon=":material/data_usage:"),
        st.Page("workbench/pages/replay.py", title="Replay & diff", icon=":material/replay:"),
        st.Page("workbench/pages/compaction.py", title="Compaction", icon=":material/compress:"),
        st.Page("workbench/pages/object_state.py", title="Object state", icon=":material/data_object:"),
    ]
)
with st.sidebar:
    follow(pick_store())  # before the page reads the store (workbench.live)
try:
    page.run()
finally:  # also when the page stops early (st.stop) or reruns
    remember_selection()
