"""``soapwb tokens`` and ``soapwb compact``: token budgets and the compaction lab."""

from __future__ import annotations

import argparse
from typing import Any

from analysis import (
    CATEGORIES,
    call_budgets,
    chain_budget,
    compare,
    message_budgets,
    model_summarizer,
    parse_strategy,
)
from soapwb.common import SESSION_HELP, UsageError, add_store_options, emit_json, format_table, open_store


def register(commands: Any) -> None:
    tokens = commands.add_parser("tokens", help="context size per LLM call, its make-up and compactions")
    tokens.add_argument("session", metavar="SESSION", help=SESSION_HELP)
    add_store_options(tokens)
    tokens.set_defaults(handler=cmd_tokens)

    compact = commands.add_parser(
        "compact", help="simulate compaction strategies over a session; measure drift"
    )
    compact.add_argument("session", metavar="SESSION", help=SESSION_HELP)
    compact.add_argument(
        "--strategy",
        action="append",
        default=[],
        metavar="SPEC",
        help="rolling-tokens:T[:KEEP], rolling-messages:N, strip-thinking, "
        "summarize[:T[:KEEP_LAST]] or none (repeatable)",
    )
    compact.add_argument(
        "--drift-at",
        metavar="N,...",
        default="",
        help="re-run the model at these calls under each strategy and compare the answers",
    )
    compact.add_argument(
        "--base-url", help="endpoint for drift runs (default: $OPENAI_BASE_URL, else the local model)"
    )
    compact.add_argument("--timeout", type=float, default=120.0)
    compact.add_argument("--retries", type=int, default=2)
    add_store_options(compact)
    compact.set_defaults(handler=cmd_compact)


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
    rows = []
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
    try:
        specs = args.strategy if "none" in args.strategy else ["none", *args.strategy]  # the baseline first
        strategies = [parse_strategy(s) for s in specs]
        drift_at = [int(n) for n in args.drift_at.split(",") if n.strip()]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    store = open_store(args)
    session = store.load_session(args.session, require_active=False)
    if drift_at:
        from soapwb.replay_commands import endpoint_for

        with endpoint_for(args) as endpoint:
            rows = compare(store, session, strategies, drift_at, endpoint, model_summarizer(endpoint))
    else:
        rows = compare(store, session, strategies)
    if args.json:
        emit_json([row.as_dict() for row in rows])
        return 0
    print(
        format_table(
            ("STRATEGY", "PEAK TOKENS", "TOKENS SENT", "COMPACTIONS", "TOKENS SAVED", "DRIFT"),
            [
                (
                    r.strategy,
                    r.peak_tokens,
                    r.tokens_sent,
                    r.compactions,
                    r.tokens_saved,
                    "-" if r.drift is None else f"{r.drift:.3f}",
                )
                for r in rows
            ],
        )
    )
    failures = [run for row in rows for run in row.runs if run.error]
    for run in failures:
        print(f"drift run {run.strategy} at call {run.call} FAILED: {run.error}")
    return 1 if failures else 0
