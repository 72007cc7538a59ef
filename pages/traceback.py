"""Traceback page: the cross-object invocation chain through one invocation of a session.

The chain is walked from the invocation records alone (peteos writes none, so its
sessions have no traceback). It is shown as a call stack, outermost first, and as a
timeline across objects; each frame links to the message that made its call, and
refused (no-circle) or failed invocations stand out; each bar of the timeline names its
object and the tool that called it, with its LLM calls and tool calls drawn inside. The
chosen invocation lives in ``?invocation=``.
"""

from __future__ import annotations

import streamlit as st

from soap_core import SoapError
from soap_core.runtime import InvocationTrace
from workbench.loading import chosen_store, show_error_and_stop
from workbench.selection import selected_session
from workbench.traceback_views import (
    SessionTraces,
    call_site_label,
    call_site_params,
    highlight_problems,
    invocation_label,
    invocations_table,
    load_traces,
    matching_invocations,
    problem_frames,
    problem_message,
    stack_table,
    timeline_figure,
    trace_frames,
)
from workbench.views import StoreSignature, escape_markdown, store_signature


@st.cache_data(show_spinner="Walking the invocation chains…", max_entries=16)
def _traces(root: str, session_uuid: str, signature: StoreSignature) -> SessionTraces:
    return load_traces(root, session_uuid)


def session_traces(root: str, session_uuid: str) -> SessionTraces:
    """The session's traces, cached until the store changes; raises SoapError."""
    return _traces(root, session_uuid, store_signature(root))


def pick_invocation(traced: SessionTraces) -> InvocationTrace:
    """The invocation of ``?invocation=`` (id or prefix), else the latest one; its stack."""
    by_id = {i.id: i for i in traced.invocations}
    ids = list(by_id)
    wanted = st.query_params.get("invocation")
    matches = matching_invocations(ids, wanted) if wanted else []
    if wanted and len(matches) != 1:
        st.error(escape_markdown(f"invocation {wanted!r}: no single invocation of this session matches"))
        st.stop()
    current = matches[0] if matches else ids[-1]
    chosen = st.selectbox(
        "Invocation",
        ids,
        index=ids.index(current),
        format_func=lambda i: invocation_label(by_id[i], traced.prompts),
    )
    st.query_params["invocation"] = chosen
    return traced.trace(by_id[chosen])


def show_call_sites(root: str, trace: InvocationTrace) -> None:
    """A link per frame to the message that made its call, in stack order."""
    for frame in trace_frames(trace):
        params = call_site_params(frame)
        if params is None:
            st.text(f"{frame.role} / {frame.session}: called from Python (no calling message)")
            continue
        st.page_link(
            "pages/context.py",
            label=escape_markdown(call_site_label(frame)),
            icon=":material/subdirectory_arrow_right:",
            query_params={"store": root, **params},
        )


def show_trace(root: str, trace: InvocationTrace, traced: SessionTraces) -> None:
    """The stack (table, problems, call sites) and the timeline of one trace."""
    prompts = traced.prompts
    for frame in problem_frames(trace):
        st.error(escape_markdown(problem_message(frame)))
    st.subheader("Call stack (outermost first)")
    st.dataframe(highlight_problems(stack_table(trace, prompts)), hide_index=True)
    st.subheader("Call sites")
    show_call_sites(root, trace)
    st.subheader("Timeline across objects")
    st.text(
        "One bar per invocation, labelled with its object, the tool that called it and what it did; "
        "inside it, its LLM calls (dark) and the tool calls each answer asked for (yellow)."
    )
    st.plotly_chart(timeline_figure(trace, prompts, traced.methods, traced.spans), key="traceback_timeline")


st.title("Traceback")
root = chosen_store()
session = selected_session(root)
try:
    traced = session_traces(root, session.uuid)
except SoapError as exc:
    show_error_and_stop(exc)
if not traced.has_records:
    st.info(
        "This session has no invocation records: only the soapwb runtime writes them "
        "(a store written by peteos has none), so there is no chain to show."
    )
    st.stop()
if not traced.invocations:
    st.info("This session's records are all of calls it made; it was never invoked itself.")
    st.stop()
st.subheader("Invocations of this session")
st.dataframe(invocations_table(traced.invocations, traced.prompts), hide_index=True)
show_trace(root, pick_invocation(traced), traced)
