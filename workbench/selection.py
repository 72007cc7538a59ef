"""What every page needs first: the store, the session and the context, from the URL.

The selection lives in query parameters (``store``, ``session``, ``context``,
``message``) so that a copied link opens the same view; the pickers here read them,
fall back to sensible defaults and write the choice back.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import replace

import streamlit as st

from soap_core import ContextNotFoundError, Session, SessionOverview, SoapError
from soap_core._names import distinct_names
from workbench import session_filters
from workbench.loading import (
    Scope,
    agent_names,
    chosen_store,
    load_session,
    read_only_session,
    session_overviews,
    show_error_and_stop,
)
from workbench.session_filters import (
    SORTS,
    SessionFilter,
    matches_session,
    narrowed,
    typed_session,
)
from workbench.views import StoreSignature, context_label, escape_markdown, session_label, store_signature

CARRIED = ("session", "context", "message")
"""The selection that follows the user from page to page (the store is kept by app.py)."""
_CARRIED_STATE = "carried_selection"


def restore_selection() -> None:
    """Put the selection the last page left back into the URL when this one names none:
    moving to another page in the sidebar clears the query parameters. A URL that names
    any part of a selection (a copied link) is taken as it is."""
    saved: dict[str, str] = st.session_state.get(_CARRIED_STATE, {})
    if saved and not any(key in st.query_params for key in CARRIED):
        st.query_params.update(saved)
    else:
        remember_selection()  # kept at once: a click in the sidebar may cut this run short


def remember_selection() -> None:
    """Keep the selection as the page left it in the URL, for the next page.

    A run cut short by a click in the sidebar (a first open of a store is slow, and a
    person clicks on) already sees the next page's empty query string: that is no
    selection to keep, and the one kept before stays."""
    carried = {key: st.query_params[key] for key in CARRIED if key in st.query_params}
    if carried:
        st.session_state[_CARRIED_STATE] = carried


def choose_session(chosen: str) -> None:
    """Record ``chosen`` as the session; a context or message of another one is dropped."""
    wanted = st.query_params.get("session")
    if not wanted or not matches_session(chosen, wanted):
        for key in CARRIED[1:]:
            st.query_params.pop(key, None)
    st.query_params["session"] = chosen


def pick_typed_session(
    rows: list[SessionOverview],
    overviews: list[SessionOverview],
    current: str | None,
    label_of: Callable[[SessionOverview], str],
    *,
    key: str,
    placeholder: str,
    rows_are: str,
) -> str | None:
    """A session picker over ``rows`` and the ``current`` session that takes any other
    session of ``overviews`` typed in (:func:`take_typed_session`): ten thousand options
    cost every click on a page a third of a second. The chosen uuid; None when none is
    chosen, or when a typed text names no single session (which it says)."""
    listed = {o.uuid for o in rows}
    offered = rows + [o for o in overviews if o.uuid == current and current not in listed]
    labels = {o.uuid: label_of(o) for o in offered}
    uuids = list(labels)
    more = len(rows) < len(overviews)
    chosen = st.selectbox(
        "Session",
        uuids,
        index=uuids.index(current) if current in labels else None,
        format_func=lambda uuid: labels.get(uuid, uuid),
        placeholder=placeholder + (", or type its id" if more else ""),
        key=key,  # its identity kept while its options grow by a typed session
        accept_new_options=more,
        on_change=take_typed_session,
        args=(key, listed, overviews),
        help=f"{rows_are}; type a session's id, or its first characters, to open any other."
        if more
        else None,
    )
    if chosen is not None and chosen not in labels:
        st.warning(escape_markdown(f"No single session of this store has an id beginning {chosen!r}."))
        return None
    return chosen


def keep_in_url(param: str, value: str | None) -> None:
    """Write ``value`` into ``?param=``, or drop the parameter when ``value`` is None."""
    if value is None:
        st.query_params.pop(param, None)
    else:
        st.query_params[param] = value


def take_typed_session(key: str, listed: Container[str], overviews: list[SessionOverview]) -> None:
    """The session typed into the picker ``key``, made the session it names: it becomes
    the URL's, and the picker's typed value is dropped, so that the picker is drawn again
    on the URL's session and shows its label. A callback, where a widget's value may still
    be dropped; a text that names no single session is left for the page to say so."""
    typed = st.session_state.get(key)
    if typed is None or typed in listed:
        return
    found = typed_session(typed, overviews)
    if found is not None:
        del st.session_state[key]
        choose_session(found)


def store_overviews(root: str, signature: StoreSignature) -> list[SessionOverview]:
    """The store's listing rows; stops the page with a message when there are none."""
    try:
        overviews = session_overviews(root, signature)
    except SoapError as exc:
        show_error_and_stop(exc)
    if not overviews:
        st.info("This store has no sessions yet.")
        st.stop()
    return overviews


def selected_scope(*, read_only: bool = False) -> Scope:
    """The chosen store, its state and the session of ``?session=`` (else one picked
    here): the scope a page works in. ``read_only``: the session is the one object shared
    by every rerun (:func:`~workbench.loading.read_only_session`), for a page that never
    changes it, so a long context is not copied and rebuilt on every click."""
    root = chosen_store()
    signature = store_signature(root)  # once a run: it stats every file of the store
    return Scope.of(root, signature, selected_session(root, signature, read_only=read_only))


def selected_session(root: str, signature: StoreSignature, *, read_only: bool = False) -> Session:
    """The session of ``?session=`` (uuid or prefix), else one picked here; stops the page
    with a clear message when there is none or it cannot be read."""
    overviews = store_overviews(root, signature)
    wanted = st.query_params.get("session")
    matching = [o.uuid for o in overviews if wanted and matches_session(o.uuid, wanted)]
    current = matching[0] if len(matching) == 1 else None
    if wanted and not matching:
        st.warning(escape_markdown(f"No session of this store matches {wanted!r}: pick one below."))
    elif len(matching) > 1:
        st.warning(escape_markdown(f"{wanted!r} matches {len(matching)} sessions: pick one below."))
    names = agent_names(root, signature)
    roles = distinct_names(o.role for o in overviews)  # twins (Café composed, decomposed) apart
    chosen = pick_typed_session(
        narrowed(overviews, SessionFilter(), next(iter(SORTS)))[: session_filters.PICKER_ROWS],
        overviews,
        current,
        lambda o: session_label(replace(o, role=roles[o.role]), names.get(o.uuid)),
        key="session_picker",
        placeholder="Pick a session",
        rows_are="The latest sessions, as the Sessions page orders them",
    )
    if chosen is None:
        st.info("Pick a session to see it here.")
        st.stop()
    choose_session(chosen)
    if wanted and current is None:
        st.rerun()  # picked after a link named none of them: drawn again without the warning
    try:
        return (
            read_only_session(root, chosen, signature) if read_only else load_session(root, chosen, signature)
        )
    except SoapError as exc:
        show_error_and_stop(exc)


def selected_context(
    scope: Scope,
    label: str = "Context",
    key: str | None = "context_picker",
    on_change: Callable[[], None] | None = None,
) -> Scope:
    """The scope with the context of ``?context=`` (id or prefix), else the active one,
    else the first; ``key`` and ``on_change`` are the picker's."""
    session = scope.session
    if not session.contexts:
        st.info("This session has no readable context.")
        st.stop()
    ids = list(session.contexts)
    wanted = st.query_params.get("context")
    try:
        default = session.context(wanted).id if wanted else session.active_context_id
    except ContextNotFoundError as exc:  # a link to a context this session lacks: not a dead end
        st.warning(escape_markdown(f"{exc.problem}: showing the active context instead"))
        default = session.active_context_id
    except SoapError as exc:
        show_error_and_stop(exc)
    if default not in session.contexts:
        if default is not None:
            st.warning(escape_markdown(f"the active context {default} has no readable file"))
        default = ids[0]
    chosen = st.selectbox(
        label,
        ids,
        index=ids.index(default),
        format_func=lambda cid: context_label(session, cid),
        key=key,
        on_change=on_change,
    )
    st.query_params["context"] = chosen
    return scope.at(session.contexts[chosen])
