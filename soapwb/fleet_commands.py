"""The engine options of ``verify``, ``replay --suite``, ``rerun --suite`` and
``compact --sessions``, the ``suite`` command, and the runs of the batch commands on
:mod:`fleet`. The commands keep their own modules; what is about partitions is here."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fleet import (
    ENGINES,
    EngineError,
    Location,
    PartitionResult,
    Task,
    by_session,
    read_suite,
    select_sessions,
    suite_entries,
    write_suite,
)
from replay import ToolModes
from soap_core import default_storage_options, is_remote
from soapwb.common import (
    MIB,
    Progress,
    UsageError,
    emit_json,
    endpoint_for,
    format_table,
    open_store,
    store_command,
)

SESSIONS_HELP = "the sessions: all, role:NAME, or a text (the sessions with a message containing it, as search finds them)"


def register(commands: Any) -> None:
    suite = commands.add_parser(
        "suite", help="write a suite (JSON Lines) of every recorded call of the sessions a query selects"
    )
    suite.add_argument("--sessions", required=True, metavar="QUERY", help=SESSIONS_HELP)
    suite.add_argument("--out", type=Path, metavar="FILE", help="write to FILE (default: stdout)")
    store_command(suite, cmd_suite)


def add_engine_options(
    parser: argparse.ArgumentParser,
    *,
    what: str = "partitions (one per session)",
    default: str | None = "local",
) -> None:
    """Where the partitions run: the same four options on every batch command (``default``
    None: in the command's own process unless ``--engine`` is given)."""
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default=default,
        help=f"run {what} on a local process pool, a Ray cluster or a Dask cluster; the result is the "
        f"same ({'default local' if default else 'default: in this process'})",
    )
    parser.add_argument(
        "--workers", type=int, metavar="N", help="worker processes (default: this machine's cores)"
    )
    parser.add_argument(
        "--address",
        metavar="ADDR",
        help="an existing cluster: ray://HOST:PORT or HOST:PORT for Ray, tcp://HOST:PORT for Dask "
        "(default: a local cluster of --workers workers, started for the run)",
    )
    parser.add_argument(
        "--partition-retries",
        type=int,
        default=2,
        metavar="N",
        help="run a partition whose worker failed or died again up to N times, then report it as "
        "failed with its error (default 2)",
    )


def run_on_engine(
    args: argparse.Namespace, partitions: Mapping[str, Any], task: Task, unit: str | None
) -> list[PartitionResult]:
    """``task`` over ``partitions`` on the engine the options name, with a progress bar
    counting ``unit`` (None: no bar, the command draws its own)."""
    from fleet import run_partitions

    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers must be at least 1")
    progress = Progress(args)
    try:
        return run_partitions(
            store_location(str(args.store)),
            partitions,
            task,
            engine=args.engine,
            workers=args.workers,
            address=args.address,
            retries=args.partition_retries,
            on_progress=None if unit is None else lambda done, total: progress.bar(done, total, unit),
        )
    except EngineError as exc:
        raise UsageError(str(exc)) from None


def store_location(store: str) -> Location:
    """Where workers find the store: a URL as given, a path made absolute (a Ray
    worker does not run in the folder the command was started in), with the command's
    ``--storage-option`` flags."""
    if is_remote(store):
        return Location(store, default_storage_options())
    return Location(store if "://" in store else os.path.abspath(store))


def print_failed_partitions(failed: list[dict[str, Any]]) -> None:
    """The partitions that failed, on stderr (also with --json: a person reads it)."""
    for item in failed:
        print(
            f"FAILED partition {item['partition']} after {item['attempts']} attempts: {item['error']}",
            file=sys.stderr,
        )


def single_model(args: argparse.Namespace) -> str | None:
    """The one --model of a command on one call (several are for --suite)."""
    model: str | list[str] | None = args.model
    if not isinstance(model, list):
        return model
    if len(model) > 1:
        raise UsageError("several --model are for --suite: one call goes to one model")
    return model[0]


def suite_partitions(args: argparse.Namespace) -> dict[str, list[Any]]:
    """The suite file's entries, one partition per session."""
    if args.session is not None:
        raise UsageError("--suite names the calls itself: give no SESSION with it")
    return by_session(read_suite(args.suite))


def cmd_suite(args: argparse.Namespace) -> int:
    store = open_store(args)
    text = write_suite(suite_entries(store, select_sessions(store, args.sessions)))
    if args.out is None:
        print(text, end="")
        return 0
    try:
        args.out.write_text(text, "utf-8")
    except OSError as exc:
        raise UsageError(f"{args.out}: cannot write the suite: {exc.strerror or exc}") from None
    return 0


def suite_plan(args: argparse.Namespace, base_url: str, models: tuple[str | None, ...]) -> Any:
    """What every partition of a replay or re-run suite shares."""
    from fleet import ReplayPlan

    if args.edit or args.drop or args.system_prompt_file is not None:
        raise UsageError(
            "--edit, --drop and --system-prompt-file name messages of one call: not with --suite"
        )
    if args.samples != 1 or args.noise:
        raise UsageError("--samples and --noise are for one call: a suite runs each call once")
    return ReplayPlan(
        (base_url,),
        models,
        args.temperature,
        args.seed,
        args.max_tokens,
        args.threshold if args.threshold is not None else 0.0,
        getattr(args, "verify", None),
        args.timeout,
        args.retries,
        max(1, int(args.max_response_mb * MIB)),
    )


def cmd_replay_suite(args: argparse.Namespace) -> int:
    """Every call of the suite re-sent to each --model; a table per model."""
    from fleet import ReplayPartition, replay_report, replay_task

    groups = suite_partitions(args)
    models: tuple[str | None, ...] = tuple(args.model or [None])
    open_store(args)  # refuses a folder that is no store before a model starts
    with endpoint_for(args) as endpoint:
        plan = suite_plan(args, endpoint.base_url, models)
        partitions = {
            ref: ReplayPartition(plan, ref, tuple(entries), n)
            for n, (ref, entries) in enumerate(groups.items())
        }
        Progress(args).say(
            f"replaying {sum(map(len, groups.values()))} calls x {len(models)} models on {endpoint.base_url}"
        )
        report = replay_report(run_on_engine(args, partitions, replay_task, "sessions"), models)
    report["threshold"] = plan.threshold
    rows = report["calls"]
    failing = [
        r
        for r in rows
        if not r["ok"]
        or (args.check and r["check"] is False)
        or (r["verify"] is not None and r["verify"]["verdict"] != "pass")
    ]
    code = 1 if failing or report["failed_partitions"] else 0
    if args.json:
        emit_json(report)
        print_failed_partitions(report["failed_partitions"])
        return code
    print_replay_table(report)
    for row in failing[:20]:
        why = row["error"] or (row["verify"] or {}).get("detail") or f"distance {row['distance']}"
        print(f"{row['model']}  {row['session']} context {row['context']} at {row['at']}: {why}")
    print_failed_partitions(report["failed_partitions"])
    return code


def print_replay_table(report: dict[str, Any]) -> None:
    from fleet import mean_latency

    rows = []
    for model in report["models"]:
        latency = mean_latency(report["calls"], model["model"])
        rows.append(
            (
                model["model"],
                model["calls"],
                model["check_passed"],
                model["verify_passed"],
                model["errors"],
                None if latency is None else f"{latency:.3f} s",
            )
        )
    headers = ("MODEL", "CALLS", "CHECK PASSED", "VERIFY PASSED", "ERRORS", "MEAN LATENCY")
    print(format_table(headers, rows))


def cmd_rerun_suite(args: argparse.Namespace, modes: ToolModes) -> int:
    """Every call of the suite re-run to the end of its turn, one branch each."""
    from fleet import RerunPartition, rerun_report, rerun_task

    groups = suite_partitions(args)
    if args.code is not None:
        raise UsageError("--code is for one re-run: not with --suite")
    open_store(args)
    with endpoint_for(args) as endpoint:
        plan = suite_plan(args, endpoint.base_url, (single_model(args),))
        partitions = {
            ref: RerunPartition(plan, ref, tuple(entries), n, modes)
            for n, (ref, entries) in enumerate(groups.items())
        }
        report = rerun_report(run_on_engine(args, partitions, rerun_task, "sessions"))
    code = (
        1
        if report["failed"] or report["failed_partitions"] or (args.check and report["beyond_threshold"])
        else 0
    )
    if args.json:
        emit_json(report)
        print_failed_partitions(report["failed_partitions"])
        return code
    for row in report["reruns"]:
        outcome = f"FAILED: {row['error']}" if not row["ok"] else f"branch distance {row['distance']:.3f}"
        print(
            f"{row['session']} context {row['context']} at {row['at']}: {row['calls']} model calls, {outcome}"
        )
    print_failed_partitions(report["failed_partitions"])
    return code


def cmd_compact_sessions(args: argparse.Namespace) -> int:
    """The compaction table of every session the query selects."""
    from analysis import parse_strategy
    from fleet import CompactPartition, compact_report, compact_task

    if args.session is not None or args.drift_at:
        raise UsageError(
            "--sessions takes no SESSION and no --drift-at: it compares strategies over sessions"
        )
    for spec in args.strategy:  # a bad spec is the user's, before any worker starts
        if ":" in spec:
            try:
                parse_strategy(spec)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
    store = open_store(args)
    selected = select_sessions(store, args.sessions)
    partitions = {s.ref: CompactPartition(s.ref, tuple(args.strategy)) for s in selected}
    report = compact_report(run_on_engine(args, partitions, compact_task, "sessions"))
    code = 1 if report["failed_partitions"] else 0
    if args.json:
        emit_json(report)
        print_failed_partitions(report["failed_partitions"])
        return code
    print(
        format_table(
            ("SESSION", "STRATEGY", "PEAK TOKENS", "TOKENS SENT", "COMPACTIONS", "TOKENS SAVED"),
            [
                (
                    r["session"],
                    r["strategy"],
                    r["peak_tokens"],
                    r["tokens_sent"],
                    r["compactions"],
                    r["tokens_saved"],
                )
                for r in report["strategies"]
            ],
        )
    )
    print_failed_partitions(report["failed_partitions"])
    return code
