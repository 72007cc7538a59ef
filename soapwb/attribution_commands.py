"""``soapwb attribute``: which messages of its request a model answer depends on."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from typing import Any

from analysis import (
    LARGE_RUN_TOKENS,
    UNITS,
    Attribution,
    attribute,
    estimate_tokens,
    save_attribution,
)
from replay import ServerScorer
from soapwb.common import (
    Progress,
    UsageError,
    add_progress_option,
    emit_json,
    format_table,
    open_store,
    store_command,
)
from soapwb.replay_commands import add_target, output_target


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
        "--unit", choices=UNITS, default="message", help="what is ablated: each message of the request"
    )
    cmd.add_argument("--seed", type=int, default=0, help="the ablations' random seed (default 0)")
    cmd.add_argument(
        "--base-url",
        help="a local model server (`python -m local_model`) to score on (default: one started for the run)",
    )
    cmd.add_argument("--yes", action="store_true", help="start a large run without asking")
    store_command(cmd, cmd_attribute)


@contextlib.contextmanager
def scorer_for(args: argparse.Namespace) -> Iterator[ServerScorer]:
    """The server asked for, else a local model started for the run (default batching:
    every request is scored from a fresh state, so a seed repeats its numbers)."""
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
    store = open_store(args)
    session = store.load_session(args.session, require_active=args.context is None)
    found = output_target(args, session)
    calls, tokens = estimate_tokens(found, args.ablations)
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
            on_progress=lambda done, total: progress.bar(done, total, "scored"),
        )
    save_attribution(store, session, result)
    if args.json:
        emit_json(result.as_dict())
        return 0
    print_attribution(result)
    return 0


def print_attribution(result: Attribution) -> None:
    print(f"message {result.index} of context {result.context_id}: {result.summary()}")
    rows = [
        (f"{round(w, 2) + 0.0:+.2f}", u.index, u.kind, u.label, u.preview[:60]) for u, w in result.ranked()
    ]
    print(format_table(("WEIGHT", "AT", "KIND", "UNIT", "TEXT"), rows))
    print(result.trust())
    print(
        f"{result.calls} scored requests in {result.seconds:.1f} s ({result.method}); "
        f"saved as attribution {result.id}"
    )
