"""Token budgets and the compaction lab, checked against hand-computed windows."""

from __future__ import annotations

from pathlib import Path

import pytest

import soap_core._message as message_module
from analysis import (
    FunctionStrategy,
    Item,
    NoCompaction,
    RollingMessages,
    RollingTokens,
    StripThinking,
    SummarizeOlder,
    call_budgets,
    compare,
    history_of,
    makeup,
    message_budgets,
    parse_strategy,
    simulate,
    simulate_items,
)
from analysis._lab import Strategy, items_of
from soap_core import Context, Message, Store, TextPart, ThinkingPart, ToolPart, ToolResultPart, ToolUsePart
from soap_core.runtime import RollingSequenceWindow, RollingTokenWindow
from tests.conftest import CHILD_ID, PARENT_ID


def items(*tokens: int, specials: int = 0) -> list[Item]:
    """Items of the given sizes; the first ``specials`` are system prompt / tools."""
    return [Item(f"m{i}", t, special=i < specials, group=i) for i, t in enumerate(tokens)]


def test_the_seeds_rule_over_60000_keeps_the_most_recent_30000() -> None:
    history = items(500, 1500, *([10_000] * 7), specials=2)  # 2,000 of specials + 70,000
    calls = list(range(3, len(history) + 1))
    [sim] = simulate_items(history, calls, [RollingTokens(60_000, 0.5)])
    over = next(p for p in sim.points if p.original_tokens > 60_000)
    assert over.compacted
    assert over.tokens <= 30_000 and over.tokens == 2_000 + 2 * 10_000
    assert sorted(over.dropped_now) == [f"m{i}" for i in range(2, 6)]
    assert all(p.tokens <= 60_000 for p in sim.points)


def test_specials_and_the_newest_message_stay_even_over_budget() -> None:
    history = items(700, 500, 50, 50, specials=2)
    [sim] = simulate_items(history, [4], [RollingTokens(1_000, 0.5)])
    assert sim.points[0].tokens == 1_250 and sim.points[0].dropped_now == ["m2"]


def test_a_tool_result_never_leaves_without_its_call() -> None:
    grouped = [
        Item("sys", 10, special=True, group=0),
        Item("ask", 10, group=1),
        Item("call", 10, group=2),
        Item("result", 10, group=2),
        Item("answer", 10, group=3),
    ]
    [tokens, messages] = simulate_items(grouped, [5], [RollingTokens(40, 0.6), RollingMessages(2)])
    assert tokens.points[0].dropped_now == ["ask", "call", "result"]  # 24 budget: the pair goes together
    assert messages.points[0].dropped_now == ["ask", "call", "result"]  # keeping 2 would split the pair


def test_rolling_messages_keeps_the_last_n_at_every_call() -> None:
    history = items(5, 1, 1, 1, 1, 1, specials=1)
    [sim] = simulate_items(history, [2, 4, 6], [RollingMessages(2)])
    assert [p.tokens for p in sim.points] == [6, 7, 7]
    assert sim.dropped_at(2) == ["m1", "m2", "m3"]
    assert sim.compactions == 2


def test_strip_thinking_saves_the_thinking_tokens_and_drops_nothing() -> None:
    history = [Item("a", 30, thinking=20), Item("b", 10)]
    [sim] = simulate_items(history, [2], [StripThinking()])
    assert sim.points[0].tokens == 20 and sim.points[0].dropped_now == [] and sim.tokens_saved == 20


def test_summarize_replaces_older_messages_with_one_shorter_summary() -> None:
    history = items(10, 100, 100, 100, 100, specials=1)
    [sim] = simulate_items(history, [5], [SummarizeOlder(300, keep_last=1)])
    point = sim.points[0]
    assert sorted(point.dropped_now) == ["m1", "m2", "m3"]
    assert point.tokens == 10 + 100 + 75  # specials, the kept message, a quarter of what went


def test_a_plugged_in_function_is_a_strategy() -> None:
    keep_even = FunctionStrategy(lambda view: [i for i in view if int(i.id[1:]) % 2 == 0], "even-only")
    [sim] = simulate_items(items(1, 1, 1, 1), [4], [keep_even])
    assert sim.strategy == "even-only" and sim.points[0].dropped_now == ["m1", "m3"]


def test_strategy_specs_parse_and_bad_ones_say_what_is_accepted() -> None:
    assert parse_strategy("rolling-tokens:60000:0.5").name == "rolling-tokens:60000:0.5"
    assert isinstance(parse_strategy("rolling-messages:40"), RollingMessages)
    assert isinstance(parse_strategy("none"), NoCompaction)
    with pytest.raises(ValueError, match="unknown strategy 'magic'"):
        parse_strategy("magic")
    with pytest.raises(ValueError, match="bad numbers"):
        parse_strategy("rolling-tokens:lots")


def grouped_conversation() -> Context:
    """A context with tool groups of every shape: two calls answered in one result, a
    call answered late by a second result message, a call whose result is the newest
    message, and messages of very different sizes."""
    context = Context.create("You answer questions about logs. " * 5, [ToolPart("grep", "Search.", {})])
    context.append(Message.create("user", [TextPart("Which services failed last night? " * 3)]))
    both = [ToolUsePart("c1", "grep", '{"p": "ERROR"}'), ToolUsePart("c2", "grep", '{"p": "FATAL"}')]
    first = context.append(Message.create("assistant", [TextPart("Looking."), *both]))
    context.append_tool_results(first, [ToolResultPart("c1", "db down " * 40), ToolResultPart("c2", "none")])
    context.append(Message.create("assistant", [TextPart("The database failed at 02:10.")]))
    context.append(Message.create("user", [TextPart("And the cache?")]))
    late = context.append(Message.create("assistant", [ToolUsePart("c3", "grep", '{"p": "cache"}')]))
    context.append_tool_results(late, [ToolResultPart("c3", "cache ok " * 5)])
    context.append(Message.create("tool_result", [ToolResultPart("c3", "more cache lines " * 12)]))
    context.append(Message.create("user", [TextPart("Thanks. One last check " * 8)]))
    last = context.append(Message.create("assistant", [ToolUsePart("c4", "grep", '{"p": "disk"}')]))
    context.append_tool_results(last, [ToolResultPart("c4", "disk full " * 30)])
    return context


def lab_drops(context: Context, strategy: Strategy) -> set[str]:
    """What the lab drops from the whole context at one call."""
    [simulation] = simulate_items(list(items_of(context.messages)), [len(context.messages)], [strategy])
    return set(simulation.dropped_at(0))


def context_drops(context: Context, fork: Context | None) -> set[str]:
    """What a window's fork (None: the context as it is) left out."""
    return {m.id for m in context.messages} - {m.id for m in fork.messages} if fork else set()


def test_the_lab_drops_what_the_context_windows_and_the_runtime_hooks_drop() -> None:
    """One rule, three users: over every budget and every count, the lab's simulated
    strategies drop exactly the messages that ``Context``'s windows and the runtime's
    hooks leave out of their forks, whole tool groups, the newest one always kept."""
    context = grouped_conversation()
    ordinary = [i for i, m in enumerate(context.messages) if not m.is_special]
    total = context.total_token_count()
    groups = sorted({item.group for item in items_of(context.messages) if not item.special})
    assert len(groups) < len(ordinary) and total > 400  # tool groups that a window must keep whole
    seen = set()
    for budget in range(total - sum(context.messages[i].count_tokens() for i in ordinary), total + 2):
        dropped = context_drops(context, context.rolling_token_window(budget))
        assert lab_drops(context, RollingTokens(budget, 1.0)) == dropped, budget
        seen.add(frozenset(dropped))
        threshold = budget * 2  # keep half of it, over it
        hook = RollingTokenWindow(threshold, 0.5)(None, context)  # type: ignore[arg-type]
        assert lab_drops(context, RollingTokens(threshold, 0.5)) == context_drops(context, hook), threshold
    assert len(seen) >= 5  # the budgets cut the conversation at several places
    for n in range(len(ordinary) + 2):
        dropped = context_drops(context, context.rolling_sequence_window(n))
        assert lab_drops(context, RollingMessages(n)) == dropped, n
        hook = RollingSequenceWindow(n)(None, context)  # type: ignore[arg-type]
        assert context_drops(context, hook) == dropped
        older = {context.messages[i].id for i in ordinary} - {
            context.messages[i].id for i in context.recent_indices(n)
        }
        assert lab_drops(context, SummarizeOlder(total - 1, n)) == older, n
        assert lab_drops(context, SummarizeOlder(total, n)) == set()  # not over its threshold


def test_the_fixtures_calls_are_reconstructed_with_the_compaction_between_them(fixture_store: Store) -> None:
    session = fixture_store.load_session("3f0c")
    budgets = call_budgets(session)
    assert [(b.context_id, b.message_index) for b in budgets] == [
        (PARENT_ID, 3),
        (PARENT_ID, 5),
        (CHILD_ID, 5),
    ]
    assert [b.tokens for b in budgets] == [79 + 174 + 22, 79 + 174 + 22 + 29 + 22, 79 + 174 + 22 + 58 + 46]
    [event] = budgets[2].compactions_before
    assert (event.parent_id, event.child_id, event.tokens_before, event.tokens_after) == (
        PARENT_ID,
        CHILD_ID,
        430,
        379,
    )
    assert all(sum(b.makeup.values()) == b.tokens for b in budgets)
    assert budgets[2].makeup["tool_calls"] + budgets[2].makeup["assistant"] == 58


def test_per_message_budget_reports_cumulative_tokens_and_stale_counts(fixture_store: Store) -> None:
    rows = message_budgets(fixture_store.load_session("3f0c").active_context)
    assert [r.cumulative for r in rows] == [79, 253, 275, 333, 379, 400]
    assert [r.stale for r in rows] == [True, False, False, False, False, False]


def test_makeup_splits_thinking_tool_calls_and_text() -> None:
    message = Message.create(
        "assistant",
        [ThinkingPart("let me see " * 10), TextPart("42"), ToolUsePart("c", "grep", '{"p": "x"}')],
    )
    split = makeup(message)
    assert (
        set(split) == {"thinking", "assistant", "tool_calls"}
        and sum(split.values()) == message.count_tokens()
    )
    assert split["thinking"] > split["tool_calls"] > 0


def test_a_second_pass_over_the_same_session_does_no_tokenization(
    fixture_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = fixture_store.load_session("3f0c")
    call_budgets(session)
    simulate(session, ["rolling-tokens:350", "rolling-messages:2"])
    calls: list[str] = []
    monkeypatch.setattr(message_module, "count_text", lambda text, encoding="": calls.append(text) or 0)
    call_budgets(session)
    simulate(session, ["rolling-tokens:350", "rolling-messages:2", "strip-thinking"])
    assert calls == []


def test_simulation_never_changes_the_store(store_copy: Path) -> None:
    from tests.conftest import snapshot

    before = snapshot(store_copy)
    store = Store(store_copy)
    rows = compare(store, store.load_session("3f0c"), [RollingTokens(350, 0.8), RollingMessages(2)])
    assert [r.compactions for r in rows] == [1, 2] and all(r.drift is None for r in rows)
    assert snapshot(store_copy) == before


def test_history_follows_the_active_lineage_once_per_message(fixture_store: Store) -> None:
    history = history_of(fixture_store.load_session("3f0c"))
    assert len(history.items) == 8 and len({i.id for i in history.items}) == 8
    assert history.calls == [3, 5, 7]
