"""``soapwb materialize``, ``verify``, ``replay`` and ``diff``."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from replay import (
    AddressError,
    Batch,
    Materialized,
    MessageRangeError,
    Output,
    Overrides,
    branch_turns,
    built_as,
    diff_branches,
    diff_contexts,
    diff_outputs,
    materialize_at,
    output_sentences,
    output_words,
    parse_message_ranges,
    row_changes,
    run_batch,
)
from replay._refs import resolve_reference
from soap_core import Context, Session, SoapError, mark_of
from soap_core.runtime import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT_S
from soapwb.common import (
    MIB,
    SESSION_HELP,
    Progress,
    UsageError,
    add_progress_option,
    emit_json,
    endpoint_for,
    open_store,
    print_words,
    store_command,
)
from soapwb.fleet_commands import add_engine_options, single_model


def register(commands: Any) -> None:

    mat = commands.add_parser("materialize", help="print the exact request behind a message")
    add_target(mat)
    store_command(mat, cmd_materialize)

    verify = commands.add_parser("verify", help="check every recorded call against its rematerialization")
    add_engine_options(verify)
    add_progress_option(verify)
    store_command(verify, cmd_verify)

    rep = commands.add_parser(
        "replay", help="run the model again from a message; each run is saved as a fork"
    )
    add_progress_option(rep)
    add_target(rep, suite=True)
    add_suite_options(rep)
    add_change_options(rep, models=True)
    rep.add_argument("--samples", type=int, default=1, help="how many runs (default 1)")
    rep.add_argument(
        "--noise",
        type=int,
        default=0,
        metavar="K",
        help="also run K unchanged samples to measure the model's own variation",
    )
    rep.add_argument("--concurrency", type=int, default=2, help="runs at once (default 2)")
    add_endpoint_options(rep)
    rep.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when an output differs from the original beyond --threshold",
    )
    rep.add_argument(
        "--threshold",
        type=float,
        help="largest distance (0..1) that passes --check (default: the noise band, else 0)",
    )
    rep.add_argument(
        "--verify",
        metavar="CMD",
        help="with --suite: a shell command that judges each answer: the answer's text on its stdin, "
        "SOAPWB_SESSION, SOAPWB_AT and SOAPWB_MODEL in its environment; exit 0 passes, 1 fails, "
        "anything else is an error",
    )
    store_command(rep, cmd_replay)

    diff = commands.add_parser(
        "diff", help="compare two outputs (CONTEXT@INDEX, or a replay fork) or two contexts"
    )
    diff.add_argument("a", metavar="A", help="CONTEXT, CONTEXT@INDEX or a replay fork's context id")
    diff.add_argument("b", metavar="B")
    store_command(diff, cmd_diff)


_AT_HELP = (
    "which request. N: in a session imported from OpenPoke, log entry N, the user_message or "
    "agent_message OpenPoke answered (numbered as `soapwb import openpoke` and `show` on the root "
    "context count them, whichever context is active); in any other session, the display index "
    "of the output in the context (negative counts from the end). entry:N and message:N (a display "
    "index, also in an OpenPoke session) say which explicitly; anything else is a message id or prefix"
)


def add_change_options(parser: argparse.ArgumentParser, *, models: bool = False) -> None:
    """What a replay or a re-run may change: the model's settings and the messages
    (``models``: --model repeatable, each model a column of a suite's report)."""
    if models:
        parser.add_argument(
            "--model",
            action="append",
            help="model name (default: the original call's); with --suite, repeatable: every call "
            "goes to each model",
        )
    else:
        parser.add_argument("--model", help="model name (default: the original call's)")
    parser.add_argument("--temperature", type=float)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--max-tokens", type=int)
    parser.add_argument(
        "--system-prompt-file", type=Path, help="replace the system prompt with this file's text"
    )
    parser.add_argument(
        "--edit",
        action="append",
        default=[],
        metavar="INDEX=TEXT",
        help="replace the text of the message at INDEX (repeatable)",
    )
    parser.add_argument(
        "--drop",
        action="append",
        default=[],
        metavar="MESSAGES",
        help="leave out these messages of the request: INDEX, A-B, or A- to the end, comma-separated "
        "(e.g. 1-14980 keeps the system prompt and the last messages); a tool call goes with its "
        "results (repeatable)",
    )


def add_endpoint_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--base-url", help="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL, else the local model)"
    )
    parser.add_argument(
        "--timeout",
        type=_positive,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="the most one attempt at a model call may take, all of it: connecting, sending, the "
        f"headers and the whole answer (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--retries",
        type=_count,
        default=2,
        metavar="N",
        help="attempts after a refused connection, a timeout, a 429 or a 5xx (default 2). Between "
        "attempts the client waits 0.5 s, doubling up to 8 s, or the server's Retry-After if it is no "
        "longer than --timeout (a longer one is not retried): a call ends within "
        "(N + 1) x --timeout plus those waits",
    )
    parser.add_argument(
        "--max-response-mb",
        type=_positive,
        default=DEFAULT_MAX_RESPONSE_BYTES / MIB,
        metavar="MIB",
        help="the largest answer read, in MiB, after inflating a compressed one (default "
        f"{DEFAULT_MAX_RESPONSE_BYTES / MIB:g}); a larger one fails the call, which is recorded "
        "with the error and without the answer",
    )


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 0")
    return value


def add_target(parser: argparse.ArgumentParser, *, suite: bool = False) -> None:
    """SESSION, --context and --at; with ``suite``, SESSION and --at may give way to --suite."""
    if suite:
        parser.add_argument("session", metavar="SESSION", nargs="?", help=f"{SESSION_HELP} (or --suite)")
    else:
        parser.add_argument("session", metavar="SESSION", help=SESSION_HELP)
    parser.add_argument("--context", metavar="ID", help="context id or prefix (default: the active one)")
    parser.add_argument("--at", required=not suite, metavar="N|entry:N|message:N|ID", help=_AT_HELP)
    parser.add_argument(
        "--openpoke-root",
        metavar="DIR",
        type=Path,
        help="for a session imported from OpenPoke: the OpenPoke checkout whose system prompt and "
        "tools to send, for this command only (import --openpoke-root remembers one)",
    )


def materialize_target(args: argparse.Namespace, session: Session) -> Materialized:
    """The request ``--context``/``--at`` name, with ``--openpoke-root`` for an OpenPoke entry."""
    try:
        return materialize_at(session, args.context, args.at, checkout=getattr(args, "openpoke_root", None))
    except AddressError as exc:
        raise UsageError(str(exc)) from None


def output_target(args: argparse.Namespace, session: Session) -> Materialized:
    """:func:`materialize_target` for a command that re-runs a model output (replay,
    rerun): a message the model did not write (a tool result, a user message) is refused
    with the nearest output named, since the request before it is no call the model got
    (a tool call without its result, say)."""
    found = materialize_target(args, session)
    messages = session.contexts[found.context_id].messages
    if found.message_id is None or messages[found.index].role == "assistant":
        return found
    before = [i for i, m in enumerate(messages[: found.index]) if m.role == "assistant"]
    nearest = f"; the model output before it is message {before[-1]} (--at {before[-1]})" if before else ""
    raise UsageError(
        f"--at {args.at}: message {found.index} of context {found.context_id} is a "
        f"{messages[found.index].role.replace('_', ' ')} message, not a model output{nearest}"
    )


def cmd_materialize(args: argparse.Namespace) -> int:
    store = open_store(args)
    session = store.load_session(args.session, require_active=args.context is None)
    found = materialize_target(args, session)
    if args.json:
        emit_json(found.as_dict())
        return 0
    recorded = f"recorded call {found.call.id}" if found.call else "no recorded call"
    print(f"{found.role}/{found.session} context {found.context_id} message {found.index} ({recorded})")
    print(built_as(found.source))
    print(f"request hash {found.request_hash}")
    for note in found.notes:
        print(f"note: {note}")
    emit_json(found.request)
    return 0


def add_suite_options(parser: argparse.ArgumentParser) -> None:
    """--suite and the engine that runs it (fleet_commands)."""
    parser.add_argument(
        "--suite",
        type=Path,
        metavar="FILE",
        help="instead of SESSION --at: every call of a suite file (JSON Lines of "
        '{"session": REF, "context": ID, "at": N}; `soapwb suite` writes one), partitioned by session',
    )
    add_engine_options(parser)


def cmd_verify(args: argparse.Namespace) -> int:
    from fleet import verify_partitions, verify_report, verify_task
    from soapwb.fleet_commands import print_failed_partitions, run_on_engine

    store = open_store(args)
    report = verify_report(run_on_engine(args, verify_partitions(store), verify_task, "sessions"))
    results, failed = report["results"], report["failed_partitions"]
    code = 1 if report["mismatches"] or failed else 0
    if args.json:
        emit_json(report)
        print_failed_partitions(report["failed_partitions"])
        return code
    for result in results:
        where = f"{result['role']}/{result['session']} context {result['context_id']} message {result['message_index']}"
        if result["match"]:
            print(f"ok        {where}")
        else:
            print(f"MISMATCH  {where}: {result['error'] or ''}")
            for kind, changes in result["differences"].items():
                print(f"          {kind}: {', '.join(list(changes)[:6])}")
    print_failed_partitions(failed)
    if not results and not failed:
        print("no recorded calls (a store written without a call log, such as peteos')")
    elif results:
        print(f"{len(results) - report['mismatches']} of {len(results)} recorded calls match")
    return code


def overrides_from(args: argparse.Namespace, messages: int) -> Overrides:
    """The overrides the options ask for, on a request of ``messages`` messages."""
    edits: dict[int, str] = {}
    for item in args.edit:
        index, sep, text = item.partition("=")
        if not sep or not index.strip().lstrip("-").isdigit():
            raise UsageError(f"--edit takes INDEX=TEXT, got {item!r}")
        edits[int(index)] = text
    system_prompt = None
    if args.system_prompt_file is not None:
        try:
            system_prompt = args.system_prompt_file.read_text("utf-8")
        except OSError as exc:
            raise SoapError(f"{args.system_prompt_file}: cannot read: {exc.strerror}") from None
    try:
        drops = parse_message_ranges(",".join(args.drop), messages)
    except MessageRangeError as exc:
        raise UsageError(f"--drop: {exc}") from None
    return Overrides(
        single_model(args), args.temperature, args.seed, args.max_tokens, system_prompt, edits, tuple(drops)
    )


def cmd_replay(args: argparse.Namespace) -> int:
    if args.suite is not None:
        from soapwb.fleet_commands import cmd_replay_suite

        return cmd_replay_suite(args)
    if args.session is None or args.at is None:
        raise UsageError("replay takes SESSION --at N, or --suite FILE")
    if args.samples < 1 or args.noise < 0 or args.concurrency < 1:
        raise UsageError("--samples and --concurrency must be at least 1, --noise at least 0")
    store = open_store(args)
    session = store.load_session(args.session, require_active=args.context is None)
    found = output_target(args, session)
    overrides = overrides_from(args, len(found.messages))
    original_message = session.contexts[found.context_id].messages[found.index] if found.message_id else None
    call = found.call
    original = Output.of(original_message, call.usage if call else None, call.latency_s if call else None)
    progress = Progress(args)
    with endpoint_for(args) as endpoint:
        noise = f", then {args.noise} unchanged for the noise band" if args.noise else ""
        progress.say(
            f"replaying message {found.index} of {found.context_id} on {endpoint.base_url}: "
            f"{args.samples} run{'s' if args.samples != 1 else ''}{noise}"
        )
        batch = run_batch(
            store,
            session,
            found,
            endpoint,
            overrides,
            samples=args.samples,
            unchanged=args.noise,
            concurrency=args.concurrency,
            on_progress=lambda done, total: progress.bar(done, total, "runs"),
        )
    return report_replay(args, found.as_dict(), original if original_message else None, batch)


def report_replay(
    args: argparse.Namespace, target: dict[str, Any], original: Output | None, batch: Batch
) -> int:
    runs, baseline, band = batch.runs, batch.noise_runs, batch.band
    threshold = args.threshold if args.threshold is not None else (band.upper if band else 0.0)
    rows = []
    for run in runs:
        row: dict[str, Any] = {**run.as_dict(), "diff": None, "noise": None}
        if run.ok and original is not None:
            diff = diff_outputs(original, Output.of(run.output, run.usage, run.latency_s))
            row["diff"] = diff.as_dict()
            if band is not None:
                row["noise"] = "inside" if band.contains(diff.distance) else "outside"
        rows.append(row)
    failed = [r for r in runs + baseline if not r.ok]
    beyond = [r for r in rows if r["diff"] is not None and r["diff"]["distance"] > threshold]
    code = 1 if failed or (args.check and beyond) else 0
    if args.json:
        emit_json(
            {
                "target": {k: v for k, v in target.items() if k != "request"},
                "runs": rows,
                "baseline": [r.as_dict() for r in baseline],
                "noise_band": band.as_dict() if band else None,
                "threshold": threshold,
                "failed": len(failed),
                "beyond_threshold": len(beyond),
            }
        )
        return code
    print(
        f"replayed {target['role']}/{target['session']} context {target['context_id']} message {target['index']}"
    )
    for row in rows:
        if not row["ok"]:
            kept = f"fork {row['fork_id']}" if row["saved"] else "nothing saved: the model was never reached"
            print(f"run {row['sample']}: FAILED: {row['error']}  ({kept})")
            continue
        text = row["text"] or " ".join(f"{name}({args})" for name, args in row["tool_calls"])
        distance = row["diff"]["distance"] if row["diff"] else None
        noise = f", {row['noise']} the noise band" if row["noise"] else ""
        print(f"run {row['sample']}: fork {row['fork_id']}  distance to the original {distance}{noise}")
        print(f"  {text}")
    if band is not None:
        print(
            f"noise band over {band.samples} unchanged runs: agreement {band.agreement_rate:.0%}, "
            f"distance up to {band.upper:.3f}"
        )
    for run in baseline:
        if not run.ok:
            print(f"noise run {run.sample}: FAILED: {run.error}")
    if args.check and beyond:
        print(
            f"check failed: {len(beyond)} of {len(rows)} outputs differ from the original by more than {threshold}"
        )
    return code


def cmd_diff(args: argparse.Namespace) -> int:
    store = open_store(args)
    a, b = resolve_reference(store, args.a), resolve_reference(store, args.b)
    if _is_branch(a) or _is_branch(b):
        return _diff_branches(args, a, b)
    if a.names_output != b.names_output:
        what = {True: "an output", False: "a whole context"}
        raise UsageError(
            f"{args.a} names {what[a.names_output]} and {args.b} {what[b.names_output]}: compare two "
            "outputs (CONTEXT@INDEX, or replay forks) or two contexts (without @INDEX)"
        )
    if a.names_output:
        first, second = _output(a), _output(b)
        result = diff_outputs(first, second).as_dict()
        if args.json:
            emit_json({"kind": "outputs", **result})
            return 0
        print("identical" if result["identical"] else f"distance {result['distance']}")
        words = output_words(first, second)  # tool calls as text, as the page shows them
        if any(op != "equal" for op, _ in words):
            print_words(words)
        for sentence in output_sentences(first, second, ("A", "B")):  # what the page says
            print(f"- {sentence}")
        if result["usage_delta"]:
            print(f"usage delta: {result['usage_delta']}")
        return 0
    contexts = diff_contexts(a.context, b.context)
    if args.json:
        emit_json({"kind": "contexts", **contexts.as_dict()})
        return 0
    if contexts.first_divergence is None:
        print("the contexts hold the same messages")
        return 0
    print(
        f"first divergence at message {contexts.first_divergence} (turn {contexts.turn}); {contexts.summary}"
    )
    for row in contexts.rows:
        if row["same"]:
            continue
        left, right = row["a"], row["b"]
        where = " | ".join(
            f"{side} #{row[key]} {(message or {}).get('role', '-')}"
            for side, key, message in (("A", "a_index", left), ("B", "b_index", right))
            if row[key] is not None
        )
        print(f"{where}: {row_changes(left, right)}")  # the page's sentence for the row
        if row["words"]:
            print_words(row["words"], "  ")
    return 0


def _is_branch(ref: Any) -> bool:
    """A re-run or continued branch named as a whole: it has no single output."""
    mark = mark_of(ref.context)
    return ref.index is None and mark is not None and mark.kind in ("rerun", "continue")


def _mark_start(context: Context) -> int:
    mark = mark_of(context)
    return mark.of_index or 0 if mark is not None else 0


def _diff_branches(args: argparse.Namespace, a: Any, b: Any) -> int:
    """Two branches (a re-run against the context it re-ran, or two re-runs) step by step,
    from where the first of them started, as the Replay page aligns them."""
    starts = [(_mark_start(r.context) if _is_branch(r) else len(r.context.messages)) for r in (a, b)]
    start = min(starts)
    diff = diff_branches(branch_turns(a.context, start), branch_turns(b.context, start), names=("A", "B"))
    if args.json:
        emit_json({"kind": "branches", "from_message": start, **diff.as_dict()})
        return 0
    print(f"branches from message {start}: distance {diff.distance:.3f}")
    print(f"first divergence: {diff.divergence}" if diff.first_divergence is not None else diff.divergence)
    if diff.final_words:
        print_words(diff.final_words, "final answers: ")
    return 0


def _output(ref: Any) -> Output:
    message = ref.message
    if message is None:
        raise SoapError(f"context {ref.context.id} has no output at {ref.index}")
    return Output.of(message)
