"""``soapwb rerun``: the agent again from a message, to the end, as a branch."""

from __future__ import annotations

import argparse
import functools
import json
from typing import Any

from replay import (
    BranchDiff,
    NoiseBand,
    RerunError,
    RerunResult,
    ToolModes,
    continue_branch,
    diff_rerun,
    find_context,
    injected_results,
    rerun,
    rerun_noise_band,
)
from soapwb.common import (
    Progress,
    UsageError,
    add_progress_option,
    emit_json,
    endpoint_for,
    open_store,
    store_command,
)
from soapwb.replay_commands import (
    add_change_options,
    add_endpoint_options,
    add_suite_options,
    add_target,
    output_target,
    overrides_from,
)


def register(commands: Any) -> None:
    run = commands.add_parser(
        "rerun",
        help="run the agent again from a message to the end of its turn; the run is saved as a branch",
        description=(
            "Rebuilds the agentic object as the invocation found it (its class and recorded state), "
            "forks the context at the message with the edits, and runs the object's own loop from "
            "there. Tools answer from the record by default (the same tool with the same arguments, "
            "in the same order); the session's files are not changed."
        ),
    )
    add_target(run, suite=True)
    add_suite_options(run)
    add_change_options(run)
    add_tool_options(run, default="recorded", unserved="stop")
    run.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when the re-run's branch differs from the original's by more than --threshold",
    )
    run.add_argument(
        "--threshold",
        type=float,
        default=0.0,
        help="largest branch distance (0..1) --check passes without --noise (default 0)",
    )
    run.add_argument("--samples", type=int, default=1, metavar="K", help="how many re-runs (default 1)")
    run.add_argument(
        "--code",
        metavar="MODULE:ATTR",
        help=(
            "for a session another framework wrote (the OpenAI Agents SDK, LangGraph): the app's "
            "starting agent or compiled graph, so the framework's own loop re-runs it and its "
            "tools can run live (default: the code given at import, if any)"
        ),
    )
    run.add_argument(
        "--noise",
        type=int,
        default=0,
        metavar="K",
        help="also re-run K times unchanged: --check then passes within their spread (K >= 2)",
    )
    add_endpoint_options(run)
    add_progress_option(run)
    store_command(run, cmd_rerun)

    more = commands.add_parser(
        "continue",
        help="a new user message at the end of a context or re-run branch, and the agent's turn on it",
        description=(
            "A replay or re-run branch goes on in place; any other context is first copied into a "
            "branch, so the session's files never change. Tools run live unless --tools says otherwise."
        ),
    )
    more.add_argument("context", metavar="CONTEXT", help="context id or a unique prefix (any session)")
    more.add_argument("message", metavar="MESSAGE", help="what the user says next")
    add_tool_options(more, default="live", unserved="live")
    add_endpoint_options(more)
    add_progress_option(more)
    store_command(more, cmd_continue)


def add_tool_options(parser: argparse.ArgumentParser, *, default: str, unserved: str) -> None:
    """How the tools of a re-run (or a continued turn) answer."""
    parser.add_argument(
        "--tools",
        choices=("recorded", "live"),
        default=default,
        help=f"how tools answer: the original's recorded results, or the real methods (default {default})",
    )
    parser.add_argument(
        "--tool", action="append", default=[], metavar="NAME=MODE", help="the mode of one tool (repeatable)"
    )
    parser.add_argument(
        "--inject",
        action="append",
        default=[],
        metavar="NAME=RESULT",
        help="answer every call of tool NAME with RESULT (JSON, else the text as it is; repeatable)",
    )
    parser.add_argument(
        "--unserved",
        choices=("stop", "live"),
        default=unserved,
        help=f"a call recorded mode cannot serve: stop there, or run it live (default {unserved})",
    )


def tool_modes(args: argparse.Namespace) -> ToolModes:
    per_tool: dict[str, Any] = {}
    for item in args.tool:
        name, sep, mode = item.partition("=")
        if not sep or mode not in ("recorded", "live"):
            raise UsageError(f"--tool takes NAME=recorded or NAME=live, got {item!r}")
        per_tool[name] = mode
    try:
        injected = injected_results(args.inject)
    except RerunError as exc:
        raise UsageError(f"--inject: {exc}") from None
    return ToolModes(args.tools, per_tool, injected, args.unserved)


def _count_step(progress: Progress, what: str, done: int) -> None:
    progress.status(f"{what}: {done} model calls")


def cmd_rerun(args: argparse.Namespace) -> int:
    if args.suite is not None:
        from soapwb.fleet_commands import cmd_rerun_suite

        return cmd_rerun_suite(args, tool_modes(args))
    if args.session is None or args.at is None:
        raise UsageError("rerun takes SESSION --at N, or --suite FILE")
    if args.noise == 1 or args.noise < 0:
        raise UsageError("--noise takes K >= 2: a spread needs two unchanged re-runs")
    if args.samples < 1:
        raise UsageError("--samples takes K >= 1")
    store = open_store(args)
    session = store.load_session(args.session, require_active=args.context is None)
    found = output_target(args, session)
    modes, overrides = tool_modes(args), overrides_from(args, len(found.messages))
    progress = Progress(args)
    with endpoint_for(args) as endpoint:
        then = f", then {args.noise} unchanged for the noise band" if args.noise else ""
        progress.say(
            f"re-running {session.role} from message {found.index} of {found.context_id} on "
            f"{endpoint.base_url}: {args.samples} re-run{'s' if args.samples != 1 else ''}{then}"
        )
        results = []
        for number in range(1, args.samples + 1):
            result = rerun(
                store,
                store.load_session(args.session, require_active=False),
                found.context_id,
                found.index,
                endpoint,
                overrides=overrides,
                tools=modes,
                on_step=functools.partial(_count_step, progress, f"re-run {number}/{args.samples}"),
                code=args.code,
            )
            results.append(result)
            progress.status(f"re-run {number}/{args.samples}: done", last=True)
        band = None
        if args.noise:
            band, _ = rerun_noise_band(
                store,
                session,
                found.context_id,
                found.index,
                endpoint,
                tools=modes,
                samples=args.noise,
                on_step=lambda k, n: progress.status(f"unchanged re-run {k}/{args.noise}: {n} model calls"),
                code=args.code,
            )
            progress.status(f"{args.noise} unchanged re-runs: done", last=True)
    reloaded = store.load_session(args.session, require_active=False)
    measured = band if band is not None and band.samples >= 2 else None
    reports = [_report(result, diff_rerun(reloaded, result), measured, args.threshold) for result in results]
    failed = any(not r["ok"] or (args.check and r["beyond"]) for r in reports)
    if args.json:
        noise = band.as_dict() if band is not None else None
        emit_json(
            reports[0] | {"noise_band": noise}
            if len(reports) == 1
            else {"runs": reports, "noise_band": noise}
        )
        return 1 if failed else 0
    print(f"re-ran {session.role}/{session.uuid} from message {found.index} of {found.context_id}")
    for number, report in enumerate(reports, start=1):
        print(f"run {number}: branch {report['branch_id']} ({len(report['calls'])} model calls)")
        for served in report["tools"]:
            print(f"  {served['tool']}({served['arguments']}): {served['how']}")
        for line in _outcome(report):
            print(f"  {line}")
        print(f"  {report['verdict']}")
    if band is not None and measured is None:
        print(f"no noise band: {band.samples} of {args.noise} unchanged re-runs succeeded")
    return 1 if failed else 0


def _report(
    result: RerunResult, diff: BranchDiff, band: NoiseBand | None, threshold: float
) -> dict[str, Any]:
    """One re-run for the output: its result, its diff, and where it lies."""
    beyond = not band.contains(diff.distance) if band is not None else diff.distance > threshold
    divergence = (
        f"first divergence: {diff.divergence}" if diff.first_divergence is not None else diff.divergence
    )
    if band is not None:
        where = "outside" if beyond else "inside"
        placed = f"{where} the noise band of {band.samples} unchanged re-runs (up to {band.upper:.3f})"
    else:
        placed = f"{'above' if beyond else 'within'} the threshold {threshold:g}"
    verdict = f"{divergence}; branch distance {diff.distance:.3f}, {placed}"
    return {**result.as_dict(), "diff": diff.as_dict(), "beyond": beyond, "verdict": verdict}


def cmd_continue(args: argparse.Namespace) -> int:
    store = open_store(args)
    session, context = find_context(store, args.context)
    progress = Progress(args)
    with endpoint_for(args) as endpoint:
        progress.say(f"continuing {context.id} on {endpoint.base_url}: the agent's turn on your message")
        result = continue_branch(store, session, context, args.message, endpoint, tools=tool_modes(args))
    if args.json:
        emit_json(result.as_dict())
        return 0 if result.ok else 1
    print(f"{session.role}/{session.uuid}: branch {result.branch_id} ({len(result.calls)} model calls)")
    for served in result.tools:
        print(f"  {served['tool']}({served['arguments']}): {served['how']}")
    for line in _outcome(result.as_dict()):
        print(line)
    return 0 if result.ok else 1


def _outcome(report: dict[str, Any]) -> list[str]:
    """How a re-run ended: its answer or error, then each tool call that failed."""
    if report["error"] is not None:
        lines = [f"FAILED: {report['error']}"]
    else:
        lines = [f"answer: {json.dumps(report['answer'], ensure_ascii=False)}"]
    if report["tool_failures"]:
        lines.append(f"FAILED: {report['problem']}" if report["error"] is None else "tool calls that failed:")
        lines += [
            f"  {f.get('role')}.{f.get('tool')}({f.get('arguments')}): {f.get('result')}"
            for f in report["tool_failures"]
        ]
    return lines
