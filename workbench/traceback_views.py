"""The Traceback page's figures: a session's invocations, the call stack through one of
them, and its timeline across objects.

Plain functions without Streamlit: the page lays out what these return, and a test
checks them against :func:`soap_core.runtime.invocation_chain`.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from pandas.io.formats.style import Styler

from soap_core import Store
from soap_core.runtime import InvocationTrace, TraceFrame, invocation_chain, read_invocation, read_invocations
from workbench.views import short_id

OUTCOME_ICONS = {"ok": "✅", "refused": "⛔", "error": "❌", "running": "⏳", "interrupted": "💥"}
OUTCOME_COLOURS = {
    "ok": "#2ca02c",
    "refused": "#ff7f0e",
    "error": "#d62728",
    "running": "#7f7f7f",
    "interrupted": "#9467bd",
}
PROBLEM_OUTCOMES = ("error", "refused", "interrupted")
"""Outcomes that stand out: an invocation that failed, was refused (no-circle rule), or
whose process died before it ended."""

STACK_COLUMNS = (
    "depth",
    "role",
    "session",
    "prompt",
    "called from",
    "caller session",
    "context",
    "message",
    "start",
    "end",
    "outcome",
    "error",
    "invocation",
)
INVOCATION_COLUMNS = ("start", "prompt", "outcome", "callers", "callees", "invocation")

_PROBLEM_STYLE = {"error": "background-color: #f8d7da", "refused": "background-color: #ffe5cc"}


@dataclass(frozen=True)
class SessionTraces:
    """What the page needs about one session's invocations, read once and cached."""

    traces: list[InvocationTrace]
    """One per invocation of the session, in the order of their records (start time)."""
    prompts: dict[str, str]
    """Invocation id → prompt, for every frame of every trace (TraceFrame has none)."""
    has_records: bool
    """Whether the session folder holds any invocation record at all (peteos writes none)."""


def load_traces(root: str, session_uuid: str) -> SessionTraces:
    """The chains through every invocation of the session, with the prompt of each frame.

    Prompts come from the records themselves, each read from the session it ran in,
    because a frame of a deeper callee is recorded only in its own and its caller's
    sessions. Raises SoapError for a broken store or record.
    """
    store = Store(root)
    directories = {s.uuid: s.path for s in store.sessions()}
    own = read_invocations(store.find(session_uuid).path)
    traces = invocation_chain(store, session_uuid)
    prompts = {r.id: r.prompt for r in own}
    for frame in (f for trace in traces for f in trace_frames(trace)):
        if frame.invocation_id not in prompts and frame.session in directories:
            record = read_invocation(directories[frame.session], frame.invocation_id)
            if record is not None:
                prompts[frame.invocation_id] = record.prompt
    return SessionTraces(traces, prompts, bool(own))


def trace_frames(trace: InvocationTrace) -> list[TraceFrame]:
    """The whole stack of a trace, outermost caller first, then the invocation, then its
    callees depth first."""
    own = [trace.invocation] if trace.invocation is not None else []
    return [*trace.callers, *own, *trace.callees]


def matching_invocations(traces: Sequence[InvocationTrace], ref: str) -> list[str]:
    """Ids of the session's invocations that are ``ref`` or start with it (exact first)."""
    ids = [t.invocation.invocation_id for t in traces if t.invocation is not None]
    return [ref] if ref in ids else [i for i in ids if i.startswith(ref)]


def short_session(session_uuid: str | None) -> str:
    """A session uuid cut to its first block (after peteos' date prefix), for labels."""
    return short_id(session_uuid)


def outcome_label(outcome: str) -> str:
    """The outcome with an icon, so refusals and errors stand out in a table."""
    return f"{OUTCOME_ICONS.get(outcome, '❔')} {outcome}"


def one_line(text: str, limit: int = 80) -> str:
    """A prompt as one short line for labels and table cells."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def invocation_label(trace: InvocationTrace, prompts: dict[str, str]) -> str:
    """How an invocation is named in the picker: start time, outcome, prompt."""
    frame = trace.invocation
    if frame is None:
        return "(no invocation)"
    prompt = one_line(prompts.get(frame.invocation_id, ""), 60)
    return f"{frame.started_at}  {outcome_label(frame.outcome)}  {prompt}"


def invocations_table(traces: Sequence[InvocationTrace], prompts: dict[str, str]) -> pd.DataFrame:
    """Every invocation of the session: when, what it was asked, how it ended, and how
    many frames sit above and below it."""
    rows = [
        (
            t.invocation.started_at,
            one_line(prompts.get(t.invocation.invocation_id, "")),
            outcome_label(t.invocation.outcome),
            len(t.callers),
            len(t.callees),
            t.invocation.invocation_id,
        )
        for t in traces
        if t.invocation is not None
    ]
    return pd.DataFrame.from_records(rows, columns=list(INVOCATION_COLUMNS))


def stack_table(trace: InvocationTrace, prompts: dict[str, str]) -> pd.DataFrame:
    """The call stack as a table, outermost first; ``depth`` is 0 for the traced
    invocation, negative for its callers and positive for its callees."""
    rows = [
        (
            f.depth,
            f.role,
            f.session,
            one_line(prompts.get(f.invocation_id, "")),
            f.caller_role,
            f.caller_session,
            f.context_id,
            f.message_index,
            f.started_at,
            f.ended_at,
            outcome_label(f.outcome) + (" (re-run)" if f.rerun else ""),
            f.error,
            f.invocation_id,
        )
        for f in trace_frames(trace)
    ]
    return pd.DataFrame.from_records(rows, columns=list(STACK_COLUMNS)).astype({"message": "Int64"})


def highlight_problems(table: pd.DataFrame) -> Styler:
    """The stack table with refused and failed frames shaded."""

    def shade(row: pd.Series) -> list[str]:
        outcome = str(row["outcome"]).split(" ", 1)[-1]
        return [_PROBLEM_STYLE.get(outcome, "")] * len(row)

    return table.style.apply(shade, axis=1)


def problem_frames(trace: InvocationTrace) -> list[TraceFrame]:
    """The frames of the stack that were refused or failed."""
    return [f for f in trace_frames(trace) if f.outcome in PROBLEM_OUTCOMES]


def problem_message(frame: TraceFrame) -> str:
    """One plain line about a refused or failed frame (the page escapes it for Markdown)."""
    return f"{frame.role} / {frame.session} {frame.outcome}: {frame.error or 'no error recorded'}"


def call_site_params(frame: TraceFrame) -> dict[str, str] | None:
    """Query parameters of the Context page at the message that made the call; None when
    plain Python made it (no caller context)."""
    if frame.caller_session is None or frame.context_id is None:
        return None
    params = {"session": frame.caller_session, "context": frame.context_id}
    if frame.message_index is not None:
        params["message"] = str(frame.message_index)
    return params


def call_site_label(frame: TraceFrame) -> str:
    """The link text of a frame's call site."""
    where = "" if frame.message_index is None else f" message #{frame.message_index}"
    return f"{frame.role} ({short_session(frame.session)}) was called from {frame.caller_role}{where}"


def timeline_rows(trace: InvocationTrace) -> pd.DataFrame:
    """One bar per frame: its object (role / session) as the row, start, end, duration
    and outcome. A frame still running, or without an end, ends where it started."""
    rows = []
    for f in trace_frames(trace):
        start = _utc(f.started_at)
        end = _utc(f.ended_at) if f.ended_at else start
        branch = " (re-run)" if f.rerun else ""
        rows.append(
            (
                f"{f.role} / {short_session(f.session)}{branch}",
                start,
                end,
                (end - start).total_seconds() * 1000,
                f.outcome,
                f.invocation_id,
            )
        )
    return pd.DataFrame.from_records(
        rows, columns=["object", "start", "end", "duration_ms", "outcome", "invocation"]
    )


def _utc(timestamp: str) -> pd.Timestamp:
    """A record's ISO timestamp as naive UTC: plotly's date axis ignores offsets."""
    value = pd.Timestamp(timestamp)
    return value.tz_convert("UTC").tz_localize(None) if value.tzinfo is not None else value


def timeline_figure(trace: InvocationTrace, prompts: dict[str, str]) -> go.Figure:
    """The stack as a timeline across objects: one row per object, a bar per invocation
    from its start to its end, coloured by outcome.

    Bars shorter than 1% of the whole span are drawn at that width, so that an instant
    refusal stays visible; the hover tells the true duration.
    """
    rows = timeline_rows(trace)
    span_ms = (rows["end"].max() - rows["start"].min()).total_seconds() * 1000 if len(rows) else 0.0
    minimum = max(span_ms / 100, 0.01)
    order = [_escaped(o) for o in dict.fromkeys(rows["object"])]
    figure = go.Figure()
    for outcome, group in rows.groupby("outcome", sort=False):
        figure.add_trace(
            go.Bar(
                y=[_escaped(o) for o in group["object"]],
                x=[max(d, minimum) for d in group["duration_ms"]],
                base=[s.isoformat() for s in group["start"]],
                orientation="h",
                marker_color=OUTCOME_COLOURS.get(str(outcome), "#1f77b4"),
                name=_escaped(str(outcome)),
                customdata=[[i] for i in group["invocation"]],
                hovertext=[_bar_hover(r, prompts) for r in group.itertuples()],
                hoverinfo="text",
            )
        )
    figure.update_layout(
        barmode="overlay",
        height=max(200, 60 * len(order) + 100),
        margin={"l": 20, "r": 20, "t": 40, "b": 20},
        xaxis={"type": "date", "title": "time (UTC)"},
        yaxis={"categoryorder": "array", "categoryarray": order, "autorange": "reversed"},
        legend={"title": "outcome", "orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
    )
    return figure


def _bar_hover(row: Any, prompts: dict[str, str]) -> str:
    """Hover text of a bar; the prompt is escaped, since plotly reads some HTML."""
    lines = [
        f"{row.object}  {row.outcome}",
        f"{row.duration_ms:.1f} ms from {row.start.isoformat()}",
        one_line(prompts.get(row.invocation, "")),
    ]
    return "<br>".join(_escaped(line) for line in lines)


def _escaped(text: str) -> str:
    """``text`` as plotly shows it literally (it reads a subset of HTML in labels)."""
    return html.escape(text, quote=False)
