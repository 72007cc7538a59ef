"""The pages' access to the store: the chosen path, cached loads, errors shown plainly.

Every click reruns a page, so loads go through ``st.cache_data`` keyed by the store path
and its :func:`~workbench.views.store_signature`: a rerun reuses the parsed data, and
any write to the store (by peteos or by us) makes the next rerun read it afresh.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import streamlit as st

from soap_core import SearchHit, Session, SessionOverview, Store, search_store, session_overview
from workbench.views import StoreSignature, escape_markdown, store_signature


def show_error_and_stop(exc: Exception) -> NoReturn:
    """Show a soap_core error as one line (never a traceback) and end the page run."""
    st.error(escape_markdown(str(exc)))
    st.stop()


APP_RAN = "_soapwb_app_ran"
"""Set by app.py in the session state the first time it runs."""


def run_through_the_app() -> None:
    """Make sure a page runs inside app.py's navigation.

    With a ``pages/`` folder beside app.py, Streamlit's first script run in a server
    process uses its legacy multipage mode: a URL naming a page runs that page's file
    alone, without app.py (no store picker, the folder's file names as navigation)
    until some run has called ``st.navigation``. A page that finds itself run that way
    before app.py ever ran in this session switches the legacy mode off and reruns, so
    app.py takes over. (AppTest resets the mode before every run; there app.py has run
    first, and the pages keep running as they are.)
    """
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory and not st.session_state.get(APP_RAN):
        PagesManager.uses_pages_directory = False
        st.rerun()


def chosen_store() -> str:
    """The store path from the ``store`` query parameter; stops the page if it is unusable."""
    run_through_the_app()
    path = str(st.query_params.get("store", "")).strip()
    if not path:
        st.info("No store chosen: enter the path of a sOAP config dir in the sidebar, or set SOAPWB_STORE.")
        st.stop()
    if not Path(path).is_dir():
        st.error(escape_markdown(f"{path}: no such store directory"))
        st.stop()
    return path


@st.cache_data(show_spinner="Reading the store…", max_entries=8)
def _overviews(root: str, signature: StoreSignature) -> list[SessionOverview]:
    store = Store(root)
    return [session_overview(store, summary) for summary in store.sessions()]


def session_overviews(root: str) -> list[SessionOverview]:
    """One listing row per session of the store, broken ones included."""
    return _overviews(root, store_signature(root))


@st.cache_data(show_spinner="Loading the session…", max_entries=16)
def _session(root: str, ref: str, signature: StoreSignature) -> Session:
    session = Store(root).load_session(ref, require_active=False)
    for context in session.contexts.values():
        context.total_token_count()  # fills each message's token cache before pickling
    return session


def load_session(root: str, ref: str) -> Session:
    """The session ``ref`` (uuid or prefix) with every readable context; raises SoapError."""
    return _session(root, ref, store_signature(root))


@st.cache_data(show_spinner="Searching…", max_entries=16)
def _search(root: str, query: str, signature: StoreSignature) -> list[SearchHit]:
    return search_store(Store(root), query)


def search_hits(root: str, query: str) -> list[SearchHit]:
    """Messages of the store containing ``query``, each once."""
    return _search(root, query, store_signature(root))
