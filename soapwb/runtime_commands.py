"""``soapwb trace``: the cross-object invocation chain through a session."""

from __future__ import annotations

import argparse
from typing import Any

from soap_core.runtime import TraceFrame, invocation_chain
from soapwb.common import add_store_options, emit_json, open_store


def register(commands: Any) -> None:
    trace = commands.add_parser("trace", help="show the invocation chain through a session")
    trace.add_argument("session", metavar="SESSION", help="session uuid or a unique prefix of one")
    add_store_options(trace)
    trace.set_defaults(handler=cmd_trace)


def frame_line(frame: TraceFrame) -> str:
    """One frame as a traceback line: the call site, then who ran and how it ended."""
    if frame.caller_session is None:
        site = "called from Python"
    else:
        site = f"called from {frame.caller_role}/{frame.caller_session} context {frame.context_id} message {frame.message_index}"
    end = frame.ended_at or ("still running" if frame.outcome == "running" else "never ended")
    times = f"{frame.started_at} .. {end}"
    outcome = frame.outcome.upper() if frame.outcome in ("error", "refused", "interrupted") else frame.outcome
    error = f": {frame.error}" if frame.error else ""
    return f"{frame.role}/{frame.session}  [{site}]  {times}  {outcome}{error}"


def cmd_trace(args: argparse.Namespace) -> int:
    store = open_store(args)
    traces = invocation_chain(store, args.session)
    if args.json:
        emit_json([t.as_dict() for t in traces])
        return 0
    if not traces:
        print(f"no invocation records for session {args.session} (written by peteos, or never invoked)")
        return 0
    for number, trace in enumerate(traces, 1):
        print(f"invocation {number} of {len(traces)}:")
        for frame in trace.callers:
            print(f"  {frame_line(frame)}")
        if trace.invocation is not None:
            print(f"> {frame_line(trace.invocation)}")
        for frame in trace.callees:
            print(f"  {'    ' * frame.depth}-> {frame_line(frame)}")
        if trace.loop:
            print(f"  note: {trace.loop}")
    return 0
