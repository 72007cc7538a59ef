"""Context semantics: anchors, sequence numbers and forks, checked against the peteos-written fixture."""

from __future__ import annotations

import pytest

from soap_core import (
    OBJECT_KEY,
    Context,
    Message,
    Store,
    TextPart,
    ThinkingPart,
    ToolPart,
    ToolResultPart,
    ToolUsePart,
)
from tests.conftest import CHILD_ID, PARENT_ID, load_fixture_context


def rebuild_fixture_parent() -> Context:
    """The fixture's parent context, replayed through the API step by step."""
    original = load_fixture_context(PARENT_ID)
    system, tools = original.messages[0].copy(), original.messages[1].copy()
    context = Context.create(system, tools)
    context.append(Message.create("user", [TextPart("Remember this: the answer is 42.")]))
    context.append(Message.create("assistant", [TextPart("Got it.")]))
    context.append(Message.create("user", [TextPart("What number did I ask you to remember?")]))
    call = ToolUsePart("toolu_1", "produce_output", '{"answer": 42}')
    assistant = context.append(Message.create("assistant", [call]))
    context.append_tool_results(assistant, [ToolResultPart("toolu_1", "")])
    return context


def test_new_context_has_the_default_anchors_and_counters() -> None:
    context = Context.create("You are Pete.", [ToolPart("get_name", "Return the name.", {})])
    assert context.anchor_points == [("system_prompt", 1), ("tools", 2), ("messages", 2)]
    assert (context.mutation_counter, context.message_sequence) == (5, 2)
    assert [m.sequence_number for m in context.messages] == [3, 4]
    assert context.system_prompt_message_id == context.messages[0].id
    assert context.tool_definitions_message_id == context.messages[1].id


def test_appending_through_the_api_reproduces_the_fixture_parent() -> None:
    original = load_fixture_context(PARENT_ID)
    rebuilt = rebuild_fixture_parent()
    anchors = [(name.split(":")[-1], index) for name, index in rebuilt.anchor_points]
    assert anchors == [(name.split(":")[-1], index) for name, index in original.anchor_points]
    assert rebuilt.anchor_points[2][0] == f"{rebuilt.messages[5].id}:tool_result"
    assert [m.sequence_number for m in rebuilt.messages] == [m.sequence_number for m in original.messages]
    assert (rebuilt.mutation_counter, rebuilt.message_sequence) == (
        original.mutation_counter,
        original.message_sequence,
    )
    assert [m.role for m in rebuilt.messages] == [m.role for m in original.messages]


def test_tool_result_lands_before_a_user_message_that_arrived_while_the_call_ran() -> None:
    context = Context.create("prompt")
    assistant = context.append(Message.create("assistant", [ToolUsePart("c1", "slow", "{}")]))
    anchor = f"{assistant.id}:tool_result"
    context.add_anchor(anchor, context.anchor_index("messages"), after_existing=False)
    context.append(Message.create("user", [TextPart("are you there?")]))
    context.append(Message.create("tool_result", [ToolResultPart("c1", "done")]), anchor)
    assert [m.role for m in context.messages] == ["system", "assistant", "tool_result", "user"]
    assert [m.role for m in context.chronological()] == ["system", "assistant", "user", "tool_result"]
    assert context.anchor_points[-2:] == [(anchor, 3), ("messages", 4)]


def test_fork_of_the_fixture_selection_gives_the_fixture_child() -> None:
    parent = load_fixture_context(PARENT_ID)
    expected = load_fixture_context(CHILD_ID)
    child = parent.fork([0, 1, 4, 5, 6])
    child.append(expected.messages[-1].copy())
    assert child.anchor_points == expected.anchor_points
    assert [m.sequence_number for m in child.messages] == [m.sequence_number for m in expected.messages]
    assert [m.id for m in child.messages] == [m.id for m in expected.messages]
    assert [m.token_count for m in child.messages] == [m.token_count for m in expected.messages]
    assert (child.mutation_counter, child.message_sequence) == (
        expected.mutation_counter,
        expected.message_sequence,
    )
    assert child.content_map == parent.content_map and child.content_map is not parent.content_map


def test_fork_records_origin_and_the_parents_real_mutation_counter() -> None:
    parent = load_fixture_context(PARENT_ID)
    child = parent.fork([0, 1, 6])
    assert child.origin_context_id == PARENT_ID
    assert child.parent_mutation_counter == parent.mutation_counter == 11
    assert child.to_dict()["parent_mutation_counter"] == 11
    assert parent.children[-1] == child.id


def test_fork_keeps_the_parent_untouched_but_for_its_children() -> None:
    parent = load_fixture_context(PARENT_ID)
    before = parent.to_dict()
    forks = [
        parent.fork([0, 1, 2]),
        parent.rolling_sequence_window(2),
        parent.rolling_token_window(360),
        parent.strip_thinking(),
        parent.fork_insert_sequence(7, 9),
    ]
    after = parent.to_dict()
    assert after.pop("children") == [*before.pop("children"), *(f.id for f in forks if f)]
    assert after == before
    forks[0].messages[2].content = [TextPart("changed in the child")]
    assert parent.messages[2].text() == "Remember this: the answer is 42."


def test_rolling_token_window_keeps_specials_and_the_newest_that_fit() -> None:
    parent = load_fixture_context(PARENT_ID)
    # true counts: system 79, tools 174, user 22, assistant 29, user 22, call 58, result 46
    child = parent.rolling_token_window(360)
    assert child is not None
    assert [m.role for m in child.messages] == ["system", "tool", "assistant", "tool_result"]
    assert child.total_token_count() == 79 + 174 + 58 + 46 <= 360
    assert parent.rolling_token_window(parent.total_token_count()) is None


def test_rolling_token_window_keeps_the_newest_call_with_its_result_even_over_budget() -> None:
    parent = load_fixture_context(PARENT_ID)
    child = parent.rolling_token_window(79 + 174 + 46)  # the result would fit alone, its call not
    assert child is not None
    assert [m.role for m in child.messages] == ["system", "tool", "assistant", "tool_result"]
    assert child.total_token_count() == 79 + 174 + 58 + 46


def test_rolling_sequence_window_keeps_the_last_n_and_tool_pairs_together() -> None:
    parent = load_fixture_context(PARENT_ID)
    three = parent.rolling_sequence_window(3)
    assert three is not None
    assert [m.role for m in three.messages] == ["system", "tool", "user", "assistant", "tool_result"]
    one = parent.rolling_sequence_window(1)
    assert one is not None
    assert [m.role for m in one.messages] == ["system", "tool"]
    assert parent.rolling_sequence_window(5) is None


def test_fork_insert_sequence_selects_by_sequence_number_and_keeps_specials() -> None:
    parent = load_fixture_context(PARENT_ID)
    child = parent.fork_insert_sequence(5, 7)
    assert [m.id for m in child.messages] == [parent.messages[i].id for i in (0, 1, 2, 3)]
    everything = parent.fork_insert_sequence()
    assert [m.id for m in everything.messages] == [m.id for m in parent.messages]


def test_strip_thinking_removes_thinking_keeps_cached_counts_and_fixes_anchors() -> None:
    context = Context.create("prompt")
    mixed = context.append(Message.create("assistant", [ThinkingPart("hmm " * 20), TextPart("42")]))
    mixed.record_token_count()
    context.append(Message.create("assistant", [ThinkingPart("only thoughts")]))
    context.append(Message.create("user", [TextPart("thanks")]))
    child = context.strip_thinking()
    assert [m.text() for m in child.messages] == ["prompt", "42", "thanks"]
    assert not any(m.has_thinking() for m in child.messages)
    stripped = child.messages[1]
    assert stripped.token_count == mixed.token_count != stripped.count_tokens()
    assert stripped.token_count_is_stale
    assert child.anchor_points[-1] == ("messages", len(child.messages))
    assert child.message_sequence == 4 and len(child.messages) == 3
    assert len(context.messages) == 4 and context.messages[1].has_thinking()


def test_anchors_at_the_same_index_order_by_after_existing() -> None:
    context = Context.create()
    context.add_anchor("late", 0)
    context.add_anchor("early", 0, after_existing=False)
    assert [name for name, _ in context.anchor_points] == [
        "early",
        "system_prompt",
        "tools",
        "messages",
        "late",
    ]
    with pytest.raises(ValueError, match="already has anchor"):
        context.add_anchor("late", 0)
    with pytest.raises(KeyError):
        context.append(Message.create("user", []), "nowhere")


def test_peteos_token_window_reproduces_the_fixture_fork_with_the_stale_cached_count() -> None:
    """The fixture child is peteos' rolling_token_window(360) of the parent (then one
    answer appended); it budgets with the stale 49 of the system prompt (true: 79)."""
    parent, child = load_fixture_context(PARENT_ID), load_fixture_context(CHILD_ID)
    fork = parent.peteos_token_window(360, strip_dangling_results=False)
    assert fork is not None
    assert [m.id for m in fork.messages] == [m.id for m in child.messages[:-1]]
    assert [m.token_count for m in fork.messages] == [m.token_count for m in child.messages[:-1]]
    assert fork.anchor_points[:-1] == child.anchor_points[:-1]
    by_true = load_fixture_context(PARENT_ID).peteos_token_window(360, cached_counts=False)
    assert by_true is not None and len(by_true.messages) == len(fork.messages) - 1


def test_window_disagreement_names_the_message_the_stale_count_kept_and_changes_nothing() -> None:
    parent = load_fixture_context(PARENT_ID)
    before = parent.to_dict()
    choice = parent.window_disagreement(360)
    assert not choice.agree and choice.only_by_true == []
    assert choice.only_by_cached == ["7a1e5d03-c82f-4e6b-95d4-0b3f8c2a71e6"]  # the user's question
    assert parent.to_dict() == before
    assert load_fixture_context(PARENT_ID).window_disagreement(10_000).agree


def test_peteos_token_window_drops_a_result_whose_call_fell_out_and_forgets_its_count() -> None:
    context = Context.create("sys")
    ask = context.append(Message.create("assistant", [ToolUsePart("c1", "look", "{}")]))
    result = context.append_tool_results(ask, [ToolResultPart("c1", "x " * 200)])
    context.append(Message.create("user", [TextPart("and now?")]))
    for message in context.messages:
        message.record_token_count()
    budget = sum(m.token_count or 0 for m in context.messages) - (ask.token_count or 0)
    fork = context.peteos_token_window(budget)
    assert fork is not None
    assert [m.role for m in fork.messages] == ["system", "user"]  # the result lost its call
    assert result.token_count is None  # forgotten in the parent, as peteos does
    kept = context.peteos_token_window(budget, strip_dangling_results=False)
    assert kept is not None and [m.role for m in kept.messages] == ["system", "tool_result", "user"]


def test_a_peteos_sessions_rolling_token_window_is_peteoss_and_ours_keeps_true_counts(
    fixture_store: Store,
) -> None:
    """The same session twice: as peteos wrote it (cached counts, the fixture's fork again)
    and as if our runtime had (true counts: the stale system prompt pushes the question out)."""
    session = fixture_store.load_session("3f0c")
    session.set_active_context(session.contexts[PARENT_ID])
    assert session.written_by_peteos
    theirs = session.rolling_token_window(360)
    assert theirs is not None and theirs.id in session.contexts and session.active_context_id == PARENT_ID
    assert [m.id for m in theirs.messages] == [m.id for m in load_fixture_context(CHILD_ID).messages[:-1]]
    ours_session = fixture_store.load_session("3f0c")
    ours_session.set_active_context(ours_session.contexts[PARENT_ID])
    ours_session.state_data[OBJECT_KEY] = "pete-1"
    ours = ours_session.rolling_token_window(360)
    assert ours is not None and [m.id for m in ours.messages] != [m.id for m in theirs.messages]
    assert ours.total_token_count() <= 360 or len(ours.messages) == 3
