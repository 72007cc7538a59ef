"""The pages' access to the store: the chosen path, cached loads, errors shown plainly.

Every click reruns a page, so loads are cached, keyed by the store path and its
:func:`~workbench.views.store_signature`: a rerun reuses the parsed data, and any write
to the store (by peteos or by us) makes the next rerun read it afresh.

Two caches hold sessions. :func:`load_session` goes through ``st.cache_data``, which
hands every caller its own copy (unpickled on each rerun), so pages that change what
they get (replay and compaction add forks to it) change only their copy. For a session
of 100,000 messages that copy takes seconds on every rerun, so :func:`read_only_session`
goes through ``st.cache_resource`` instead: one object shared by every rerun and every
browser tab, for pages that only read it (the Context page). Nothing may change it.
It keeps three sessions at most: one of 100,000 messages takes about 220 MB.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import streamlit as st

from importers.openpoke import EXECUTION_ROLE, openpoke_state
from replay import PromptAtCall, system_prompt_history
from soap_core import (
    SearchHit,
    Session,
    SessionOverview,
    SoapError,
    Store,
    search_store,
    session_overview,
)
from workbench.context_views import ContextIndex, build_index
from workbench.views import StoreSignature, error_first, escape_markdown, store_signature


def show_error_and_stop(exc: Exception) -> NoReturn:
    """Show a soap_core error as one line (never a traceback), what is wrong first and
    the file after, relative to the chosen store; then end the page run."""
    st.error(escape_markdown(error_first(exc, st.query_params.get("store") or None)))
    st.stop()


def chosen_store() -> str:
    """The store path from the ``store`` query parameter; stops the page if it is unusable."""
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


@st.cache_data(show_spinner=False, max_entries=8)
def _agent_names(root: str, signature: StoreSignature) -> dict[str, str]:
    store = Store(root)
    names = {}
    for summary in store.sessions():
        if summary.role != EXECUTION_ROLE or summary.error:
            continue
        try:
            agent = openpoke_state(store.read_session_file(summary.role, summary.path)).get("agent")
        except SoapError:
            continue  # the listing shows the session as broken by itself
        if isinstance(agent, str) and agent.strip():
            names[summary.uuid] = agent
    return names


def agent_names(root: str) -> dict[str, str]:
    """The agent name of every OpenPoke execution session, by uuid: their role is the
    same for all, so the pickers name them by the agent the import recorded. Reads
    ``session.json`` of those sessions only, once per state of the store."""
    return _agent_names(root, store_signature(root))


@st.cache_data(show_spinner="Loading the session…", max_entries=16)
def _session(root: str, ref: str, signature: StoreSignature) -> Session:
    session = Store(root).load_session(ref, require_active=False)
    for context in session.contexts.values():
        context.total_token_count()  # fills each message's token cache before pickling
    return session


def load_session(root: str, ref: str) -> Session:
    """The session ``ref`` (uuid or prefix) with every readable context; raises SoapError."""
    return _session(root, ref, store_signature(root))


@st.cache_resource(show_spinner="Loading the session…", max_entries=3)
def _shared_session(root: str, ref: str, signature: StoreSignature) -> Session:
    return Store(root).load_session(ref, require_active=False)


def read_only_session(root: str, ref: str, signature: StoreSignature | None = None) -> Session:
    """The session ``ref`` as :func:`load_session` gives it, but one object shared by
    every rerun and browser tab (no copy per rerun): read it, never change it. Its
    messages fill their token caches as they are counted, which is harmless sharing."""
    return _shared_session(root, ref, signature or store_signature(root))


@st.cache_data(show_spinner="Indexing the context…", max_entries=32)
def _context_index(root: str, ref: str, context_id: str, signature: StoreSignature) -> ContextIndex:
    session = _shared_session(root, ref, signature)
    return build_index(session, session.contexts[context_id], Store(root).message_facts)


def context_index(
    root: str, ref: str, context_id: str, signature: StoreSignature | None = None
) -> ContextIndex:
    """The :class:`~workbench.context_views.ContextIndex` of one context of the session
    ``ref``: one pass over its messages the first time, a small copy afterwards."""
    return _context_index(root, ref, context_id, signature or store_signature(root))


@st.cache_data(show_spinner="Counting tokens…", max_entries=32)
def _context_tokens(root: str, ref: str, context_id: str, signature: StoreSignature) -> int:
    return _shared_session(root, ref, signature).contexts[context_id].total_token_count()


def context_tokens(root: str, ref: str, context_id: str, signature: StoreSignature | None = None) -> int:
    """The true token total of one context (cl100k_base), counted once."""
    return _context_tokens(root, ref, context_id, signature or store_signature(root))


@st.cache_data(show_spinner="Reading the call log…", max_entries=32)
def _system_prompts(root: str, ref: str, context_id: str, signature: StoreSignature) -> list[PromptAtCall]:
    session = _shared_session(root, ref, signature)
    return system_prompt_history(session, session.contexts[context_id])


def system_prompts(
    root: str, ref: str, context_id: str, signature: StoreSignature | None = None
) -> list[PromptAtCall]:
    """``replay.system_prompt_history`` of one context, read from the call log once."""
    return _system_prompts(root, ref, context_id, signature or store_signature(root))


@st.cache_data(show_spinner="Searching…", max_entries=16)
def _search(root: str, query: str, signature: StoreSignature) -> list[SearchHit]:
    return search_store(Store(root), query, refresh=False)  # the signature just refreshed it


def search_hits(root: str, query: str) -> list[SearchHit]:
    """Messages of the store containing ``query``, each once."""
    return _search(root, query, store_signature(root))
