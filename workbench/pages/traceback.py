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

from replay import message_address, short_id
from soap_core import SoapError
from soap_core.runtime import InvocationTrace, TraceFrame
from workbench.loading import SCOPED, Scope, read_only_session, show_error_and_stop
from workbench.selection import keep_in_url, selected_scope
from workbench.times import viewer_zone
from workbench.traceback_views import (
    Invocation,
    SessionTraces,
    agent_invocations,
    call_site_label,
    call_site_params,
    deepest_invocation,
    highlight_problems,
    invocation_label,
    invocations_table,
    load_traces,
    matching_invocations,
    problem_frames,
    problem_message,
    stack_table,
    still_running,
    timeline_figure,
    trace_frames,
    workbench_runs,
)
from workbench.views import blanks_as, escape_markdown


@st.cache_data(show_spinner="Walking the invocation chains…", max_entries=16, hash_funcs=SCOPED)
def session_traces(scope: Scope) -> SessionTraces:
    """The session's traces, cached until the store changes; raises SoapError."""
    return load_traces(scope.root, scope.session.uuid)


RUNS_PARAM = "runs"  # ?runs=shown lists the workbench's re-runs beside the agent's own invocations


def shown_invocations(traced: SessionTraces) -> list[Invocation]:
    """The agent's own invocations, or all of them when the toggle (kept in
    ``?runs=shown``) is on, or when the link names a re-run's invocation."""
    own = agent_invocations(traced.invocations)
    runs = workbench_runs(traced.invocations)
    if not runs:
        return own
    wanted = st.query_params.get("invocation")
    linked = bool(wanted) and any(i.id.startswith(wanted or "") for i in runs)
    shown = st.toggle(
        f"Show the workbench's re-runs ({len(runs)})",
        value=linked or st.query_params.get(RUNS_PARAM) == "shown",
        key="traceback_runs",
        help="Re-runs and continues made here are not the agent's history: off, only the "
        "invocations the agent itself made are listed.",
    )
    keep_in_url(RUNS_PARAM, "shown" if shown else None)
    return traced.invocations if shown else own


def pick_invocation(traced: SessionTraces, invocations: list[Invocation]) -> InvocationTrace:
    """The invocation of ``?invocation=`` (id or prefix), else the one on the deepest
    chain through the session; its stack."""
    by_id = {i.id: i for i in invocations}
    ids = list(by_id)
    wanted = st.query_params.get("invocation")
    matches = matching_invocations(ids, wanted) if wanted else []
    if wanted and len(matches) != 1:
        st.error(escape_markdown(f"invocation {wanted!r}: no single invocation of this session matches"))
        st.stop()
    deepest = deepest_invocation(invocations)
    current = matches[0] if matches else (deepest.id if deepest is not None else ids[-1])
    chosen = st.selectbox(
        "Invocation",
        ids,
        index=ids.index(current),
        format_func=lambda i: invocation_label(by_id[i], traced.prompts, viewer_zone()),
    )
    st.query_params["invocation"] = chosen
    return traced.trace(by_id[chosen])


def caller_address(scope: Scope, frame: TraceFrame, index: int) -> str:
    """Display index ``index`` of the caller's context as its session's request source
    names it in a link (an OpenPoke session: by its log entry)."""
    try:
        caller = read_only_session(scope.root, frame.caller_session or "", scope.signature)
        return message_address(caller, caller.contexts[frame.context_id or ""], index)
    except (SoapError, KeyError):
        return f"message:{index}"  # the display index, whatever the source


def show_call_sites(scope: Scope, trace: InvocationTrace) -> None:
    """A link per frame to the message that made its call, in stack order."""
    for frame in trace_frames(trace):
        params = call_site_params(frame, lambda f, i: caller_address(scope, f, i))
        if params is None:
            st.text(
                f"{frame.role} / {short_id(frame.session)}: called from Python (no calling message)",
                help=f"session id {frame.session}",
            )
            continue
        st.page_link(
            "workbench/pages/context.py",
            label=escape_markdown(call_site_label(frame)),
            icon=":material/subdirectory_arrow_right:",
            query_params={"store": scope.root, **params},
        )


def show_trace(scope: Scope, trace: InvocationTrace, traced: SessionTraces) -> None:
    """The stack (table, problems, call sites) and the timeline of one trace."""
    prompts = traced.prompts
    for frame in problem_frames(trace):  # a refusal is the runtime's rule at work; a failure is red
        (st.warning if frame.outcome == "refused" else st.error)(escape_markdown(problem_message(frame)))
    st.subheader("Call stack (outermost first)")
    stack = highlight_problems(stack_table(trace, prompts, viewer_zone()))
    st.dataframe(blanks_as(stack, {"message": "from Python"}), hide_index=True)
    st.subheader("Call sites")
    show_call_sites(scope, trace)
    st.subheader("Timeline across objects")
    st.text(
        "One bar per invocation, labelled with its object, the tool that called it and what it did; "
        "inside it, its LLM calls (dark) and the tool calls each answer asked for (yellow)."
    )
    st.plotly_chart(timeline_figure(trace, prompts, traced.methods, traced.spans), key="traceback_timeline")


st.title("Traceback")
page_scope = selected_scope()
try:
    traced = session_traces(page_scope)
    if still_running(traced):  # may have ended or died since; a killed writer changes no file
        traced = load_traces(page_scope.root, page_scope.session.uuid)
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
invocations = shown_invocations(traced)
if not invocations:
    st.info("The agent itself was never invoked in this session: every invocation is a workbench re-run.")
    st.stop()
st.subheader("Invocations of this session")
st.dataframe(blanks_as(invocations_table(invocations, traced.prompts, viewer_zone()), "-"), hide_index=True)
show_trace(page_scope, pick_invocation(traced, invocations), traced)
