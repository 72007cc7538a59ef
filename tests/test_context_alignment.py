"""Two contexts are compared by lining their messages up by content, not by position
(issue 23): a compaction fork that dropped the first turns and added a summary pairs the
messages it kept with the originals; before, every message after the summary "differed"."""

from __future__ import annotations

from replay import diff_contexts
from soap_core import Context, Message, TextPart
from workbench.replay_views import context_diff_table, divergence_text


def said(role: str, text: str) -> Message:
    return Message.create(role, [TextPart(text)])


def conversation(turns: int) -> Context:
    context = Context.create("You answer briefly.")
    for n in range(turns):
        context.append(said("user", f"question {n}"))
        context.append(said("assistant", f"answer {n}"))
    return context


def test_a_compaction_fork_lines_up_the_messages_it_kept() -> None:
    root = conversation(6)  # system, then 12 messages
    kept = root.messages[7:]  # the last three turns
    fork = Context.create("You answer briefly.")
    fork.append(said("user", "Summary of the earlier conversation: questions 0 to 2 were answered."))
    for message in kept:
        fork.append(message.copy())
    diff = diff_contexts(root, fork)
    same = [(r["a_index"], r["b_index"]) for r in diff.rows if r["same"]]
    assert same == [(0, 0), *[(7 + k, 2 + k) for k in range(len(kept))]]
    assert diff.first_divergence == 1 and diff.turn == 1
    assert diff.summary == "7 messages the same, 1 changed, 5 only in A"
    assert divergence_text(diff) == (
        "First divergence at message #1 (user turn 1). 7 messages the same, 1 changed, 5 only in A."
    )
    table = context_diff_table(diff)
    assert table["same"].sum() == 7 and list(table["a #"])[:2] == ["#0", "#1"]


def test_a_replay_fork_is_the_same_up_to_the_new_answer() -> None:
    root = conversation(3)
    fork = Context.create("You answer briefly.")
    for message in root.messages[1:6]:
        fork.append(message.copy())
    fork.append(said("assistant", "a different answer"))
    diff = diff_contexts(root, fork)
    assert diff.first_divergence == 6 and all(r["same"] for r in diff.rows[:6])
    [changed] = [r for r in diff.rows if not r["same"]]
    assert (changed["a_index"], changed["b_index"]) == (6, 6)
    assert {op for op, _ in changed["words"]} >= {"delete", "insert"}


def test_identical_contexts_and_a_long_shared_prefix_stay_cheap() -> None:
    long = conversation(5_000)
    twin = Context.create("You answer briefly.")
    for message in long.messages[1:]:
        twin.append(message.copy())
    assert diff_contexts(long, twin).first_divergence is None
    twin.append(said("user", "one more"))
    diff = diff_contexts(long, twin)
    assert diff.first_divergence == 10_001 and diff.summary == "10,001 messages the same, 1 only in B"
