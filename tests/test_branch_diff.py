"""Two branches of an agent run diffed step by step, and the noise band of unchanged re-runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from replay import (
    Turn,
    branch_distance,
    branch_noise_band,
    branch_turns,
    diff_branches,
)
from soap_core import (
    CallRecord,
    Context,
    Message,
    Part,
    SoapError,
    Store,
    TextPart,
    ThinkingPart,
    ToolPart,
    ToolResultPart,
    ToolUsePart,
)
from tests.conftest import CHILD_ID, PARENT_ID

TOOLS = [
    ToolPart("search", "Search the logs.", {"type": "object"}),
    ToolPart("fetch", "Fetch a url.", {"type": "object"}),
]
Step = tuple[Any, ...]


def agent_run(steps: list[Step], question: str = "What failed last night?") -> Context:
    """A context whose branch from display index 2 on is ``question`` then ``steps``:
    ("call", name, arguments, result) makes an assistant tool call and its result,
    ("text", words) an assistant text."""
    context = Context.create("You analyse logs.", TOOLS)
    context.append(Message.create("user", [TextPart(question)]))
    for number, step in enumerate(steps):
        if step[0] == "call":
            _, name, arguments, result = step
            call_id = f"call_{number}"
            assistant = context.append(
                Message.create("assistant", [ToolUsePart(call_id, name, json.dumps(arguments))])
            )
            context.append_tool_results(assistant, [ToolResultPart(call_id, result)])
        else:
            context.append(Message.create("assistant", [TextPart(step[1])]))
    return context


def turns_of(steps: list[Step], question: str = "What failed last night?") -> list[Turn]:
    return branch_turns(agent_run(steps, question), start=2)


ORIGINAL: list[Step] = [
    ("call", "search", {"query": "x"}, "hits for x"),
    ("text", "The backup job failed at 02:00."),
]
RERUN: list[Step] = [
    ("call", "search", {"query": "y"}, "hits for y"),
    ("text", "The backup job failed at 03:00."),
]


def test_branch_turns_lists_user_texts_and_tool_calls_with_their_results_from_the_start_index() -> None:
    context = agent_run(ORIGINAL)
    turns = branch_turns(context)  # system prompt and tool definitions are no steps
    assert [(t.kind, t.index) for t in turns] == [("user", 2), ("tool_call", 3), ("text", 5)]
    call = turns[1]
    assert (call.name, call.arguments, call.call_id) == ("search", {"query": "x"}, "call_0")
    assert (call.result, call.result_index) == ("hits for x", 4)
    assert call.tokens == context.messages[3].count_tokens() and call.message_id == context.messages[3].id
    assert turns[0].text == "What failed last night?" and turns[2].text == "The backup job failed at 02:00."
    assert [t.kind for t in branch_turns(context, start=3)] == ["tool_call", "text"]
    assert [t.kind for t in branch_turns(context, start=-1)] == ["text"]
    assert branch_turns(context, start=len(context.messages)) == []
    with pytest.raises(SoapError, match="no index 7"):
        branch_turns(context, start=7)


def test_a_message_with_text_and_two_calls_gives_one_turn_each_and_thinking_is_no_step() -> None:
    context = Context.create("prompt")
    context.append(Message.create("user", [TextPart("go")]))
    parts: list[Part] = [
        ThinkingPart("let me look"),
        TextPart("Looking."),
        ToolUsePart("c1", "search", '{"query": "a"}'),
        ToolUsePart("c2", "search", "not json"),
    ]
    assistant = context.append(Message.create("assistant", parts))
    context.append_tool_results(assistant, [ToolResultPart("c2", "second"), ToolResultPart("c1", "first")])
    turns = branch_turns(context)
    assert [(t.kind, t.index) for t in turns] == [
        ("user", 1),
        ("text", 2),
        ("tool_call", 2),
        ("tool_call", 2),
    ]
    assert [(t.arguments, t.result) for t in turns[2:]] == [({"query": "a"}, "first"), ("not json", "second")]
    assert turns[2].tokens == turns[3].tokens == assistant.count_tokens()


def test_identical_branches_have_distance_zero_and_no_divergence() -> None:
    diff = diff_branches(turns_of(ORIGINAL), turns_of(ORIGINAL))
    assert diff.identical and diff.first_divergence is None and diff.distance == 0.0
    assert [p.status for p in diff.pairs] == ["equal", "equal", "equal"]
    assert diff.divergence == "the two branches take the same steps and give the same final answer"
    assert diff.final_words == (("equal", "The backup job failed at 02:00."),)


def test_a_rerun_that_searches_for_something_else_diverges_at_that_call_in_words_a_person_reads() -> None:
    diff = diff_branches(turns_of(ORIGINAL), turns_of(RERUN))
    assert [p.status for p in diff.pairs] == ["equal", "changed", "changed"]
    assert diff.first_divergence == 1
    assert (
        diff.divergence
        == "turn 2: the original called search(query='x'), the re-run called search(query='y')"
    )
    call = diff.pairs[1]
    assert call.argument_changes == ("argument query changed from 'x' to 'y'",)
    assert call.result_changes == ("result changed from 'hits for x' to 'hits for y'",)
    assert diff.pairs[2].words == (
        ("equal", "The backup job failed at"),
        ("delete", "02:00."),
        ("insert", "03:00."),
    )
    assert (
        diff.final_a == "The backup job failed at 02:00."
        and diff.final_b == "The backup job failed at 03:00."
    )
    assert ("delete", "02:00.") in diff.final_words and ("insert", "03:00.") in diff.final_words
    # 6 final words + 3 steps a side; 5 words and 2 steps (user, text) match: 1 - 2*7/18
    assert diff.distance == round(1 - 14 / 18, 6)


def test_nested_argument_and_json_result_differences_are_phrased_without_deepdiff_paths() -> None:
    a = turns_of(
        [("call", "search", {"filters": {"tags": ["a", "b"]}, "exact": True}, '{"count": 3, "rows": [1]}')]
    )
    b = turns_of(
        [("call", "search", {"filters": {"tags": ["a", "c"]}, "limit": 5}, '{"count": 4, "rows": [1]}')]
    )
    [_, pair] = diff_branches(a, b).pairs
    assert set(pair.argument_changes) == {
        "argument filters.tags[1] changed from 'b' to 'c'",
        "argument limit added: 5",
        "argument exact removed (was true)",
    }
    assert pair.result_changes == ("result count changed from 3 to 4",)
    assert not any("root" in sentence for sentence in pair.argument_changes + pair.result_changes)


def test_differences_read_in_the_order_of_their_paths_as_the_output_diff_phrases_them() -> None:
    """One grammar with the output diff (replay._phrases), values quoted as Python: a type
    change names both kinds; a result on one side only is added or removed as a whole."""
    a = [("call", "search", {"z": 1, "limit": 5, "b": ["x"]}, "hits")]
    b = [("call", "search", {"z": 2, "limit": "5", "b": []}, "hits")]
    [_, pair] = diff_branches(turns_of(a), turns_of(b)).pairs
    assert pair.argument_changes == (
        "argument b[0] removed (was 'x')",
        "argument limit changed from 5 (a number) to '5' (text)",
        "argument z changed from 1 to 2",
    )
    call = Turn("tool_call", 3, "m", 1, name="search", arguments={}, call_id="c")
    answered = Turn(
        "tool_call", 3, "m", 1, name="search", arguments={}, call_id="c", result=[1], result_index=4
    )
    assert diff_branches([call], [answered]).pairs[0].result_changes == ("result added: [1]",)
    assert diff_branches([answered], [call]).pairs[0].result_changes == ("result removed (was [1])",)


def test_the_same_call_with_another_result_diverges_by_its_result() -> None:
    other = [("call", "search", {"query": "x"}, "no hits"), ORIGINAL[1]]
    diff = diff_branches(turns_of(ORIGINAL), turns_of(other))
    assert [p.status for p in diff.pairs] == ["equal", "changed", "equal"]
    assert diff.pairs[1].argument_changes == ()
    assert diff.divergence == (
        "turn 2: both called search(query='x'), but result changed from 'hits for x' to 'no hits'"
    )
    assert diff.distance == 0.0 and not diff.identical  # results do not count in the distance


def test_a_rerun_that_stops_early_is_said_to_stop_and_what_the_original_went_on_to_do() -> None:
    longer = [ORIGINAL[0], ("call", "fetch", {"url": "u"}, "page"), ("text", "Done.")]
    diff = diff_branches(turns_of(longer), turns_of(ORIGINAL[:1]))
    assert [p.status for p in diff.pairs] == ["equal", "equal", "only_a", "only_a"]
    assert diff.first_divergence == 2
    assert diff.divergence == (
        "the re-run stops after turn 2; the original went on to call fetch(url='u') (and 1 more step)"
    )
    assert diff.final_b == "" and diff.final_words == (("delete", "Done."),)
    reverse = diff_branches(turns_of(ORIGINAL[:1]), turns_of(longer))
    assert reverse.divergence.startswith("the original stops after turn 2; the re-run went on to call fetch")
    empty = diff_branches(turns_of(ORIGINAL), [])
    assert empty.divergence == (
        "the re-run takes no step; the original went on to have the user say "
        "'What failed last night?' (and 2 more steps)"
    )
    assert empty.distance == 1.0


def test_an_extra_tool_call_in_the_middle_leaves_the_steps_around_it_aligned() -> None:
    extra = [ORIGINAL[0], ("call", "fetch", {"url": "u"}, "page"), ORIGINAL[1]]
    diff = diff_branches(turns_of(ORIGINAL), turns_of(extra))
    assert [p.status for p in diff.pairs] == ["equal", "equal", "only_b", "equal"]
    assert diff.pairs[3].a is not None and diff.pairs[3].b is not None
    assert (diff.pairs[3].a.index, diff.pairs[3].b.index) == (5, 7)
    assert diff.divergence == "turn 3: the re-run called fetch(url='u'), the original has no such step"
    # 6 words + 3 steps against 6 words + 4 steps, all 9 of the original's matching: 1 - 18/19
    assert diff.distance == round(1 - 18 / 19, 6)


def test_a_replaced_run_is_paired_position_by_position_and_the_rest_is_only_in_one_branch() -> None:
    two_fetches = [("call", "fetch", {"url": "1"}, "a"), ("call", "fetch", {"url": "2"}, "b"), ORIGINAL[1]]
    diff = diff_branches(turns_of(ORIGINAL), turns_of(two_fetches))
    assert [p.status for p in diff.pairs] == ["equal", "changed", "only_b", "equal"]
    assert diff.pairs[1].argument_changes == ("tool changed from search to fetch",)
    assert (
        diff.divergence == "turn 2: the original called search(query='x'), the re-run called fetch(url='1')"
    )


def test_rewording_on_the_way_changes_the_pair_but_not_the_distance() -> None:
    chatty = [("text", "Let me search."), *ORIGINAL]
    wordy = [("text", "I will look at the logs."), *ORIGINAL]
    diff = diff_branches(turns_of(chatty), turns_of(wordy))
    assert [p.status for p in diff.pairs] == ["equal", "changed", "equal", "equal"]
    assert (
        diff.divergence
        == "turn 2: the original wrote 'Let me search.', the re-run wrote 'I will look at the logs.'"
    )
    assert diff.distance == 0.0
    asked = diff_branches(turns_of(ORIGINAL), turns_of(ORIGINAL, question="What failed today?"))
    assert asked.divergence == (
        "turn 1: the original had the user say 'What failed last night?', "
        "the re-run had the user say 'What failed today?'"
    )


def test_token_and_latency_deltas_come_from_the_call_records_of_each_context() -> None:
    original, rerun = agent_run(ORIGINAL), agent_run(RERUN, question="What failed last night?")

    def record(context: Context, index: int, latency: float, tokens: int) -> CallRecord:
        message = context.messages[index]
        return CallRecord(
            f"call-{context.id}-{index}",
            "session",
            "LogAnalyzer",
            context.id,
            index,
            {},
            "hash",
            message_id=message.id,
            latency_s=latency,
            usage={"completion_tokens": tokens},
        )

    calls = [record(original, 3, 1.5, 10), record(original, 5, 2.0, 20), record(rerun, 3, 1.0, 12)]
    stray = record(original, 5, 9.0, 99)  # the same message id in another context: not its call
    stray.context_id = rerun.id
    a = branch_turns(original, 2, calls)
    b = branch_turns(rerun, 2, [*calls, stray])
    assert (a[1].latency_s, a[1].usage) == (1.5, {"completion_tokens": 10})
    assert (a[0].latency_s, b[2].latency_s) == (None, None)
    diff = diff_branches(a, b)
    assert [p.latency_delta_s for p in diff.pairs] == [None, -0.5, None]
    assert [p.tokens_delta for p in diff.pairs] == [
        0,
        rerun.messages[3].count_tokens() - original.messages[3].count_tokens(),
        rerun.messages[5].count_tokens() - original.messages[5].count_tokens(),
    ]
    assert diff_branches(a, a[:1]).pairs[1].tokens_delta is None  # only in one branch


def test_noise_band_of_three_identical_runs_is_zero_and_an_edited_run_falls_outside() -> None:
    band = branch_noise_band([turns_of(ORIGINAL) for _ in range(3)])
    assert (band.samples, band.agreement_rate, band.distances, band.upper) == (3, 1.0, [0.0, 0.0, 0.0], 0.0)
    edited = branch_distance(turns_of(ORIGINAL), turns_of(RERUN))
    assert edited > 0 and not band.contains(edited)
    assert band.contains(branch_distance(turns_of(ORIGINAL), turns_of(ORIGINAL)))


def test_noise_band_of_varying_runs_counts_agreement_and_every_pairwise_distance() -> None:
    runs = [turns_of(ORIGINAL), turns_of(ORIGINAL), turns_of(RERUN)]
    band = branch_noise_band(runs)
    d = branch_distance(runs[0], runs[2])
    assert band.samples == 3 and band.agreement_rate == round(2 / 3, 6)
    assert band.distances == [0.0, d, d] and band.contains(d) and not band.contains(d + 0.01)
    assert branch_noise_band([]).samples == 0
    assert branch_noise_band([runs[0]]).distances == []


def test_the_diff_is_plain_json_for_the_command_line() -> None:
    diff = diff_branches(turns_of(ORIGINAL), turns_of(RERUN))
    data = json.loads(json.dumps(diff.as_dict()))
    assert data["first_divergence"] == 1 and data["distance"] == diff.distance and not data["identical"]
    assert (
        data["pairs"][1]["a"]["arguments"] == {"query": "x"}
        and data["pairs"][1]["b"]["result"] == "hits for y"
    )
    assert data["pairs"][1]["argument_changes"] == ["argument query changed from 'x' to 'y'"]
    assert data["final_words"][0] == ["equal", "The backup job failed at"]


def test_the_fixture_parent_and_its_compaction_child_align_by_hand(store_copy: Path) -> None:
    session = Store(store_copy).load_session("3f0c")
    parent, child = session.contexts[PARENT_ID], session.contexts[CHILD_ID]
    # parent: #2 user "Remember...", #3 "Got it...", #4 user "What number...", #5 produce_output(answer=42)
    # child (a fork keeping #4-#6): #2 user "What number...", #3 produce_output, #5 "You asked me..."
    diff = diff_branches(branch_turns(parent), branch_turns(child))
    rows = [(p.status, p.a.index if p.a else None, p.b.index if p.b else None) for p in diff.pairs]
    assert rows == [
        ("only_a", 2, None),
        ("only_a", 3, None),
        ("equal", 4, 2),
        ("equal", 5, 3),
        ("only_b", None, 5),
    ]
    assert diff.pairs[3].a is not None and diff.pairs[3].a.arguments == {"answer": 42}
    assert diff.pairs[3].a.result == "" and diff.pairs[3].a.result_index == 6
    assert [p.tokens_delta for p in diff.pairs] == [None, None, 0, 0, None]
    assert diff.divergence == (
        "turn 1: the original had the user say 'Remember this: the answer is 42.', the re-run has no such step"
    )
    # 12 words + 4 steps against 6 words + 3 steps; "42." and the steps user, call match: 1 - 2*3/25
    assert diff.distance == round(1 - 6 / 25, 6)
    # from the question on, the child is the parent's branch plus its answer
    tail = diff_branches(branch_turns(parent, 4), branch_turns(child, 2))
    assert [p.status for p in tail.pairs] == ["equal", "equal", "only_b"]
    assert tail.divergence == (
        "the original stops after turn 2; the re-run went on to write 'You asked me to remember 42.'"
    )
