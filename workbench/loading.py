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

What the pages share through ``st.cache_resource`` is frozen where Python has a frozen
form: tuples, read-only mappings, frozen dataclasses (``History``, ``Simulation``,
``CallBudget``, ``Materialized``). The session, pandas frames and plotly figures have
none: they are only read (tests/test_shared_session.py works each page that shares the
session and checks the object is as it was).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

import streamlit as st

from importers.openpoke import EXECUTION_ROLE, openpoke_state
from replay import PromptAtCall, system_prompt_history
from soap_core import (
    Context,
    SearchHit,
    Session,
    SessionOverview,
    SoapError,
    Store,
    is_remote,
    search_store,
)
from soap_core import (
    session_overviews as listing_of,
)
from workbench.context_views import ContextIndex, build_index
from workbench.views import (
    StoreSignature,
    caught_up,
    error_first,
    escape_markdown,
    open_store,
    records_signature,
    store_signature,
)


@dataclass(frozen=True)
class Scope:
    """What a page run works on: the store, its state (taken once a run: it stats the
    store), the session and, once picked, the context. The cached loaders of the pages
    take it whole (``hash_funcs=SCOPED``) and are keyed by :meth:`key`, the ids and the
    state, never by the objects."""

    root: str
    signature: StoreSignature
    session: Session
    context: Context | None = None
    records: StoreSignature = ()
    """The state of the session's record folders (:func:`~workbench.views.records_signature`):
    a new call or invocation record changes no file the store's signature looks at."""

    def key(self) -> tuple[str, StoreSignature, StoreSignature, str, str | None]:
        context_id = self.context.id if self.context else None
        return self.root, self.signature, self.records, self.session.uuid, context_id

    @classmethod
    def of(cls, root: str, signature: StoreSignature, session: Session) -> Scope:
        """The scope of ``session``, with the state of its record folders taken now."""
        return cls(root, signature, session, records=records_signature(session.directory))

    def at(self, context: Context) -> Scope:
        return replace(self, context=context)

    def writable(self) -> tuple[Store, Session]:
        """The store and a fresh load of the session, for a run that writes to them (the
        scope's session may be the one shared by every rerun); raises SoapError."""
        store = open_store(self.root)
        return store, store.load_session(self.session.uuid, require_active=False)

    @property
    def chosen(self) -> Context:
        """The context picked for this scope (a page picks one before it asks)."""
        if self.context is None:
            raise ValueError("no context chosen in this scope")
        return self.context


SCOPED: dict[Any, Any] = {Scope: Scope.key}
"""``hash_funcs`` of a cached loader that takes a :class:`Scope`."""


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
    if is_remote(path):
        try:
            open_store(path)  # reached, listed and pulled once; pages reuse the mirror
        except SoapError as exc:
            show_error_and_stop(exc)
    elif not Path(path).is_dir():
        st.error(escape_markdown(f"{path}: no such store directory"))
        st.stop()
    return path


# The store-wide loaders take the store's state as an argument (its cache key): a page
# takes it once a run (``Scope.signature``), for it stats the store.


@st.cache_data(show_spinner="Reading the store…", max_entries=8)
def session_overviews(root: str, signature: StoreSignature) -> list[SessionOverview]:
    """One listing row per session of the store, broken ones included."""
    store = open_store(root)
    return listing_of(store, refresh=not caught_up(signature))


@st.cache_data(show_spinner=False, max_entries=8)
def agent_names(root: str, signature: StoreSignature) -> dict[str, str]:
    """The agent name of every OpenPoke execution session, by uuid: their role is the
    same for all, so the pickers name them by the agent the import recorded. Reads
    ``session.json`` of those sessions only, once per state of the store."""
    store = open_store(root)
    rows = store.listing(
        lambda row: (
            (row.uuid if row.uuid is not None else row.name, row.dir)
            if row.role == EXECUTION_ROLE and not row.error
            else None
        ),
        refresh=not caught_up(signature),
    )
    if rows is None:  # no catalog: the listing from the files
        rows = [(s.uuid, s.path) for s in store.sessions() if s.role == EXECUTION_ROLE and not s.error]
    names = {}
    for uuid, path in filter(None, rows):
        try:
            agent = openpoke_state(store.read_session_file(EXECUTION_ROLE, path)).get("agent")
        except SoapError:
            continue  # the listing shows the session as broken by itself
        if isinstance(agent, str) and agent.strip():
            names[uuid] = agent
    return names


@st.cache_data(show_spinner="Searching…", max_entries=16)
def search_hits(root: str, query: str, signature: StoreSignature) -> list[SearchHit]:
    """Messages of the store containing ``query``, each once."""
    return search_store(open_store(root), query, refresh=False)  # taking the signature refreshed it


@st.cache_data(show_spinner="Loading the session…", max_entries=16)
def _session(root: str, ref: str, signature: StoreSignature) -> Session:
    session = open_store(root).load_session(ref, require_active=False)
    for context in session.contexts.values():
        context.total_token_count()  # fills each message's token cache before pickling
    return session


def load_session(root: str, ref: str, signature: StoreSignature | None = None) -> Session:
    """The session ``ref`` (uuid or prefix) with every readable context, a copy of its
    own for each caller; raises SoapError."""
    return _session(root, ref, signature or store_signature(root))


@st.cache_resource(show_spinner="Loading the session…", max_entries=3)
def _shared_session(root: str, ref: str, signature: StoreSignature) -> Session:
    return open_store(root).load_session(ref, require_active=False)


def read_only_session(root: str, ref: str, signature: StoreSignature | None = None) -> Session:
    """The session ``ref`` as :func:`load_session` gives it, but one object shared by
    every rerun and browser tab (no copy per rerun): read it, never change it. Its
    messages fill their token caches as they are counted, which is harmless sharing."""
    return _shared_session(root, ref, signature or store_signature(root))


# What the Context page computes over the chosen context of a read-only scope.


@st.cache_data(show_spinner="Indexing the context…", max_entries=32, hash_funcs=SCOPED)
def context_index(scope: Scope) -> ContextIndex:
    """The :class:`~workbench.context_views.ContextIndex` of the scope's context: one
    pass over its messages the first time, a small copy afterwards."""
    return build_index(scope.session, scope.chosen, open_store(scope.root).message_facts)


@st.cache_data(show_spinner="Counting tokens…", max_entries=32, hash_funcs=SCOPED)
def context_tokens(scope: Scope) -> int:
    """The true token total of the scope's context (cl100k_base), counted once."""
    return scope.chosen.total_token_count()


@st.cache_data(show_spinner="Reading the call log…", max_entries=32, hash_funcs=SCOPED)
def system_prompts(scope: Scope) -> list[PromptAtCall]:
    """``replay.system_prompt_history`` of the scope's context, read from the call log once."""
    return system_prompt_history(scope.session, scope.chosen)
