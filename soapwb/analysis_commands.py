"""``soapwb tokens`` and ``soapwb compact``: token budgets and the compaction lab."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from analysis import (
    CATEGORIES,
    LeastUsed,
    call_budgets,
    chain_budget,
    compare,
    history_of,
    lab_strategies,
    measure,
    message_budgets,
    model_summarizer,
    ran_with,
)
from analysis._settings import session_spec
from soapwb.common import (
    SESSION_HELP,
    Progress,
    UsageError,
    add_progress_option,
    emit_json,
    format_table,
    open_store,
    store_command,
)


def register(commands: Any) -> None:
    from soapwb.fleet_commands import add_engine_options
    from soapwb.replay_commands import add_endpoint_options

    tokens = commands.add_parser("tokens", help="context size per LLM call, its make-up and compactions")
    tokens.add_argument("session", metavar="SESSION", help=SESSION_HELP)
    store_command(tokens, cmd_tokens)

    compact = commands.add_parser(
        "compact", help="simulate compaction strategies over a session; measure drift"
    )
    compact.add_argument("session", metavar="SESSION", nargs="?", help=f"{SESSION_HELP} (or --sessions)")
    compact.add_argument(
        "--sessions",
        metavar="QUERY",
        help="instead of SESSION: every session the query selects (all, role:NAME, or a text as "
        "search finds it), one partition each on --engine",
    )
    compact.add_argument(
        "--strategy",
        action="append",
        default=[],
        metavar="SPEC",
        help="rolling-tokens:T[:KEEP], rolling-messages:N, strip-thinking, "
        "summarize[:T[:KEEP_LAST]], least-used[:T[:KEEP]] or none (repeatable); a kind without "
        "numbers takes the session's own (the ones it ran with, else sized to it), as the "
        "Compaction page does. least-used drops the messages the session's attributed answers "
        "(soapwb attribute) leaned on least, oldest first among equals",
    )
    compact.add_argument(
        "--drift-at",
        metavar="N,...",
        default="",
        help="re-run the model at these calls under each strategy and compare the answers",
    )
    compact.add_argument(
        "--noise",
        type=int,
        default=2,
        metavar="K",
        help="with --drift-at: re-send each call K times exactly as the session sent it, for the "
        "noise band drift is judged against (default 2; 0: no band)",
    )
    add_endpoint_options(compact)  # the same bounded calls as replay and rerun
    add_engine_options(compact)
    add_progress_option(compact)
    store_command(compact, cmd_compact)


def cmd_tokens(args: argparse.Namespace) -> int:
    store = open_store(args)
    session = store.load_session(args.session, require_active=False)
    budgets = call_budgets(session)
    messages = (
        message_budgets(session.active_context) if session.active_context_id in session.contexts else []
    )
    chain = chain_budget(store, args.session)
    if args.json:
        emit_json(
            {
                "session": session.uuid,
                "role": session.role,
                "calls": [b.as_dict() for b in budgets],
                "messages": [m.as_dict() for m in messages],
                "chain": [c.as_dict() for c in chain],
            }
        )
        return 0
    print(
        f"{session.role}/{session.uuid}: {len(budgets)} calls "
        f"({'recorded' if budgets and budgets[0].recorded else 'reconstructed from the contexts'})"
    )
    rows: list[tuple[object, ...]] = []
    for b in budgets:
        for event in b.compactions_before:
            rows.append(
                ("", "compaction", f"{event.tokens_before} -> {event.tokens_after}", "", event.child_id, "")
            )
        share = ", ".join(f"{k} {b.makeup[k]}" for k in CATEGORIES if b.makeup.get(k))
        rows.append(
            (b.number, b.context_id[:8], b.tokens, b.context_limit, f"message {b.message_index}", share)
        )
    print(format_table(("CALL", "CONTEXT", "TOKENS", "LIMIT", "AT", "MAKE-UP"), rows))
    if messages:
        print(f"\nactive context {session.active_context_id}:")
        print(
            format_table(
                ("#", "ROLE", "TOKENS", "CUMULATIVE", "CACHED"),
                [
                    (m.index, m.role, m.tokens, m.cumulative, f"{m.cached} (stale)" if m.stale else m.cached)
                    for m in messages
                ],
            )
        )
    if len(chain) > 1:
        print("\ninvocation chain:")
        print(
            format_table(
                ("ROLE", "SESSION", "DEPTH", "CALLS", "PROMPT TOKENS", "COMPLETION TOKENS"),
                [(c.role, c.session, c.depth, c.calls, c.prompt_tokens, c.completion_tokens) for c in chain],
            )
        )
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    if args.noise < 0:
        raise UsageError("--noise takes K >= 0")
    if args.sessions is not None:
        from soapwb.fleet_commands import cmd_compact_sessions

        return cmd_compact_sessions(args)
    if args.session is None:
        raise UsageError("compact takes SESSION, or --sessions QUERY")
    store = open_store(args)
    session = store.load_session(args.session, require_active=False)
    history = history_of(session)
    ran = ran_with(session)
    try:
        given = [session_spec(spec, history, ran) for spec in args.strategy]
        specs = given if "none" in given else ["none", *given]  # the whole history beside them
        strategies = lab_strategies(session, specs, store=store)
        drift_at = [int(n) for n in args.drift_at.split(",") if n.strip()]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    band = None
    results: list[Any] = []
    if drift_at:
        from soapwb.common import endpoint_for

        progress = Progress(args)
        with endpoint_for(args) as endpoint:
            progress.say(f"measuring drift at calls {args.drift_at} on {endpoint.base_url}")
            rows, band, results = measure(
                store,
                session,
                strategies,
                drift_at,
                endpoint,
                model_summarizer(endpoint),
                noise_samples=args.noise,
                on_step=lambda done, total, step: progress.status(f"run {done + 1}/{total}: {step.label}"),
            )
            progress.status(f"{len(results)} runs: done", last=True)
    else:
        rows = compare(store, session, strategies)
    failures = [run for _, run in results if run.error]
    if args.json:
        emit_json(
            {
                "strategies": [row.as_dict() for row in rows],
                "noise_band": band.as_dict() if band is not None else None,
                "verdicts": {r.strategy: band.verdict(r.drift) for r in rows if band and r.drift is not None},
                "failed_runs": [dataclasses.asdict(run) for run in failures],
            }
        )
        return 1 if failures else 0
    if ran is not None:
        print(ran.note)
    for strategy in strategies:
        if isinstance(strategy, LeastUsed):
            print(strategy.note())
    print(
        format_table(
            ("STRATEGY", "PEAK TOKENS", "TOKENS SENT", "COMPACTIONS", "TOKENS SAVED", "DRIFT", "VS NOISE"),
            [
                (
                    r.strategy,
                    r.peak_tokens,
                    r.tokens_sent,
                    r.compactions,
                    r.tokens_saved,
                    "-" if r.drift is None else f"{r.drift:.3f}",
                    band.verdict(r.drift) if band is not None and r.drift is not None else "-",
                )
                for r in rows
            ],
        )
    )
    if drift_at:
        print(
            f"noise band {band.low:.3f}-{band.high:.3f} over {band.samples} unchanged re-runs of the calls as sent"
            if band is not None
            else "no noise band: it needs two unchanged re-runs with an answer (--noise 2 or more)"
        )
    for run in failures:
        print(f"drift run {run.strategy} at call {run.call} FAILED: {run.error}")
    return 1 if failures else 0
