"""Sessions page: every session of the store, with the figures of its active context.

Broken sessions stay in the table with their error, so one bad file never hides the
rest of the store. Clicking a row opens that session's Context page; picking a session
below links to it.
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import streamlit as st

from replay import short_id
from soap_core import UNKNOWN_ROLE, SessionOverview, SoapError
from workbench import session_filters
from workbench.loading import agent_names, chosen_store, search_hits
from workbench.openpoke_views import (
    ImportSummary,
    diagnostics_label,
    import_summary,
    import_to_temporary_store,
)
from workbench.selection import choose_session, keep_in_url, pick_typed_session, store_overviews
from workbench.session_filters import (
    SINCE,
    SORTS,
    STATES,
    SessionFilter,
    filter_note,
    narrowed,
)
from workbench.views import (
    StoreSignature,
    counts_waiting,
    error_first,
    escape_markdown,
    open_store,
    overview_table,
    session_label,
    store_signature,
    text_waiting,
)


def pick_session(
    root: str, shown: list[SessionOverview], overviews: list[SessionOverview], names: dict[str, str]
) -> None:
    """A session picker that records the choice in ``?session=`` and links to its context.
    It lists the table's rows as filtered and sorted, at most
    :data:`~workbench.session_filters.PICKER_ROWS` of them; a session's id or its beginning,
    typed in, opens any session of the store."""
    chosen = pick_typed_session(
        shown[: session_filters.PICKER_ROWS],
        overviews,
        st.query_params.get("session"),
        lambda o: session_label(o, names.get(o.uuid)),
        key="sessions_picker",
        placeholder="Pick a session to open",
        rows_are=f"The table's rows as filtered and sorted, the first {session_filters.PICKER_ROWS:,} of a "
        "longer table",
    )
    if chosen is None:
        return
    choose_session(chosen)
    st.page_link(
        "workbench/pages/context.py",
        label="Open its context",
        icon=":material/arrow_forward:",
        query_params={"store": root, "session": chosen},
    )


BACKLOG_TICK_S = 2.0  # how often the search box's note counts again the files whose text waits


@st.fragment(run_every=timedelta(seconds=BACKLOG_TICK_S))
def text_backlog_caption(root: str) -> None:
    """How many files the text search still waits for, counted again every couple of
    seconds while the page stays open (the fill runs behind it); nothing once none wait."""
    waiting = text_waiting(root)
    if waiting:
        st.caption(
            f"Text search is still indexing {waiting:,} file{'' if waiting == 1 else 's'} of this store "
            "in the background; a search made now waits for them."
        )


@st.fragment(run_every=timedelta(seconds=BACKLOG_TICK_S))
def count_backlog_caption(root: str) -> None:
    """How many files still wait for their token counts and their messages' checks (a
    new store's first listing leaves them to a thread behind it), counted again every
    couple of seconds; once they are all in, the whole page runs again and the table
    shows them."""
    waiting = counts_waiting(root)
    if not waiting:
        st.rerun()  # the table takes the counts (the store's state moved with them)
    st.caption(
        f"Counting the tokens of {waiting:,} file{'' if waiting == 1 else 's'} of this store in the background, "
        "and checking their messages; their sessions show None in the tokens column until then, and a file "
        "whose messages do not read shows its error once it is reached."
    )


def show_search(root: str, signature: StoreSignature) -> None:
    """A text search over every message's content; each hit links to its context."""
    st.subheader("Search message content")
    query = st.text_input("Text to find (case-insensitive)", value=st.query_params.get("q", ""), key="search")
    hits = search_hits(root, query, signature) if query else []  # a search fills in what waits first
    if text_waiting(root):
        text_backlog_caption(root)
    if not query:
        return
    st.query_params["q"] = query
    one = len(hits) == 1
    st.text(f"{len(hits)} message{'' if one else 's'} contain{'s' if one else ''} {query!r}")
    if not hits:
        return
    for hit in hits[:HIT_LINKS]:
        st.page_link(
            "workbench/pages/context.py",
            label=escape_markdown(
                f"{hit.role} · message {hit.index} ({hit.message_role}): {hit.snippet} · "
                f"session {short_id(hit.session)}"
            ),
            query_params={
                "store": root,
                "session": hit.session,
                "context": hit.context_id,
                "message": f"message:{hit.index}",  # the display index, whatever the session's source
            },
        )
    more = f" (the first {HIT_LINKS} are linked above)" if len(hits) > HIT_LINKS else ""
    with st.expander("The hit as a table" if one else f"All {len(hits)} hits as a table{more}"):
        st.dataframe(pd.DataFrame([h.as_dict() for h in hits]), hide_index=True)


HIT_LINKS = 20
# Hits shown as links to their message; all of them are in the table.


def open_openpoke() -> None:
    """Import an OpenPoke directory into a temporary store and switch the page to it."""
    with st.expander("Open an OpenPoke directory"):
        directory = st.text_input("OpenPoke checkout or server/data directory", key="openpoke_dir")
        if not st.button("Import and open", key="openpoke_open", disabled=not directory):
            return
        try:
            report = import_to_temporary_store(directory)
        except SoapError as exc:
            st.error(escape_markdown(str(exc)))
            return
        st.session_state["openpoke_report"] = import_summary(report)
        st.session_state.pop("store_path", None)  # the sidebar picker takes the new ?store= on rerun
        st.query_params["store"] = str(report.store_dir)
        st.rerun()


def show_openpoke_report() -> None:
    """After an import: one line, a link to each session by its agent's name, and the
    diagnostics folded (skipped lines and notices first, then what was read and written)."""
    summary = st.session_state.get("openpoke_report")
    if not isinstance(summary, ImportSummary):
        return
    st.text(summary.headline)
    for session in summary.sessions:
        st.page_link(
            "workbench/pages/context.py",
            label=escape_markdown(f"{session.name}: {session.messages:,} messages ({session.status})"),
            icon=":material/arrow_forward:",
            query_params={"store": summary.store, "session": session.uuid},
        )
    with st.expander(diagnostics_label(summary)):
        for line in summary.diagnostics + summary.details:
            st.text(line)


def table_choices(overviews: list[SessionOverview]) -> tuple[SessionFilter, str]:
    """Filters and an order for the table, in one row above it; the order is kept in
    ``?sort=`` so that a copied link shows the same table."""
    roles = sorted({o.role for o in overviews}, key=str.casefold)
    columns = st.columns([2, 2, 2, 1, 2])
    chosen_roles = columns[0].multiselect("Role", roles, key="sessions_roles", placeholder="every role")
    states = columns[1].multiselect("State", STATES, key="sessions_states", placeholder="any state")
    since = columns[2].selectbox("Last activity within", list(SINCE), key="sessions_since")
    least = columns[3].number_input("At least N messages", 0, step=1, key="sessions_min_messages")
    orders = list(SORTS)
    wanted = st.query_params.get("sort")
    sort = columns[4].selectbox(
        "Sort by", orders, index=orders.index(wanted) if wanted in orders else 0, key="sessions_sort"
    )
    keep_in_url("sort", None if sort == orders[0] else sort)
    return SessionFilter(frozenset(chosen_roles), frozenset(states), SINCE[since], int(least or 0)), sort


st.title("Sessions")
open_openpoke()
show_openpoke_report()
root = chosen_store()
store_state = store_signature(root)  # once a run: it stats every file of the store
overviews = store_overviews(root, store_state)
broken = sum(1 for o in overviews if o.error)
counted = f"{len(overviews)} session{'' if len(overviews) == 1 else 's'}"
st.text(counted + (f", {broken} broken (see the error column)" if broken else ""))
for problem in open_store(root).instance_problems():
    st.warning(
        escape_markdown(
            f"unreadable: {error_first(problem, root)} (the sessions it claims are listed as {UNKNOWN_ROLE})"
        )
    )
names = agent_names(root, store_state)
shown = narrowed(overviews, *table_choices(overviews))
note = filter_note(len(shown), overviews)
if note:
    st.caption(note)
if counts_waiting(root):
    count_backlog_caption(root)
picked = st.dataframe(
    overview_table(shown, root, names),
    hide_index=True,
    on_select="rerun",
    selection_mode="single-row",
    key="sessions_table",
)
if picked.selection.rows:  # a click on a row opens that session's context
    row = shown[picked.selection.rows[0]]
    choose_session(row.uuid)
    st.switch_page("workbench/pages/context.py", query_params={"store": root, "session": row.uuid})
pick_session(root, shown, overviews, names)
show_search(root, store_state)
