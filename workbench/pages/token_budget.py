"""Token budget page: how big each LLM call's context was, what filled it, and when
compaction cut it; then every message of one context, and the whole invocation chain.

The figure and tables come from workbench.token_budget_views over the analysis
library's budgets; this page only lays them out. The compaction threshold starts at
the one the session ran with (its call log records it); ``?threshold=`` keeps one typed
instead in the URL, so a shared link draws the same line. The rolling-window comparison
runs once its section is opened: it runs peteos's window twice over the context.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from analysis import (
    CallBudget,
    SessionSpend,
    ThresholdStart,
    call_budgets,
    chain_budget,
    message_budgets,
    threshold_start,
)
from replay import short_id
from soap_core import SoapError
from workbench.loading import SCOPED, Scope, show_error_and_stop
from workbench.selection import keep_in_url, selected_context, selected_scope
from workbench.token_budget_views import (
    budget_figure,
    call_table,
    calls_source_note,
    chain_figure,
    chain_note,
    chain_table,
    chart_calls,
    chart_note,
    message_table,
    stale_note,
    threshold_from_param,
    threshold_note,
    window_choice_note,
    window_choice_table,
)
from workbench.views import escape_markdown, open_store

THRESHOLD_FOR = "threshold_session"  # the session the threshold field was last set up for
WINDOW_SECTION = "window_choice"  # the rolling-window section's open state

# What the page draws for a session is cached as resources, shared by every rerun rather
# than copied: unpickling the budgets of 50,000 calls and 100,000 messages took seconds
# on every click. Nothing here changes what it gets from these caches.


@st.cache_resource(show_spinner="Counting the calls' tokens…", max_entries=8, hash_funcs=SCOPED)
def _call_budgets(scope: Scope) -> tuple[CallBudget, ...]:
    return tuple(call_budgets(scope.session))


@st.cache_resource(show_spinner=False, max_entries=8, hash_funcs=SCOPED)
def _call_view(scope: Scope) -> tuple[str | None, pd.DataFrame]:
    """The chart's note on the calls it leaves out, and the table of every call."""
    budgets = _call_budgets(scope)
    return chart_note(budgets, chart_calls(budgets)), call_table(budgets)


@st.cache_resource(show_spinner=False, max_entries=8, hash_funcs=SCOPED)
def _budget_figure(scope: Scope, threshold: int | None) -> go.Figure:
    return budget_figure(_call_budgets(scope), threshold)


@st.cache_data(show_spinner="Walking the invocation chain…", max_entries=16, hash_funcs=SCOPED)
def _chain_budget(scope: Scope) -> list[SessionSpend]:
    uuid = scope.session.uuid
    return chain_budget(open_store(scope.root), uuid, known={uuid: _call_budgets(scope)})


@st.cache_data(show_spinner=False, max_entries=16, hash_funcs=SCOPED)
def _threshold_start(scope: Scope) -> ThresholdStart:
    return threshold_start(scope.session)


@st.cache_resource(show_spinner="Counting the messages' tokens…", max_entries=8, hash_funcs=SCOPED)
def _message_view(scope: Scope) -> tuple[str | None, pd.DataFrame]:
    """The note on stale cached counts, and the table of every message."""
    rows = message_budgets(scope.chosen)
    return stale_note(rows), message_table(rows)


@st.cache_data(show_spinner="Running the rolling token window both ways…", max_entries=16, hash_funcs=SCOPED)
def _window_choice(scope: Scope, budget: int) -> tuple[str, pd.DataFrame]:
    """The window comparison's note and table, once per window size: it runs peteos's
    window twice over a copy of the context, seconds for 100,000 messages."""
    choice = scope.chosen.window_disagreement(budget)
    return window_choice_note(choice), window_choice_table(scope.chosen, choice)


def pick_threshold(scope: Scope) -> int | None:
    """The compaction threshold: from ``?threshold=`` when a link gives one, else the one
    the session ran with (its call log's compaction setting, else the model's context
    window, the note says which); a typed one goes into the URL. Empty draws no line."""
    session = scope.session
    try:
        start = _threshold_start(scope)
    except SoapError as exc:
        start = ThresholdStart(None, "none", f"The compaction setting could not be read: {exc}")
    if st.session_state.get(THRESHOLD_FOR) != session.uuid:  # a new session starts afresh
        st.session_state.pop("threshold_input", None)
        if THRESHOLD_FOR in st.session_state:
            st.query_params.pop("threshold", None)
        st.session_state[THRESHOLD_FOR] = session.uuid
    given = threshold_from_param(st.query_params.get("threshold"))
    typed = st.number_input(
        "Compaction threshold (tokens)",
        min_value=1,
        value=given if given is not None else start.tokens,
        step=1000,
        placeholder="none",
        key="threshold_input",
        help="Starts at the threshold the session ran with, where its call log records one.",
    )
    st.text(threshold_note(start, given, None if typed is None else int(typed)))
    keep_in_url("threshold", None if typed is None or int(typed) == start.tokens else str(int(typed)))
    return None if typed is None else int(typed)


def show_calls(scope: Scope) -> None:
    """The per-call figure and table."""
    try:
        budgets = _call_budgets(scope)
    except SoapError as exc:
        show_error_and_stop(exc)
    st.subheader("Context size per call")
    st.text(calls_source_note(budgets))
    threshold = pick_threshold(scope)
    if budgets:
        note, table = _call_view(scope)
        if note:
            st.caption(note)
        st.plotly_chart(_budget_figure(scope, threshold), key="budget_chart")
        st.dataframe(table, hide_index=True, key="call_table")


def show_messages(scope: Scope) -> None:
    """Every message of the chosen context with its share and its cached count."""
    st.subheader("Messages of one context")
    scope = selected_context(scope)
    note, table = _message_view(scope)
    if note:
        st.warning(escape_markdown(note))
    st.dataframe(table, hide_index=True, key="message_table")
    show_window_choice(scope)


def show_window_choice(scope: Scope) -> None:
    """Where peteos's rolling_token_window (cached counts) and ours (true counts) part."""
    section = st.expander(
        "Rolling token window: cached (peteos) vs true counts", key=WINDOW_SECTION, on_change="rerun"
    )
    with section:
        if not section.open:  # computed once opened: the window runs twice over the context
            st.caption("Open to compare which messages each count keeps.")
            return
        total = scope.chosen.total_token_count()
        budget = st.number_input(
            "Window (tokens)", min_value=1, value=max(1, total // 2), step=100, key="window_tokens"
        )
        note, table = _window_choice(scope, int(budget))
        st.text(note)
        st.dataframe(table, hide_index=True, key="window_table")


def show_chain(scope: Scope) -> None:
    """Prompt tokens per session along the invocation chain."""
    st.subheader("The invocation chain")
    try:
        chain = _chain_budget(scope)
    except SoapError as exc:
        st.error(escape_markdown(f"cannot follow the invocation chain: {exc}"))
        return
    st.text(chain_note(chain))
    st.plotly_chart(chain_figure(chain), key="chain_chart")
    st.dataframe(chain_table(chain), hide_index=True, key="chain_table")


st.title("Token budget")
page_scope = selected_scope(read_only=True)  # the page changes nothing
chosen = page_scope.session
st.text(f"{chosen.role} / {short_id(chosen.uuid)}", help=f"session id {chosen.uuid}")
show_calls(page_scope)
show_chain(page_scope)
show_messages(page_scope)
