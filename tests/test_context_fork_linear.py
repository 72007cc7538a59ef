"""``Context.fork`` lays the child out in one pass; it must give exactly what appending
the selected messages one by one at their home anchors gives (how peteos forks, and
how this code forked before): the reference below is that old code, kept here."""

from __future__ import annotations

import random

import pytest

from soap_core import Context, Message, TextPart, ToolResultPart, ToolUsePart
from soap_core._context import DEFAULT_ANCHORS, MESSAGES_ANCHOR


def forked_by_appends(parent: Context, selected: list[int]) -> Context:
    """The fork as the old code made it: anchors added one by one at 0, then each
    selected message appended at its home anchor, in display order."""
    indices = sorted(set(selected))
    homes = {i: parent.home_anchor(i) for i in indices}
    wanted = set(DEFAULT_ANCHORS) | set(homes.values())
    child = Context()
    child.content_map = dict(parent.content_map)
    child.origin_context_id = parent.id
    child.parent_mutation_counter = parent.mutation_counter
    for name, _ in parent.anchor_points:
        if name in wanted:
            child.add_anchor(name, 0)
    for name in DEFAULT_ANCHORS:
        if all(name != existing for existing, _ in child.anchor_points):
            child.add_anchor(name, 0)
    for i in indices:
        child.append(parent.messages[i].copy(), homes[i])
    ids = {m.id for m in child.messages}
    child.system_prompt_message_id = (
        parent.system_prompt_message_id if parent.system_prompt_message_id in ids else None
    )
    child.tool_definitions_message_id = (
        parent.tool_definitions_message_id if parent.tool_definitions_message_id in ids else None
    )
    return child


def random_context(rng: random.Random, turns: int) -> Context:
    context = Context.create("You are terse.", [])
    for turn in range(turns):
        context.append(Message.create("user", [TextPart(f"question {turn}")]))
        if rng.random() < 0.5:
            call = f"call-{turn}"
            assistant = context.append(
                Message.create("assistant", [ToolUsePart(call_id=call, name="search", arguments="{}")])
            )
            context.append_tool_results(assistant, [ToolResultPart(call_id=call, content=f"result {turn}")])
        context.append(Message.create("assistant", [TextPart(f"answer {turn}")]))
    return context


def same_fork(parent: Context, selected: list[int]) -> None:
    expected = forked_by_appends(parent, selected).to_dict()
    children_before = list(parent.children)
    got = parent.fork(selected)
    assert parent.children == [*children_before, got.id]
    assert {**got.to_dict(), "id": expected["id"]} == expected


@pytest.mark.parametrize("seed", range(30))
def test_a_fork_equals_appending_each_selected_message_at_its_home_anchor(seed: int) -> None:
    rng = random.Random(seed)
    parent = random_context(rng, rng.randrange(0, 25))
    n = parent.message_count
    same_fork(parent, rng.sample(range(n), rng.randrange(0, n + 1)))
    same_fork(parent, list(range(rng.randrange(0, n + 1))))  # a prefix: a replay's fork


def test_a_fork_of_anchors_out_of_the_usual_order_still_equals_the_appends() -> None:
    """``messages`` before another anchor with a later end (a hand-made file): messages
    past every end go home to ``messages`` and land before that anchor's."""
    parent = random_context(random.Random(7), 6)
    early = [(name, end) for name, end in parent.anchor_points if name != MESSAGES_ANCHOR and end < 4]
    parent.anchor_points = [*early, (MESSAGES_ANCHOR, 4), ("late", 9)]
    assert parent.message_count > 12
    same_fork(parent, list(range(parent.message_count)))
    same_fork(parent, [1, 5, 10, parent.message_count - 1])


def test_a_fork_of_a_long_tool_context_finds_each_home_in_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """The homes come from one walk over the anchors, not one scan per message (which
    made a fork of 25,000 messages of a tool context take 44 s)."""
    parent = random_context(random.Random(3), 400)
    calls = 0
    home = Context.home_anchor

    def counted(self: Context, index: int) -> str:
        nonlocal calls
        calls += 1
        return home(self, index)

    monkeypatch.setattr(Context, "home_anchor", counted)
    parent.fork(range(parent.message_count))
    assert calls == 0
