"""``soapwb gen-store``: write a deterministic, realistic store for benchmarks and scale tests.

The generator is imported inside the handler: every other command starts without it.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from soapwb.common import UsageError, emit_json, format_table, store_command


def register(commands: Any) -> None:
    gen = commands.add_parser(
        "gen-store",
        help="write a generated store (deterministic from --seed) for benchmarks",
        description="Write a new store of sessions as our runtime writes them: forks, invocation "
        "chains, recorded calls that `soapwb verify` matches. The same arguments write the same bytes.",
    )
    gen.add_argument("--sessions", type=int, default=100, metavar="N", help="sessions to write (default 100)")
    gen.add_argument(
        "--messages",
        type=int,
        default=20,
        metavar="M",
        help="mean messages of an active context (default 20)",
    )
    gen.add_argument(
        "--fork-rate",
        type=float,
        default=0.2,
        metavar="F",
        help="share of sessions compaction forks (default 0.2)",
    )
    gen.add_argument(
        "--chain-depth",
        type=int,
        default=3,
        metavar="D",
        help="most objects in one invocation chain; 1: no object invokes another (default 3)",
    )
    gen.add_argument(
        "--seed", type=int, default=0, metavar="S", help="the seed everything is drawn from (default 0)"
    )
    gen.add_argument(
        "--long-messages",
        type=int,
        metavar="K",
        help="make the first session's active context exactly K messages (no forks, no chain)",
    )
    gen.add_argument(
        "--no-token-counts",
        action="store_true",
        help="store no token counts (the runtime stores one per message)",
    )
    gen.add_argument(
        "--call-log-limit",
        type=int,
        default=200,
        metavar="L",
        help="record no call whose request holds more than L messages (default 200)",
    )
    gen.add_argument(
        "--fsync", action="store_true", help="fsync every file, as a live store's writes do (slower)"
    )
    gen.add_argument(
        "--processes",
        type=int,
        metavar="P",
        help="processes to share the sessions out over (default: up to 2)",
    )
    store_command(gen, cmd_gen_store)


def _check(args: argparse.Namespace) -> None:
    if not args.store:
        raise UsageError("no store given: pass --store DIR (a new or empty folder) or set SOAPWB_STORE")
    if args.sessions < 1 or args.messages < 3:
        raise UsageError("--sessions must be at least 1 and --messages at least 3")
    if not 0.0 <= args.fork_rate <= 1.0:
        raise UsageError("--fork-rate must lie in [0, 1]")
    if not 1 <= args.chain_depth <= 8:
        raise UsageError("--chain-depth must lie in 1..8 (a chain's objects have distinct roles, of 8)")
    if args.long_messages is not None and args.long_messages < 3:
        raise UsageError("--long-messages must be at least 3")
    if args.call_log_limit < 0 or (args.processes is not None and args.processes < 1):
        raise UsageError("--call-log-limit must be at least 0 and --processes at least 1")


def cmd_gen_store(args: argparse.Namespace) -> int:
    _check(args)
    from soap_gen import generate_store

    started = time.perf_counter()
    summary = generate_store(
        args.store,
        sessions=args.sessions,
        messages=args.messages,
        fork_rate=args.fork_rate,
        chain_depth=args.chain_depth,
        seed=args.seed,
        long_messages=args.long_messages,
        token_counts=not args.no_token_counts,
        call_log_limit=args.call_log_limit,
        fsync=args.fsync,
        processes=args.processes,
    )
    seconds = round(time.perf_counter() - started, 3)
    if args.json:
        emit_json({**summary.as_dict(), "seconds": seconds})
        return 0
    figures = summary.as_dict()
    print(format_table(("WHAT", "COUNT"), [(k, v) for k, v in figures.items() if k not in ("root", "seed")]))
    print(f"wrote {summary.root} (seed {summary.seed}) in {seconds:.1f} s")
    return 0
