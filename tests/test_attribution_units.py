"""Attribution by part and by sentence (issue 29, point 1: ``--unit part|sentence``): how a
request is cut into units, what taking some out sends (the rest byte for byte as it was,
a message with every piece gone taken out whole, as at the message size), and, on the
real local model, a planted sentence inside one message ranked first, in the library,
the command and the Replay page."""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from analysis import (
    Attribution,
    ablated_request,
    attribute,
    request_units,
    saved_attributions,
    sentence_spans,
    unit_count,
)
from local_model import LocalModelServer
from replay import Materialized, ServerScorer, materialize
from soap_core import Context, Message, Session, Store, TextPart, ToolPart, ToolResultPart, ToolUsePart
from soap_gen import planted_paragraph
from soapwb.cli import main
from tests.apptest import open_app_page


def test_sentences_are_split_after_their_stop_and_at_line_breaks() -> None:
    text = 'First one. Second! "Third?" Fourth\nFifth, with 3.5 kg.'
    assert [text[a:b] for a, b in sentence_spans(text)] == [
        "First one. ",
        "Second! ",
        '"Third?" ',
        "Fourth\n",
        "Fifth, with 3.5 kg.",
    ]
    assert sentence_spans("  \n ") == [] and sentence_spans("") == []
    assert [(a, b) for a, b in sentence_spans("  Lead. ")] == [(0, 8)]


@given(st.text(alphabet=st.sampled_from("ab .!?\n\t\"')"), max_size=60))
def test_sentences_tile_their_text_so_keeping_them_all_changes_nothing(text: str) -> None:
    spans = sentence_spans(text)
    assert bool(spans) == bool(text.strip())
    if spans:
        assert spans[0][0] == 0 and spans[-1][1] == len(text)
        assert all(a[1] == b[0] for a, b in pairwise(spans))
        assert all(text[a:b].strip() for a, b in spans)


def _searcher() -> Materialized:
    """A request with a two-sentence system prompt, tools, a user message of two text
    parts (three sentences), two parallel calls and one message with both results."""
    search = ToolPart("search", "finds things", {"type": "object", "properties": {"q": {"type": "string"}}})
    context = Context.create("You search. You answer briefly.", [search])
    context.append(Message.create("user", [TextPart("Find the code. It is urgent."), TextPart("Thanks!")]))
    context.append(
        Message.create(
            "assistant",
            [ToolUsePart("c1", "search", '{"q": "code"}'), ToolUsePart("c2", "search", '{"q": "x"}')],
        )
    )
    context.append(
        Message(
            "tool_result",
            [
                ToolResultPart("c1", "The code is 7311. It expires soon.", "search"),
                ToolResultPart("c2", "Nothing found.", "search"),
            ],
        )
    )
    context.append(Message.create("assistant", [TextPart("The code is 7311.")]))
    return materialize(Session.create("Searcher", context), None, -1)


def test_units_by_part_and_sentence_are_named_and_a_tool_call_or_the_tools_stay_whole() -> None:
    found = _searcher()
    assert [u.at for u in request_units(found)] == ["#0", "#1", "#2", "#3", "#4"]
    parts = request_units(found, "part")
    assert [(u.at, u.label) for u in parts] == [
        ("#0", "the system prompt"),
        ("#1", "the tool definitions"),
        ("#2.1", "user message #1, part 1"),
        ("#2.2", "user message #1, part 2"),
        ("#3", "the call of search #1"),
        ("#4.1", "the tool result of search #1, result 1"),
        ("#4.2", "the tool result of search #1, result 2"),
    ]
    sentences = request_units(found, "sentence")
    assert [(u.at, u.preview) for u in sentences] == [
        ("#0.1", "You search."),
        ("#0.2", "You answer briefly."),
        ("#1", "search"),
        ("#2.1", "Find the code."),
        ("#2.2", "It is urgent."),
        ("#2.3", "Thanks!"),
        ("#3", 'search(q="code"); search(q="x")'),
        ("#4.1", "The code is 7311."),
        ("#4.2", "It expires soon."),
        ("#4.3", "Nothing found."),
    ]
    assert sentences[4].label == "user message #1, sentence 2" and sentences[4].tokens == 4
    assert all(u.message_id == found.messages[u.index].id for u in sentences)
    with pytest.raises(ValueError, match="word"):
        request_units(found, "word")


@pytest.mark.parametrize("unit", ["message", "part", "sentence"])
def test_nothing_taken_out_is_the_request_as_sent_and_a_message_emptied_of_pieces_goes_whole(
    unit: str,
) -> None:
    found = _searcher()
    units = request_units(found, unit)
    assert unit_count(found, unit) == len(units)  # what the estimates count, without the tokens
    assert ablated_request(found, set(), units)[0] == found.request
    for index in range(len(found.messages)):
        every = {p for p, u in enumerate(units) if u.index == index}
        cut, gone = ablated_request(found, every, units)
        whole, gone_whole = ablated_request(found, {index})
        assert cut == whole
        assert {units[p].index for p in gone} == gone_whole


def test_a_sentence_taken_out_leaves_every_other_character_and_a_result_its_call() -> None:
    found = _searcher()
    units = request_units(found, "sentence")
    at = {u.at: p for p, u in enumerate(units)}
    request, gone = ablated_request(found, {at["#2.2"], at["#4.1"], at["#0.1"]}, units)
    assert gone == {at["#2.2"], at["#4.1"], at["#0.1"]}
    sent, original = request["messages"], found.request["messages"]
    assert sent[0]["content"] == "You answer briefly."
    assert json.dumps(sent[1]) == json.dumps(original[1]).replace("It is urgent.", "")
    assert sent[2] == original[2]  # the calls
    assert sent[3] == {**original[3], "content": "It expires soon."} and sent[4] == original[4]
    assert request["tools"] == found.request["tools"]
    # a part of two taken out goes from the message; every result emptied keeps its call
    parts = request_units(found, "part")
    at = {u.at: p for p, u in enumerate(parts)}
    request, gone = ablated_request(found, {at["#2.1"], at["#4.1"]}, parts)
    assert "Find the code" not in json.dumps(request["messages"][1]) and "Thanks!" in json.dumps(request)
    assert [m.get("content") for m in request["messages"][3:5]] == ["", "Nothing found."]
    # the calls taken out take both results with them, each of its sentences
    request, gone = ablated_request(found, {at["#3"]}, parts)
    assert gone == {at["#3"], at["#4.1"], at["#4.2"]}
    assert [m["role"] for m in request["messages"]] == ["system", "user"]


def test_a_planted_sentence_is_ranked_first_and_its_record_reads_back(
    tmp_path: Path, scoring_server: LocalModelServer
) -> None:
    """Five notes in one user message, a sentence each: by message the answer can only
    lean on the whole paragraph; by sentence it leans on the planted one."""
    store = Store(tmp_path / "store")
    session, planted = planted_paragraph(store, seed=3)
    found = materialize(session, None, -1)
    with ServerScorer(scoring_server.base_url) as scorer:
        result = attribute(session, found, scorer, ablations=16, held_out=4, unit="sentence")
    top = result.ranked()[0][0]
    assert (top.index, top.piece) == (1, planted), result.summary()
    assert f"user message #1, sentence {planted}" in result.summary()
    assert result.top_k[0]["drop"] > result.top_k[0]["random_drop"], result.top_k
    assert len(result.units) == 7  # the system prompt, five sentences, the question
    # the message's weight (its badge on the Context page) is its strongest sentence's
    paragraph = found.messages[1].id
    assert paragraph is not None
    weight, strongest = result.message_weights()[paragraph]
    assert weight == max(
        (w for u, w in zip(result.units, result.weights, strict=True) if u.index == 1), key=abs
    )
    assert strongest.index == 1 and strongest.piece == planted
    again = Attribution.from_dict(json.loads(json.dumps(result.as_dict())))
    assert again.units == result.units and again.unit == "sentence"
    # 16 ablations for 7 units: no caution; fitted on fewer than the units, the trust line says so
    assert "underdetermined" not in result.trust()
    fewer = replace(result, ablations=[{**a, "set": "train"} for a in result.ablations[:4]])
    assert fewer.trust().startswith("Fitted on 4 ablations for 7 sentences: with fewer ablations than units")


def test_the_command_and_the_replay_page_attribute_by_sentence(
    tmp_path: Path, scoring_server: LocalModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store(tmp_path / "store")
    session, planted = planted_paragraph(store, seed=5, distractors=2)
    argv = ["attribute", session.uuid, "--at", "-1", "--ablations", "8", "--store", str(store.root)]
    assert main([*argv, "--unit", "sentence", "--json", "--base-url", scoring_server.base_url]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["unit"] == "sentence"
    assert [(u["index"], u.get("piece")) for u in printed["units"]] == [
        (0, None),
        (1, 1),
        (1, 2),
        (1, 3),
        (2, None),
    ]
    assert printed["ranked"][0]["at"] == f"#1.{planted}", printed["summary"]
    with pytest.raises(SystemExit) as refused:
        main([*argv, "--unit", "word"])
    assert refused.value.code == 2

    last = str(len(session.active_context.messages) - 1)
    at = open_app_page(store.root, "replay", session=session.uuid, message=last)
    at.text_input(key="replay_base_url").set_value(scoring_server.base_url).run()
    [unit] = [s for s in at.selectbox if s.label == "Unit"]
    assert unit.value == "sentence"  # the unit of the answer's latest attribution, the command's
    unit.set_value("part").run()  # each note is one part of one message: no finer than messages
    assert any("a random half of its 3 parts" in c.value for c in at.caption)
    unit.set_value("sentence").run()
    [k] = [n for n in at.number_input if n.label == "Ablations"]
    k.set_value(4).run()
    assert any(
        "Fewer ablations than sentences leave the fit underdetermined: 10 or more" in c.value
        for c in at.caption
    )
    k.set_value(16).run()
    assert any(c.value.startswith("29 scored requests") for c in at.caption), [c.value for c in at.caption]
    [button] = [b for b in at.button if b.label == "Attribute"]
    button.click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    newest = saved_attributions(Store(store.root).load_session(session.uuid))[-1]
    assert newest.unit == "sentence" and newest.seed == 0
    [table] = [d.value for d in at.dataframe if "weight" in d.value.columns]
    assert table["at"].tolist() == [u.at for u, _ in newest.ranked()]
    assert any("ablations of sentences" in c.value for c in at.caption)
