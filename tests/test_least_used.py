"""Attribution for compaction (issue 29, point 4): the session's messages ranked by how
much its attributed answers lean on them, and the least-used strategy that drops the
least-leaned-on messages first, beside the rolling windows, in the library, the command
line and the Compaction page. The end-to-end case runs on the real local model: an
early message holds the fact a later answer repeats, so a rolling window drops it
first and least-used keeps it."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from analysis import (
    Attribution,
    Item,
    LeastUsed,
    RollingTokens,
    Unit,
    attribute_calls,
    history_of,
    lab_strategies,
    message_usage,
    message_uses,
    parse_strategy,
    saved_attributions,
    simulate,
    simulate_items,
)
from local_model import LocalModelServer
from replay import ServerScorer
from soap_core import Context, Message, Session, Store, TextPart
from soapwb.cli import main
from tests.apptest import open_app_page


def items(*specs: tuple[str, int, int]) -> list[Item]:
    """(id, tokens, group) each."""
    return [Item(i, tokens, group=group) for i, tokens, group in specs]


def dropped_by(strategy: LeastUsed, history: list[Item], calls: list[int], call: int) -> set[str]:
    [simulation] = simulate_items(history, calls, [strategy])
    return set(simulation.dropped_at(call))


def test_least_used_drops_the_lowest_use_first_and_keeps_groups_and_the_newest() -> None:
    history = items(("a", 10, 1), ("b", 10, 2), ("c", 10, 3), ("d", 10, 3), ("e", 10, 4), ("f", 10, 5))
    usage = {"a": 2.0, "b": -0.5, "c": 0.0, "d": 1.5, "e": 0.1, "f": -9.0}
    # at the last call (all six, 60 tokens) over 40: down to 20 (40 * 0.5)
    gone = dropped_by(LeastUsed(40, 0.5, usage), history, [6], 0)
    # b (-0.5) goes, then e (0.1), then c+d (a tool group: the larger use, 1.5): 20 left;
    # f is the newest and stays though its use is the lowest; a (2.0) stays
    assert gone == {"b", "e", "c", "d"}
    # ties go oldest first: without usage it drops what a rolling window drops
    assert dropped_by(LeastUsed(40, 0.5, {}), history, [6], 0) == {"a", "b", "c", "d"}


def test_without_attributions_least_used_is_the_rolling_token_window_at_every_call() -> None:
    rng = random.Random(7)
    history, group = [], 0
    for n in range(400):
        group += rng.random() > 0.3  # some messages share a tool group with the one before
        history.append(Item(f"m{n}", rng.randrange(5, 120), group=group))
    calls = sorted(rng.sample(range(1, 400), 60))
    ours, theirs = simulate_items(history, calls, [LeastUsed(2_000, 0.5, {}), RollingTokens(2_000, 0.5)])
    assert [p.tokens for p in ours.points] == [p.tokens for p in theirs.points]
    assert [sorted(p.dropped_now) for p in ours.points] == [sorted(p.dropped_now) for p in theirs.points]
    assert ours.compactions > 5


def test_a_message_arriving_for_a_dropped_group_is_dropped_with_it() -> None:
    """A tool result answering a call least-used dropped is never sent alone."""
    history = items(("call", 30, 1), ("q", 5, 2), ("result", 10, 1), ("next", 5, 3))
    strategy = LeastUsed(30, 0.5, {"q": 1.0})
    [simulation] = simulate_items(history, [2, 4], [strategy])
    assert simulation.points[0].dropped_now == ["call"]
    assert simulation.points[1].dropped_now == ["result"]


def attribution(
    context_id: str, index: int, weights: dict[str | None, float], created: str = ""
) -> Attribution:
    units = [Unit(n, "user", f"user message #{n}", "", 1, mid) for n, mid in enumerate(weights)]
    return Attribution(
        session="s",
        context_id=context_id,
        index=index,
        message_id=f"answer-{index}",
        source="soapwb",
        unit="message",
        units=units,
        weights=list(weights.values()),
        intercept=0.0,
        full_logit=0.0,
        full_logprob=0.0,
        ablations=[],
        lds=None,
        top_k=[],
        method="test",
        endpoint="",
        model=None,
        seed=0,
        seconds=0.0,
        created_at=created,
    )


def test_a_messages_use_is_the_largest_weight_any_answer_gave_it_newest_attribution_each() -> None:
    older = attribution("c", 5, {"m1": 9.0, "m2": 0.0})
    first = attribution("c", 5, {"m1": 0.5, "m2": -1.0})  # the same answer again: it replaces the older
    second = attribution("c", 9, {"m1": 2.0, "m3": -0.2, None: 4.0})
    uses = {u.message_id: u for u in message_uses([older, first, second])}
    assert set(uses) == {"m1", "m2", "m3"}  # a unit without a message id is left out
    assert (uses["m1"].use, uses["m1"].answers, uses["m1"].leaning) == (2.0, 2, 2)
    assert (uses["m2"].use, uses["m2"].answers, uses["m2"].leaning) == (-1.0, 1, 0)
    assert [u.message_id for u in message_uses([older, first, second])] == ["m1", "m3", "m2"]
    assert message_usage([older, first, second]) == {"m1": 2.0, "m2": -1.0, "m3": -0.2}
    # a regenerated answer's weights (similarity, 0 to 1) do not mix with scored ones
    regenerated = attribution("c", 12, {"m4": 0.9})
    regenerated.noise = [1.0, 0.8, 0.9]
    assert "m4" not in message_usage([first, second, regenerated])
    assert message_usage([regenerated]) == {"m4": 0.9}


def test_the_spec_reads_and_only_the_lab_knows_it() -> None:
    strategy = parse_strategy("least-used:500", {"x": 1.0})
    assert isinstance(strategy, LeastUsed) and strategy.name == "least-used:500:0.5"
    assert strategy.usage == {"x": 1.0}
    with pytest.raises(ValueError, match="least-used"):
        parse_strategy("least-used:1:2:3")
    with pytest.raises(ValueError, match="attributions"):
        strategy.rule.kept([], lambda i: 0, lambda i: 0, 10_000)


DISTRACTORS = [
    "The library opens at nine.",
    "Bananas are yellow.",
    "The bus is late today.",
    "My cat sleeps a lot.",
    "It rained on Monday.",
    "Tom likes chess.",
]


def remembered_session(store: Store) -> tuple[Session, str]:
    """A conversation whose first note holds a code the first answer repeats, then small
    talk: a rolling window drops the note (the oldest) first. The first answer is the
    local model's own; (the session, the note's message id)."""
    context = Context.create("You answer with facts from the conversation.")
    planted = Message.create("user", [TextPart("The secret code is 4721.")])
    context.append(planted)
    for note in DISTRACTORS[:3]:
        context.append(Message.create("user", [TextPart(note)]))
    context.append(Message.create("user", [TextPart("What is the secret code?")]))
    context.append(Message.create("assistant", [TextPart("The secret code is 4721.")]))
    for note in DISTRACTORS[3:]:
        context.append(Message.create("user", [TextPart(note)]))
        context.append(Message.create("assistant", [TextPart("Noted.")]))
    session = Session.create("Remembering", context)
    store.save_session(session)
    return session, planted.id


def test_least_used_keeps_the_message_an_attributed_answer_leaned_on_where_a_window_drops_it(
    tmp_path: Path, scoring_server: LocalModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store(tmp_path / "store")
    session, planted = remembered_session(store)
    history = history_of(session)
    assert len(history.calls) == 4  # one per answer: no call log
    with ServerScorer(scoring_server.base_url) as scorer:
        [made] = attribute_calls(store, session, [0], scorer, ablations=12)
    assert made.id is not None and made.message_id == history.items[history.calls[0]].id
    assert made.ranked()[0][0].message_id == planted, made.summary()
    loaded = Store(store.root).load_session(session.uuid)
    [kept] = saved_attributions(loaded)
    assert kept.weights == made.weights
    # size both strategies so that the last call must lose a few messages
    last = len(history.calls) - 1
    peak = sum(i.tokens for i in history.items[: history.calls[last]])
    specs = [f"rolling-tokens:{peak - 1}:0.75", f"least-used:{peak - 1}:0.75"]
    window, least = simulate(loaded, lab_strategies(loaded, specs))
    assert planted in window.dropped_at(last)
    assert planted not in least.dropped_at(last)
    assert least.tokens_saved > 0 and len(least.dropped_at(last)) >= len(window.dropped_at(last)) - 1

    # the command line reads the same attributions
    capsys.readouterr()
    code = main(
        ["compact", session.uuid, "--store", str(store.root), *(f"--strategy={s}" for s in specs), "--json"]
    )
    assert code == 0
    printed = {row["strategy"]: row for row in json.loads(capsys.readouterr().out)["strategies"]}
    assert printed[specs[1]]["tokens_saved"] == least.tokens_saved
    assert printed[specs[0]]["tokens_saved"] == window.tokens_saved
    assert main(["compact", session.uuid, "--store", str(store.root), f"--strategy={specs[1]}"]) == 0
    assert "drops first the messages its attributed answers leaned on least" in capsys.readouterr().out

    # the page: the ranking, the strategy beside the windows, and the same simulation
    at = open_app_page(store.root, "compaction", session=session.uuid, strategies=",".join(specs))
    assert not at.exception and not at.error, [e.value for e in at.error]
    [usage] = [d.value for d in at.dataframe if "use" in d.value.columns]
    assert usage["use"].tolist() == sorted(usage["use"].tolist(), reverse=True)
    assert usage["#"].iloc[0] == [i.id for i in history.items].index(planted)
    assert any(t.value.startswith("1 of 4 answers attributed") for t in at.text)
    [table] = [d.value for d in at.dataframe if "peak tokens" in d.value.columns]
    rows = {r["strategy"]: r for r in table.to_dict("records")}
    assert rows[specs[1]]["tokens saved"] == least.tokens_saved
    assert json.loads(at.get("plotly_chart")[0].proto.spec)["data"]


def test_the_compaction_page_attributes_the_answers_of_the_calls_typed(
    tmp_path: Path, scoring_server: LocalModelServer
) -> None:
    """Calls are typed as numbers and ranges (a long session has 50,000 of them: a list to
    pick from would be sent to the browser at every click)."""
    store = Store(tmp_path / "store")
    session, _ = remembered_session(store)
    at = open_app_page(store.root, "compaction", session=session.uuid)
    assert any(t.value.startswith("None of the 4 answers is attributed yet") for t in at.text)
    at.text_input(key="usage_calls").set_value("2-9").run()
    assert [e.value.replace("\\", "") for e in at.error] == [
        "'2-9': the session has 4 calls, numbered 0 to 3"
    ]
    at.text_input(key="usage_endpoint").set_value(scoring_server.base_url)
    at.text_input(key="usage_calls").set_value("0, 2").run()
    assert not at.error
    assert any(c.value.endswith("scored requests, each about half of its call's request") for c in at.caption)
    at.number_input(key="usage_ablations").set_value(4).run()
    at.button(key="usage_attribute").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert any(t.value.startswith("2 of 4 answers attributed") for t in at.text)
    assert len(saved_attributions(Store(store.root).load_session(session.uuid))) == 2
