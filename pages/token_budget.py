"""Token budget page: how big each LLM call's context was, what filled it, and when
compaction cut it; then every message of one context, and the whole invocation chain.

The figure and tables come from workbench.token_budget_views over the analysis
library's budgets; this page only lays them out. ``?threshold=`` keeps the typed
compaction threshold in the URL, so a shared link draws the same line.
"""

from __future__ import annotations

import streamlit as st

from analysis import CallBudget, SessionSpend, call_budgets, chain_budget, message_budgets
from soap_core import Context, Session, SoapError, Store
from workbench.loading import chosen_store, load_session, show_error_and_stop
from workbench.selection import selected_context, selected_session
from workbench.token_budget_views import (
    budget_figure,
    call_table,
    calls_source_note,
    chain_figure,
    chain_note,
    chain_table,
    message_table,
    stale_note,
    threshold_from_param,
    window_choice_note,
    window_choice_table,
)
from workbench.views import StoreSignature, escape_markdown, store_signature


@st.cache_data(show_spinner="Counting the calls' tokens…", max_entries=16)
def _call_budgets(root: str, uuid: str, signature: StoreSignature) -> list[CallBudget]:
    return call_budgets(load_session(root, uuid))


@st.cache_data(show_spinner="Walking the invocation chain…", max_entries=16)
def _chain_budget(root: str, uuid: str, signature: StoreSignature) -> list[SessionSpend]:
    return chain_budget(Store(root), uuid)


def pick_threshold() -> int | None:
    """The compaction threshold typed here (kept in ``?threshold=``); empty draws no line."""
    typed = st.number_input(
        "Compaction threshold (tokens)",
        min_value=1,
        value=threshold_from_param(st.query_params.get("threshold")),
        step=1000,
        placeholder="none",
        key="threshold_input",
        help="The runtime does not record a session's compaction settings; type a threshold to draw it.",
    )
    if typed is None:
        st.query_params.pop("threshold", None)
        return None
    st.query_params["threshold"] = str(int(typed))
    return int(typed)


def show_calls(root: str, session: Session) -> None:
    """The per-call figure and table."""
    try:
        budgets = _call_budgets(root, session.uuid, store_signature(root))
    except SoapError as exc:
        show_error_and_stop(exc)
    st.subheader("Context size per call")
    st.text(calls_source_note(budgets))
    threshold = pick_threshold()
    if budgets:
        st.plotly_chart(budget_figure(budgets, threshold), key="budget_chart")
        st.dataframe(call_table(budgets), hide_index=True, key="call_table")


def show_messages(session: Session) -> None:
    """Every message of the chosen context with its share and its cached count."""
    st.subheader("Messages of one context")
    context = selected_context(session)
    rows = message_budgets(context)
    note = stale_note(rows)
    if note:
        st.warning(escape_markdown(note))
    st.dataframe(message_table(rows), hide_index=True, key="message_table")
    show_window_choice(context)


def show_window_choice(context: Context) -> None:
    """Where peteos's rolling_token_window (cached counts) and ours (true counts) part."""
    with st.expander("Rolling token window: cached (peteos) vs true counts"):
        total = context.total_token_count()
        budget = st.number_input(
            "Window (tokens)", min_value=1, value=max(1, total // 2), step=100, key="window_tokens"
        )
        choice = context.window_disagreement(int(budget))
        st.text(window_choice_note(choice))
        st.dataframe(window_choice_table(context, choice), hide_index=True, key="window_table")


def show_chain(root: str, session: Session) -> None:
    """Prompt tokens per session along the invocation chain."""
    st.subheader("The invocation chain")
    try:
        chain = _chain_budget(root, session.uuid, store_signature(root))
    except SoapError as exc:
        st.error(escape_markdown(f"cannot follow the invocation chain: {exc}"))
        return
    st.text(chain_note(chain))
    st.plotly_chart(chain_figure(chain), key="chain_chart")
    st.dataframe(chain_table(chain), hide_index=True, key="chain_table")


st.title("Token budget")
store_root = chosen_store()
chosen = selected_session(store_root)
st.text(f"{chosen.role} / {chosen.uuid}")
show_calls(store_root, chosen)
show_chain(store_root, chosen)
show_messages(chosen)
