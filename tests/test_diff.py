"""Diffs, distances and noise bands on hand-made outputs; edits and drops of a replay."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay import (
    Output,
    Overrides,
    diff_outputs,
    distance,
    materialize,
    noise_band,
    replay_messages,
    word_diff,
)
from soap_core import SoapError, Store


def test_word_diff_marks_what_was_deleted_and_inserted() -> None:
    assert word_diff("the capital is Paris", "the capital is Rome today") == [
        ("equal", "the capital is"),
        ("delete", "Paris"),
        ("insert", "Rome today"),
    ]
    assert word_diff("", "") == []


def test_distance_is_zero_for_equal_outputs_and_one_for_disjoint_ones() -> None:
    assert distance(Output("a b c"), Output("a  b c")) == 0.0
    assert distance(Output("a b"), Output("c d")) == 1.0
    assert distance(Output("a b c d"), Output("a b c e")) == 0.25
    calls = Output("", (("grep", {"pattern": "ERROR"}),))
    assert distance(calls, Output("", (("grep", {"pattern": "WARN"}),))) == 1.0
    assert distance(Output(""), Output("")) == 0.0


def test_tool_calls_are_compared_as_parsed_json_ignoring_call_ids() -> None:
    a = Output("", (("grep", {"pattern": "ERROR", "max_lines": 5}),))
    b = Output("", (("grep", {"max_lines": 5, "pattern": "ERROR"}),))
    assert diff_outputs(a, b).identical
    c = Output("", (("grep", {"pattern": "WARN", "max_lines": 5}),))
    changed = diff_outputs(a, c).tool_calls["values_changed"]
    assert changed == {"root[0][1]['pattern']": {"new_value": "WARN", "old_value": "ERROR"}}


def test_usage_and_latency_deltas() -> None:
    diff = diff_outputs(
        Output("x", usage={"completion_tokens": 5, "model": "m"}, latency_s=1.0),
        Output("x", usage={"completion_tokens": 8, "model": "m"}, latency_s=0.5),
    )
    assert diff.usage_delta == {"completion_tokens": 3} and diff.latency_delta_s == -0.5


def test_noise_band_counts_agreement_and_pairwise_distances() -> None:
    band = noise_band([Output("a b"), Output("a b"), Output("a c"), Output("a b")])
    assert band.samples == 4 and band.agreement_rate == 0.75
    assert band.distances == [0.0, 0.0, 0.0, 0.5, 0.5, 0.5] and band.upper == 0.5
    assert band.contains(0.5) and not band.contains(0.51)
    assert noise_band([]).samples == 0


def test_dropping_a_tool_call_drops_its_result_too(store_copy: Path) -> None:
    session = Store(store_copy).load_session("3f0c")
    found = materialize(session, None, 5)  # sent: the fixture parent's 7 messages
    call = next(i for i, m in enumerate(found.messages) if m.tool_uses())
    kept = replay_messages(found, Overrides(drops=(call,)))
    assert [m.role for m in kept] == ["system", "tool", "user", "assistant", "user"]
    question = next(i for i, m in enumerate(found.messages) if m.text().startswith("What number"))
    edited = replay_messages(found, Overrides(edits={question: "What is 6 x 7?"}, system_prompt="Be brief."))
    assert edited[question].text() == "What is 6 x 7?" and edited[0].text() == "Be brief."
    assert found.messages[question].text() == "What number did I ask you to remember?"  # copies were edited
    with pytest.raises(SoapError, match="has no text to edit"):
        replay_messages(found, Overrides(edits={1: "tools have no text"}))
    with pytest.raises(SoapError, match="cannot drop message 9"):
        replay_messages(found, Overrides(drops=(9,)))


def test_the_command_line_and_the_page_take_one_rule_for_the_noise_band() -> None:
    """One sample is no band (it would read as a band of width 0). With noise runs the
    band is theirs, joined by the runs only when those changed nothing; without, runs that
    changed no message are samples of one request (at the parameters asked for)."""
    from replay import Overrides, unchanged_band

    same, other = Output("a b"), Output("a c")
    untouched, warmer, edited = Overrides(), Overrides(temperature=1.0), Overrides(edits={1: "x"})
    assert unchanged_band([same], [], untouched) is None
    assert unchanged_band([], [same], untouched) is None
    both = unchanged_band([same], [other], untouched)
    assert both is not None and both.samples == 2 and both.upper == 0.5
    assert unchanged_band([same], [other], warmer) is None  # a warmer run is no sample of the original
    warm = unchanged_band([same, other], [], warmer)
    assert warm is not None and warm.samples == 2  # but warmer runs are samples of each other
    assert unchanged_band([same, same], [], edited) is None
