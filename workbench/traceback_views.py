"""The Traceback page's figures: a session's invocations, the call stack through one of
them, and its timeline across objects.

Plain functions without Streamlit: the page lays out what these return, and a test
checks them against :func:`soap_core.runtime.invocation_chain`. Each chain through the
session is walked and held once; the page cuts the stack of the invocation it shows
from it.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from pandas.io.formats.style import Styler

from replay import short_id
from soap_core import NO_TIME, CallRecord, time_text
from soap_core.runtime import (
    InvocationChain,
    InvocationRecord,
    InvocationTrace,
    TraceFrame,
    invocation_chains,
    read_calls,
    read_invocation,
    read_invocations,
)
from workbench.transcript import short_value
from workbench.views import open_store

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
class Span:
    """Something a frame did inside its bar: one LLM call, or the tool calls its answer
    asked for (from the call's end to the next call's start, or the frame's end)."""

    kind: str
    """``LLM call`` or ``tool calls``."""
    start: str
    end: str
    label: str
    tools: int = 0
    """For tool calls: how many the answer asked for."""


@dataclass(frozen=True)
class Invocation:
    """One invocation of the session, as the page lists and picks it."""

    frame: TraceFrame
    """Its frame in its chain (``depth`` counted from the chain's outermost invocation)."""
    chain: int
    """Which of :attr:`SessionTraces.chains` holds it."""
    callers: int
    callees: int
    """How many invocations are above it and below it (at any depth)."""

    @property
    def id(self) -> str:
        return self.frame.invocation_id


@dataclass(frozen=True)
class SessionTraces:
    """What the page needs about one session's invocations, read once and cached.

    Each chain through the session is kept once (:func:`soap_core.runtime.invocation_chains`);
    the stack through one invocation is cut from its chain when it is shown
    (:meth:`trace`). One stack kept per invocation held n² frames for a session whose
    object invoked itself n times, each invocation made by the one before."""

    chains: list[InvocationChain]
    invocations: list[Invocation]
    """Every invocation of the session, in the order of their records (start time)."""
    prompts: dict[str, str]
    """Invocation id → prompt, for every frame of every chain."""
    has_records: bool
    """Whether the session folder holds any invocation record at all (peteos writes none)."""
    spans: dict[str, list[Span]] = field(default_factory=dict)
    """Invocation id → its LLM calls and tool runs, in time order."""
    methods: dict[str, str] = field(default_factory=dict)
    """Invocation id → how it was called: the caller's tool, or ``from Python``."""

    def trace(self, invocation: Invocation) -> InvocationTrace:
        """The stack through one invocation: callers, itself, callees (depths counted from
        it), in time linear in its chain."""
        return self.chains[invocation.chain].trace(invocation.id)


def still_running(traced: SessionTraces) -> bool:
    """Whether any frame of the session's chains was running when they were read. Such a
    reading is not kept: its process may since have ended, or died, which a killed
    process does without changing a file, so the next run reads the records again (and
    the reader settles a dead one as ``interrupted``, :func:`soap_core.read_invocations`)."""
    return any(frame.outcome == "running" for chain in traced.chains for frame in chain.frames)


def load_traces(root: str, session_uuid: str) -> SessionTraces:
    """The chains through every invocation of the session, with the prompt, the LLM
    calls and tool runs, and the calling tool of each frame.

    Records come from the sessions themselves, each read from the session it ran in,
    because a frame of a deeper callee is recorded only in its own and its caller's
    sessions; call records are read once per session of the chain. Each frame is read
    and built once, whatever the nesting. Raises SoapError for a broken store or record.
    """
    store = open_store(root)
    directories = {s.uuid: s.path for s in store.sessions()}
    summary = store.find(session_uuid)
    own = read_invocations(summary.path)
    chains = invocation_chains(store, session_uuid)
    where: dict[str, tuple[int, TraceFrame, tuple[int, int]]] = {}
    for number, chain in enumerate(chains):
        sizes = chain.stack_sizes()
        traced = set(chain.traced)
        for frame in chain.frames:
            if frame.invocation_id in traced:
                where.setdefault(frame.invocation_id, (number, frame, sizes[frame.invocation_id]))
    invocations = [
        Invocation(where[r.id][1], where[r.id][0], *where[r.id][2])
        for r in own
        if r.callee.session == summary.uuid and r.id in where
    ]
    records = {r.id: r for r in own}
    frames = [f for chain in chains for f in chain.frames]
    for frame in frames:
        if frame.invocation_id not in records and frame.session in directories:
            record = read_invocation(directories[frame.session], frame.invocation_id)
            if record is not None:
                records[frame.invocation_id] = record
    sessions = {f.session for f in frames} | {f.caller_session for f in frames if f.caller_session}
    calls = {c.id: c for uuid in sessions if uuid in directories for c in read_calls(directories[uuid])}
    by_message = {c.message_id: c for c in calls.values() if c.message_id}
    return SessionTraces(
        chains,
        invocations,
        {i: r.prompt for i, r in records.items()},
        bool(own),
        {i: frame_spans(r, calls) for i, r in records.items()},
        {i: frame_method(r, by_message) for i, r in records.items()},
    )


def call_tools(call: CallRecord) -> list[str]:
    """The names of the tools a call's answer asked for (none for a plain answer; the
    response is read from a file, so anything unexpected in it counts as none)."""
    try:
        message = (call.response or {})["choices"][0]["message"]
        return [str(c["function"]["name"]) for c in message.get("tool_calls") or []]
    except (KeyError, IndexError, TypeError, AttributeError):
        return []


def _answer(call: CallRecord) -> str:
    if call.error:
        return "failed"
    tools = call_tools(call)
    return "→ " + ", ".join(tools) if tools else "→ answer"


def frame_spans(record: InvocationRecord, calls: dict[str, CallRecord]) -> list[Span]:
    """The LLM calls of one invocation, each followed by the tool calls its answer asked
    for (until the next call, or the end of the invocation)."""
    made = sorted(
        (calls[i] for i in record.calls if i in calls and calls[i].started_at), key=lambda c: c.started_at
    )
    spans: list[Span] = []
    for number, call in enumerate(made, 1):
        end = call.ended_at or call.started_at
        spans.append(Span("LLM call", call.started_at, end, f"LLM call {number} {_answer(call)}"))
        tools = call_tools(call)
        following = made[number].started_at if number < len(made) else record.ended_at
        if tools and following:
            spans.append(Span("tool calls", end, following, "tool calls: " + ", ".join(tools), len(tools)))
    return spans


def frame_method(record: InvocationRecord, calls_by_message: dict[str, CallRecord]) -> str:
    """How an invocation was called: the tool of the caller's answer that made the call
    (``via ask_researcher``), or ``from Python``."""
    caller = record.caller
    if caller is None or caller.session is None:
        return "from Python"
    call = calls_by_message.get(caller.message_id or "")
    tools = list(dict.fromkeys(call_tools(call))) if call is not None else []
    return "via " + " / ".join(tools) if tools else f"called by {caller.role}"


def trace_frames(trace: InvocationTrace) -> list[TraceFrame]:
    """The whole stack of a trace, outermost caller first, then the invocation, then its
    callees depth first."""
    own = [trace.invocation] if trace.invocation is not None else []
    return [*trace.callers, *own, *trace.callees]


def matching_invocations(ids: Sequence[str], ref: str) -> list[str]:
    """Those of the session's invocation ``ids`` that are ``ref`` or start with it (exact
    first)."""
    return [ref] if ref in ids else [i for i in ids if i.startswith(ref)]


def short_session(session_uuid: str | None) -> str:
    """A session uuid cut to its first block (after peteos' date prefix), for labels."""
    return short_id(session_uuid)


def outcome_label(outcome: str) -> str:
    """The outcome with an icon, so refusals and errors stand out in a table."""
    return f"{OUTCOME_ICONS.get(outcome, '❔')} {outcome}"


def one_line(text: str, limit: int = 80) -> str:
    """A prompt as one short line for labels and table cells."""
    return short_value(text, limit)


def agent_invocations(invocations: Sequence[Invocation]) -> list[Invocation]:
    """The agent's own invocations: those the workbench made (a re-run, a continue, and
    every object they invoked) left out, so the agent's history reads as it ran."""
    return [i for i in invocations if i.frame.rerun is None]


def workbench_runs(invocations: Sequence[Invocation]) -> list[Invocation]:
    """The invocations the workbench's re-runs and continues made."""
    return [i for i in invocations if i.frame.rerun is not None]


def deepest_invocation(invocations: Sequence[Invocation]) -> Invocation | None:
    """The invocation the page opens on: the one with the most frames above and below it
    (the deepest chain through the session), the latest of equals. The latest alone is
    often a single bar, which tells least about how objects called one another."""
    return max(reversed(invocations), key=lambda i: i.callers + i.callees, default=None)


def invocation_label(invocation: Invocation, prompts: dict[str, str], zone: tzinfo | None = None) -> str:
    """How an invocation is named in the picker: start time, outcome, prompt (no age: a
    picker whose labels change between two runs loses what was picked)."""
    frame = invocation.frame
    prompt = one_line(prompts.get(frame.invocation_id, ""), 60)
    return f"{time_text(frame.started_at, zone, age=False)}  {outcome_label(frame.outcome)}  {prompt}"


def invocations_table(
    invocations: Sequence[Invocation], prompts: dict[str, str], zone: tzinfo | None = None
) -> pd.DataFrame:
    """Every invocation of the session: when, what it was asked, how it ended, and how
    many frames sit above and below it."""
    rows = [
        (
            time_text(i.frame.started_at, zone, age=False),
            one_line(prompts.get(i.id, "")),
            outcome_label(i.frame.outcome),
            i.callers,
            i.callees,
            i.id,
        )
        for i in invocations
    ]
    return pd.DataFrame.from_records(rows, columns=list(INVOCATION_COLUMNS))


def stack_table(trace: InvocationTrace, prompts: dict[str, str], zone: tzinfo | None = None) -> pd.DataFrame:
    """The call stack as a table, outermost first; ``depth`` is 0 for the traced
    invocation, negative for its callers and positive for its callees."""
    rows = [
        (
            f.depth,
            f.role,
            f.session,
            one_line(prompts.get(f.invocation_id, "")),
            f.caller_role or "(Python)",
            f.caller_session or NO_TIME,
            f.context_id or NO_TIME,
            f.message_index,
            time_text(f.started_at, zone, age=False),
            time_text(f.ended_at, zone, age=False),
            outcome_label(f.outcome) + (" (re-run)" if f.rerun else ""),
            f.error or "",
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
    return (
        f"{frame.role} / {short_session(frame.session)} {frame.outcome}: {frame.error or 'no error recorded'}"
    )


def call_site_params(frame: TraceFrame, address: Callable[[TraceFrame, int], str]) -> dict[str, str] | None:
    """Query parameters of the Context page at the message that made the call (``address``:
    how the caller's request source names its display index); None when plain Python
    made it (no caller context)."""
    if frame.caller_session is None or frame.context_id is None:
        return None
    params = {"session": frame.caller_session, "context": frame.context_id}
    if frame.message_index is not None:
        params["message"] = address(frame, frame.message_index)
    return params


def call_site_label(frame: TraceFrame) -> str:
    """The link text of a frame's call site."""
    where = "" if frame.message_index is None else f" message #{frame.message_index}"
    return f"{frame.role} ({short_session(frame.session)}) was called from {frame.caller_role}{where}"


def frame_label(frame: TraceFrame, methods: dict[str, str], spans: dict[str, list[Span]]) -> str:
    """The text on a frame's bar: object and method, and what it did inside."""
    made = spans.get(frame.invocation_id, [])
    llm = sum(1 for s in made if s.kind == "LLM call")
    tools = sum(s.tools for s in made)
    inside = f"{llm} LLM call{'' if llm == 1 else 's'}" + (
        f", {tools} tool call{'' if tools == 1 else 's'}" if tools else ""
    )
    method = methods.get(frame.invocation_id, "")
    ended = "" if frame.outcome == "ok" else f" · {frame.outcome}"
    return f"{frame.role}.invoke {method} · {inside}{ended}".replace("  ", " ")


def timeline_rows(
    trace: InvocationTrace, methods: dict[str, str] | None = None, spans: dict[str, list[Span]] | None = None
) -> pd.DataFrame:
    """One bar per frame: its object (role / session) as the row, start, end, duration,
    outcome and the label on its bar. A frame still running, or without an end, ends
    where it started."""
    rows = []
    for f in trace_frames(trace):
        start = _utc(f.started_at)
        end = _utc(f.ended_at) if f.ended_at else start
        rows.append(
            (
                row_name(f),
                start,
                end,
                (end - start).total_seconds() * 1000,
                f.outcome,
                f.invocation_id,
                frame_label(f, methods or {}, spans or {}),
            )
        )
    return pd.DataFrame.from_records(
        rows, columns=["object", "start", "end", "duration_ms", "outcome", "invocation", "label"]
    )


def row_name(frame: TraceFrame) -> str:
    """The timeline row of a frame's object: role / session (re-runs apart)."""
    return f"{frame.role} / {short_session(frame.session)}{' (re-run)' if frame.rerun else ''}"


def span_rows(trace: InvocationTrace, spans: dict[str, list[Span]]) -> pd.DataFrame:
    """One row per LLM call and tool run of every frame, on its frame's row."""
    rows = []
    for f in trace_frames(trace):
        for span in spans.get(f.invocation_id, []):
            start, end = _utc(span.start), _utc(span.end)
            duration = max((end - start).total_seconds() * 1000, 0.0)
            rows.append((row_name(f), start, end, duration, span.kind, span.label, f.role))
    return pd.DataFrame.from_records(
        rows, columns=["object", "start", "end", "duration_ms", "kind", "label", "role"]
    )


def _utc(timestamp: str) -> pd.Timestamp:
    """A record's ISO timestamp as naive UTC: plotly's date axis ignores offsets."""
    value = pd.Timestamp(timestamp)
    return value.tz_convert("UTC").tz_localize(None) if value.tzinfo is not None else value


FRAME_META = "frame"
SPAN_META = "span"
SPAN_COLOURS = {"LLM call": "#1f3a93", "tool calls": "#f2c14e"}
SPAN_WIDTH = 0.3
SPAN_OFFSET = 0.05
"""Spans sit in the lower half of their frame's bar (the y axis runs downwards), under
the label written in the upper half."""


def timeline_figure(
    trace: InvocationTrace,
    prompts: dict[str, str],
    methods: dict[str, str] | None = None,
    spans: dict[str, list[Span]] | None = None,
) -> go.Figure:
    """The stack as a timeline across objects: one row per object, a bar per invocation
        from its start to its end, coloured by outcome and labelled with its object, how it
        was called and what it did (in its upper half); its LLM calls and tool runs drawn as
    thinner bars in its lower half.

        Bars shorter than 1% of the whole span are drawn at that width (spans at half of
        it), so that an instant refusal stays visible; the hover tells the true duration.
    """
    rows = timeline_rows(trace, methods, spans)
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
                width=0.8,
                marker={"color": OUTCOME_COLOURS.get(str(outcome), "#1f77b4"), "opacity": 0.55},
                name=_escaped(str(outcome)),
                meta=FRAME_META,
                customdata=[[i] for i in group["invocation"]],
                hovertext=[_bar_hover(r, prompts) for r in group.itertuples()],
                hoverinfo="text",
            )
        )
    inside = span_rows(trace, spans or {})
    for kind, group in inside.groupby("kind", sort=False):
        figure.add_trace(
            go.Bar(
                y=[_escaped(o) for o in group["object"]],
                x=[max(d, minimum / 2) for d in group["duration_ms"]],
                base=[s.isoformat() for s in group["start"]],
                orientation="h",
                width=SPAN_WIDTH,
                offset=SPAN_OFFSET,
                marker_color=SPAN_COLOURS.get(str(kind), "#333333"),
                name=_escaped(str(kind)),
                meta=SPAN_META,
                hovertext=[_span_hover(r) for r in group.itertuples()],
                hoverinfo="text",
            )
        )
    figure.update_layout(
        barmode="overlay",
        height=max(200, 70 * len(order) + 100),
        margin={"l": 20, "r": 20, "t": 40, "b": 20},
        xaxis={"type": "date", "title": "time (UTC)"},
        yaxis={"categoryorder": "array", "categoryarray": order, "autorange": "reversed"},
        legend={"title": "outcome / inside", "orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
        annotations=[_bar_label(row) for row in rows.itertuples()],
    )
    return figure


def _bar_label(row: Any) -> dict[str, Any]:
    """The label of a frame's bar, written over its upper half from its start (the spans
    take the lower half); it may run past a short bar, which the row leaves room for."""
    return {
        "x": row.start.isoformat(),
        "y": _escaped(row.object),
        "text": _escaped(row.label),
        "showarrow": False,
        "xanchor": "left",
        "yanchor": "bottom",
        "xshift": 4,
        "yshift": -2,
        "font": {"size": 12, "color": "#1b1b1b"},
    }


def _bar_hover(row: Any, prompts: dict[str, str]) -> str:
    """Hover text of a bar; the prompt is escaped, since plotly reads some HTML."""
    lines = [
        f"{row.label}",
        f"{row.object}  {row.outcome}",
        f"{row.duration_ms:.1f} ms from {row.start.isoformat()}",
        one_line(prompts.get(row.invocation, "")),
    ]
    return "<br>".join(_escaped(line) for line in lines)


def _span_hover(row: Any) -> str:
    """Hover text of an LLM call or tool run: which, of which object, how long."""
    lines = [f"{row.role}: {row.label}", f"{row.duration_ms:.1f} ms from {row.start.isoformat()}"]
    return "<br>".join(_escaped(line) for line in lines)


def _escaped(text: str) -> str:
    """``text`` as plotly shows it literally (it reads a subset of HTML in labels)."""
    return html.escape(text, quote=False)
