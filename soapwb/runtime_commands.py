"""``soapwb trace``: the cross-object invocation chain through a session."""

from __future__ import annotations

import argparse
from typing import Any

from soap_core.runtime import InvocationChain, TraceFrame, invocation_chains
from soapwb.common import SESSION_HELP, emit_json, open_store, store_command, terminal_time


def register(commands: Any) -> None:
    trace = commands.add_parser(
        "trace", help="show the invocation chains through a session, each invocation once with its depth"
    )
    trace.add_argument("session", metavar="SESSION", help=SESSION_HELP)
    trace.add_argument(
        "--runs",
        action="store_true",
        help="also show the chains of the workbench's re-runs and continues (not the agent's history)",
    )
    store_command(trace, cmd_trace)


def frame_line(frame: TraceFrame) -> str:
    """One frame as a traceback line: the call site, then who ran and how it ended."""
    if frame.caller_session is None:
        site = "called from Python"
    else:
        site = f"called from {frame.caller_role}/{frame.caller_session} context {frame.context_id} message {frame.message_index}"
    end = (
        terminal_time(frame.ended_at)
        if frame.ended_at
        else ("still running" if frame.outcome == "running" else "never ended")
    )
    times = f"{terminal_time(frame.started_at)} .. {end}"
    outcome = frame.outcome.upper() if frame.outcome in ("error", "refused", "interrupted") else frame.outcome
    error = f": {frame.error}" if frame.error else ""
    return f"{frame.role}/{frame.session}  [{site}]  {times}  {outcome}{error}"


INDENT_LIMIT = 16
"""Levels a chain indents at most; a deeper frame stays at this indent (its depth is
printed anyway), so a line's length never grows with the chain."""


def chain_lines(chain: InvocationChain) -> list[str]:
    """A chain as text, one line per invocation depth first: ``>`` marks the session's
    own invocations, then the depth, then the frame indented by its depth (at most
    ``INDENT_LIMIT`` levels). Each invocation is printed once, so the text grows with the
    number of invocations only."""
    traced = set(chain.traced)
    lines = []
    for frame in chain.frames:
        mark = ">" if frame.invocation_id in traced else " "
        indent = "  " * min(frame.depth, INDENT_LIMIT)
        lines.append(f"{mark} {frame.depth:>3} {indent}{frame_line(frame)}")
    return lines


def cmd_trace(args: argparse.Namespace) -> int:
    store = open_store(args)
    every = invocation_chains(store, args.session)
    chains = every if args.runs else [c for c in every if not is_workbench_run(c)]
    if args.json:
        emit_json([chain.as_dict() for chain in chains])
        return 0
    hidden = len(every) - len(chains)
    if not chains:
        why = (
            f"only {hidden} of workbench re-runs (--runs shows them)"
            if hidden
            else "written by peteos, or never invoked"
        )
        print(f"no invocation records of the agent for session {args.session} ({why})")
        return 0
    for number, chain in enumerate(chains, 1):
        own = len(chain.traced)
        print(
            f"chain {number} of {len(chains)}: {len(chain.frames)} invocation{'' if len(chain.frames) == 1 else 's'}, "
            f"{own} of this session (marked >), by depth from the outermost"
        )
        for line in chain_lines(chain):
            print(line)
        if chain.loop:
            print(f"  note: {chain.loop}")
    if hidden:
        print(
            f"{hidden} chain{'' if hidden == 1 else 's'} of workbench re-runs not shown (--runs shows them)"
        )
    return 0


def is_workbench_run(chain: InvocationChain) -> bool:
    """A chain the workbench started (a re-run or a continue, and what it invoked): its
    outermost invocation is marked as one. Such chains are not the agent's history."""
    return bool(chain.frames) and chain.frames[0].rerun is not None
