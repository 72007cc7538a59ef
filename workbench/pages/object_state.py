"""Object state page: an agentic object's public state after each invocation of its
session, and what changed between any two.

The states come from the invocation records (``state_after``), which only the soapwb
runtime writes: a peteos session has none, and the page says so. The two invocations
compared live in ``?state_a=`` and ``?state_b=``.
"""

from __future__ import annotations

import streamlit as st

from replay import short_id
from soap_core import SoapError
from soap_core.runtime import InvocationRecord
from workbench.loading import SCOPED, Scope, show_error_and_stop
from workbench.object_state_views import (
    agent_records,
    diff_table,
    invocation_label,
    load_session_invocations,
    numeric_figure,
    records_summary,
    state_changes,
    state_table,
)
from workbench.selection import keep_in_url, selected_scope
from workbench.times import viewer_zone
from workbench.views import blanks_as, escape_markdown


@st.cache_data(show_spinner="Reading the invocation records…", max_entries=16, hash_funcs=SCOPED)
def invocation_records(scope: Scope) -> list[InvocationRecord]:
    """The session's own invocation records, cached until the store changes; raises SoapError."""
    return load_session_invocations(scope.root, scope.session.uuid)


def pick_state(label: str, param: str, records: list[InvocationRecord], default: str) -> InvocationRecord:
    """One invocation with a recorded state, kept in ``?<param>=`` (an invocation id)."""
    ids = [r.id for r in records]
    by_id = {r.id: r for r in records}
    wanted = st.query_params.get(param)
    if wanted and wanted not in by_id:
        st.warning(
            escape_markdown(f"{param}={wanted}: no invocation of this session with a state has that id")
        )
    current = wanted if wanted in by_id else default
    chosen = st.selectbox(
        label, ids, index=ids.index(current), format_func=lambda i: invocation_label(by_id[i], viewer_zone())
    )
    st.query_params[param] = chosen
    return by_id[chosen]


RUNS_PARAM = "runs"  # ?runs=shown keeps the workbench's re-runs in the tables and the diff


def shown_records(records: list[InvocationRecord]) -> list[InvocationRecord]:
    """The agent's own invocations, or with the workbench's re-runs when the toggle (kept
    in ``?runs=shown``) is on; the toggle says how many re-runs it hides."""
    own = agent_records(records)
    runs = len(records) - len(own)
    if not runs:
        return records
    shown = st.toggle(
        f"Show the workbench's re-runs ({runs})",
        value=st.query_params.get(RUNS_PARAM) == "shown",
        key="object_state_runs",
        help="Re-runs and continues made here are not the agent's history: off, the states "
        "are only those the agent itself reached.",
    )
    keep_in_url(RUNS_PARAM, "shown" if shown else None)
    return records if shown else own


def show_diff(records: list[InvocationRecord]) -> None:
    """Two pickers and the difference between the states after those invocations."""
    with_state = [r for r in records if r.state_after is not None]
    if len(with_state) < 2:
        st.info(f"A diff needs two invocations that recorded a state; this session has {len(with_state)}.")
        return
    left, right = st.columns(2)
    with left:
        before = pick_state("From (state after)", "state_a", with_state, with_state[0].id)
    with right:
        after = pick_state("To (state after)", "state_b", with_state, with_state[-1].id)
    changes = state_changes(before.state_after, after.state_after)
    if not changes:
        st.text("The two states are equal.")
        return
    st.text(f"{len(changes)} difference{'' if len(changes) == 1 else 's'}")
    st.dataframe(
        blanks_as(diff_table(changes), {"before": "(not set)", "after": "(removed)"}), hide_index=True
    )


st.title("Object state")
page_scope = selected_scope()
session = page_scope.session
try:
    records = invocation_records(page_scope)
except SoapError as exc:
    show_error_and_stop(exc)
if not records:
    st.info(
        "This session has no invocation records, so no object state: only the soapwb runtime "
        "records the state after each invocation (a store written by peteos has none)."
    )
    st.stop()
records = shown_records(records)
if not records:
    st.info("The agent itself was never invoked in this session: every record is a workbench re-run.")
    st.stop()
st.text(
    f"{session.role} / {short_id(session.uuid)}: {records_summary(records)}",
    help=f"session id {session.uuid}",
)
st.subheader("State after each invocation")
st.dataframe(blanks_as(state_table(records, viewer_zone()), "-"), hide_index=True)
figure = numeric_figure(records)
if figure is not None:
    st.plotly_chart(figure, key="object_state_numbers")
st.subheader("Difference between two invocations")
show_diff(records)
