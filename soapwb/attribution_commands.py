"""``soapwb attribute`` and ``soapwb isolate``: which messages of its request a model
answer depends on, and the smallest set of them that changes it."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from typing import Any

from analysis import (
    CHECK_HELP,
    LARGE_RUN_TOKENS,
    NOISE_RUNS,
    UNITS,
    Attribution,
    Check,
    IsolateError,
    Isolation,
    Scorer,
    Scores,
    attribute,
    estimate_tokens,
    isolate,
    save_attribution,
    save_isolation,
)
from fleet import AttributionPartition, attribution_task, engine_scores
from replay import Materialized, Overrides, RegenerateScorer, ServerScorer
from soapwb.common import (
    Progress,
    UsageError,
    add_progress_option,
    emit_json,
    endpoint_for,
    format_table,
    open_store,
    store_command,
)
from soapwb.fleet_commands import add_engine_options, run_on_engine
from soapwb.replay_commands import add_endpoint_options, add_target, output_target


def register(commands: Any) -> None:
    cmd = commands.add_parser(
        "attribute",
        help="score each message of the request behind a model answer by how much the answer depends on it",
        description="Ablates random halves of the request's messages, scores the original answer under "
        "each (its log-probability on the local model, teacher-forced) and fits a sparse linear "
        "surrogate whose weights rank the messages (ContextCite). The top-k drop and the LDS say how "
        "far to trust the ranking. The result is saved with the session.",
    )
    add_progress_option(cmd)
    add_target(cmd)
    cmd.add_argument(
        "--ablations", type=int, default=32, metavar="K", help="random ablations to fit on (default 32)"
    )
    cmd.add_argument(
        "--unit",
        choices=UNITS,
        default="message",
        help="what is ablated: each message of the request (default); each text part and tool result of "
        "a message; or each sentence of them. A tool call, the tool definitions or an image stay whole",
    )
    cmd.add_argument("--seed", type=int, default=0, help="the ablations' random seed (default 0)")
    cmd.add_argument(
        "--method",
        choices=("score", "regenerate"),
        default="score",
        help="score: the answer's log-probability, teacher-forced on a local model server "
        "(--base-url names one started with `python -m local_model`; default: one started for the run). "
        "regenerate: the weaker method for any OpenAI-compatible endpoint, hosted ones included "
        "(--base-url, else $OPENAI_BASE_URL, else the local model): each request is sent again and the "
        f"new answer compared with the original, with {NOISE_RUNS} unchanged re-runs for the noise band",
    )
    cmd.add_argument(
        "--temperature",
        type=float,
        default=None,
        metavar="T",
        help="with --method regenerate: the temperature of every request (default: the request's own; "
        "0 makes unchanged re-runs agree where the endpoint is deterministic, and the noise band narrow)",
    )
    add_endpoint_options(cmd)
    add_engine_options(
        cmd, what="the scored requests (split into one partition per worker, in two batches)", default=None
    )
    cmd.add_argument("--yes", action="store_true", help="start a large run without asking")
    store_command(cmd, cmd_attribute)

    iso = commands.add_parser(
        "isolate",
        help="find the smallest set of messages whose removal flips a check of the model's answer",
        description="Re-runs the model with parts of the request removed (delta debugging, ddmin), in the "
        "order of the answer's latest attribution, until it finds a smallest set of messages whose removal "
        "flips CHECK (with --keep: that alone still give its usual result). Unchanged re-runs first say "
        "the check's usual result and how often it flips by chance. Every run is saved as a fork.",
    )
    add_progress_option(iso)
    add_target(iso)
    iso.add_argument("--check", required=True, metavar="CHECK", help=CHECK_HELP)
    iso.add_argument("--keep", action="store_true", help="the smallest set that alone keeps the usual result")
    iso.add_argument(
        "--noise",
        type=int,
        default=3,
        metavar="K",
        help="unchanged re-runs for the check's usual result (default 3)",
    )
    iso.add_argument(
        "--max-tokens", type=int, default=None, metavar="N", help="per run (default: the request's, else 256)"
    )
    iso.add_argument(
        "--temperature", type=float, default=None, metavar="T", help="per run (default: the request's)"
    )
    add_endpoint_options(iso)
    store_command(iso, cmd_isolate)


@contextlib.contextmanager
def scorer_for(args: argparse.Namespace) -> Iterator[Scorer]:
    """For ``--method score``: the server asked for, else a local model started for the
    run (default batching: every request is scored from a fresh state, so a seed repeats
    its numbers). For ``regenerate``: the endpoint asked for, as replay finds one."""
    if args.method == "regenerate":
        with endpoint_for(args) as endpoint:
            yield RegenerateScorer(endpoint, temperature=args.temperature)
        return
    base_url = args.base_url or os.environ.get("SOAPWB_SCORING_URL")
    with contextlib.ExitStack() as stack:
        if not base_url:
            from local_model import LocalModelServer

            base_url = stack.enter_context(LocalModelServer(deterministic=False)).base_url
        scorer = stack.enter_context(ServerScorer(base_url))
        scorer.check()
        yield scorer


def cmd_attribute(args: argparse.Namespace) -> int:
    if args.ablations < 2:
        raise UsageError("--ablations must be at least 2")
    if args.temperature is not None and args.method != "regenerate":
        raise UsageError("--temperature applies to --method regenerate: scoring reads the answer as it is")
    store = open_store(args)
    session = store.load_session(args.session, require_active=args.context is None)
    found = output_target(args, session)
    calls, tokens = estimate_tokens(found, args.ablations, noisy=args.method == "regenerate", unit=args.unit)
    progress = Progress(args)
    if tokens > LARGE_RUN_TOKENS and not args.yes:
        raise UsageError(
            f"this attribution scores {calls} requests, about {tokens:,} prompt tokens; "
            "pass --yes to run it, or fewer --ablations"
        )
    with scorer_for(args) as scorer:
        progress.say(
            f"attributing message {found.index} of {found.context_id} on {scorer.base_url}: "
            f"{calls} scored requests, about {tokens:,} prompt tokens"
        )
        result = attribute(
            session,
            found,
            scorer,
            ablations=args.ablations,
            seed=args.seed,
            unit=args.unit,
            on_progress=lambda done, total: progress.bar(done, total, "scored"),
            scores=None if args.engine is None else on_engine(args, found, scorer.base_url),
        )
    save_attribution(store, session, result)
    if args.json:
        emit_json(result.as_dict())
        return 0
    print_attribution(result)
    return 0


def on_engine(args: argparse.Namespace, found: Materialized, base_url: str) -> Scores:
    """The scored requests of ``attribute --engine``: one partition per worker a batch,
    each worker scoring on ``base_url`` (the server the command started, or the one named;
    :func:`run_on_engine` checks ``--workers``)."""
    template = AttributionPartition(
        session=args.session,
        context=args.context,
        at=args.at,
        checkout=str(args.openpoke_root) if getattr(args, "openpoke_root", None) else None,
        request_hash=found.request_hash,
        unit=args.unit,
        method=args.method,
        base_url=base_url,
        temperature=args.temperature,
        removals=(),
    )
    return engine_scores(
        template,
        args.workers or os.cpu_count() or 1,
        lambda parts: run_on_engine(args, parts, attribution_task, None),
    )


def print_attribution(result: Attribution) -> None:
    print(f"message {result.index} of context {result.context_id}: {result.summary()}")
    rows = [(f"{round(w, 2) + 0.0:+.2f}", u.at, u.kind, u.label, u.preview[:60]) for u, w in result.ranked()]
    print(format_table(("WEIGHT", "AT", "KIND", "UNIT", "TEXT"), rows))
    print(result.trust())
    print(
        f"{result.calls} scored requests in {result.seconds:.1f} s ({result.method}); "
        f"saved as attribution {result.id}"
    )


def cmd_isolate(args: argparse.Namespace) -> int:
    try:
        check = Check.parse(args.check)
    except IsolateError as exc:
        raise UsageError(str(exc)) from None
    if args.noise < 1:
        raise UsageError("--noise must be at least 1: the check's usual result comes from unchanged runs")
    store = open_store(args)
    session = store.load_session(args.session, require_active=args.context is None)
    found = output_target(args, session)
    max_tokens = args.max_tokens or found.parameters.get("max_tokens") or 256
    progress = Progress(args)
    with endpoint_for(args) as endpoint:
        progress.say(
            f"isolating {check} at message {found.index} of {found.context_id} on {endpoint.base_url}: "
            f"{args.noise} unchanged runs, then ddmin over {len(found.messages)} messages"
        )
        result = isolate(
            store,
            session,
            found,
            endpoint,
            check,
            keep=args.keep,
            noise=args.noise,
            base=Overrides(max_tokens=int(max_tokens), temperature=args.temperature),
            on_progress=lambda runs: progress.status(f"{runs} runs"),
        )
    save_isolation(store, session, result)
    if args.json:
        emit_json(result.as_dict())
    else:
        print_isolation(result)
    return 0 if result.cause is not None else 1


def print_isolation(result: Isolation) -> None:
    print(f"message {result.index} of context {result.context_id}: {result.summary()}")
    flipped = sum(1 for t in result.noise if t.holds is not None and t.holds != result.usual)
    print(
        f"the check's usual result: {'holds' if result.usual else 'does not hold'} "
        f"({flipped} of {len(result.noise)} unchanged runs disagreed: {result.chance:.0%} by chance)"
    )
    rows = [
        (
            ", ".join(map(str, t.removed)),
            "failed" if t.holds is None else ("holds" if t.holds else "does not hold"),
            (t.fork_id or "-")[:8],
            (t.error or t.text).replace("\n", " ")[:60],
        )
        for t in result.trials
    ]
    print(format_table(("REMOVED", "CHECK", "FORK", "ANSWER"), rows))
    print(
        f"{result.calls} model calls ({len(result.noise)} unchanged, {len(result.trials)} with parts removed; "
        f"one-by-one removal takes {result.one_by_one}); split in the order of {result.ordered_by}"
    )
    if result.id is not None:
        print(f"kept as isolation {result.id} (the Replay page shows it with the answer)")
