"""The smallest set of messages that changes a check of the model's answer (issue 29,
point 3): ddmin's search, the checks, and isolate on the real local model, which finds a
planted message with fewer runs than removing one message at a time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from analysis import (
    Check,
    IsolateError,
    attribute,
    ddmin,
    isolate,
    request_units,
    save_attribution,
    saved_isolations,
)
from local_model import LocalModelServer
from replay import Output, Overrides, ServerScorer, materialize
from soap_core import REPLAY_KEY, Store
from soap_core.runtime import LLMEndpoint
from soap_gen import planted_session
from soapwb.cli import main
from tests.apptest import open_app_page


def counting(cause: set[int]) -> tuple[list[frozenset[int]], object]:
    asked: list[frozenset[int]] = []

    def test(chosen: frozenset[int]) -> bool:
        asked.append(chosen)
        return cause <= chosen

    return asked, test


@pytest.mark.parametrize("cause", [{0}, {13}, {5, 9}, {2, 3, 11}])
def test_ddmin_finds_a_cause_in_fewer_tests_than_one_at_a_time_when_it_is_small(cause: set[int]) -> None:
    asked, test = counting(cause)
    found = ddmin(list(range(16)), test)  # type: ignore[arg-type]
    assert found is not None and set(found) == cause
    if len(cause) == 1:
        assert len(asked) < 16
    assert len(set(asked)) == len(asked) or len(cause) > 1  # a single cause is never asked twice


def test_ddmin_says_none_when_no_part_flips_and_keeps_the_order_it_was_given() -> None:
    assert ddmin(list(range(8)), lambda chosen: False) is None
    asked, test = counting({3})
    assert ddmin([3, 7, 1, 0], test) == [3]  # type: ignore[arg-type]
    assert asked[0] == {3, 7}  # the first half in the order given: the likeliest first


def test_checks_read_and_ask_what_they_say() -> None:
    answer = Output('{"status": "ok", "items": [1, 2]}', (("search", {"q": "x"}),))
    assert Check.parse("contains:ok").holds(answer) and not Check.parse("lacks:ok").holds(answer)
    assert Check.parse("calls:search").holds(answer) and Check.parse("no-call:grep").holds(answer)
    assert Check.parse("json:status=ok").holds(answer) and Check.parse("json:items.1=2").holds(answer)
    assert not Check.parse("json:items.5=2").holds(answer) and not Check.parse("json:missing=ok").holds(
        answer
    )
    assert Check.parse(
        f"cmd:{sys.executable} -c 'import sys; sys.exit(0 if \"ok\" in sys.stdin.read() else 1)'"
    ).holds(answer)
    assert not Check.parse("cmd:grep -q nothing-like-this").holds(answer)
    with pytest.raises(IsolateError, match="exited 2"):
        Check.parse("cmd:exit 2").holds(answer)
    for bad in ("contains", "nonsense:x", "json:status", "json:=x"):
        with pytest.raises(IsolateError):
            Check.parse(bad)


def test_isolate_from_the_attributions_ranking_finds_the_planted_message_with_fewer_runs_than_one_by_one(
    tmp_path: Path, llm_server: LocalModelServer, scoring_server: LocalModelServer
) -> None:
    store = Store(tmp_path / "store")
    session, planted = planted_session(store, seed=0, distractors=6)
    code = session.active_context.messages[-1].text().split()[-1].rstrip(".")
    found = materialize(session, None, -1)
    with ServerScorer(scoring_server.base_url) as scorer:
        save_attribution(store, session, attribute(session, found, scorer, ablations=8))
    check = Check.parse(f"contains:{code}")
    endpoint = LLMEndpoint(llm_server.base_url)
    result = isolate(
        store, session, found, endpoint, check, noise=2, base=Overrides(max_tokens=16, temperature=0)
    )
    assert result.ordered_by.startswith("attribution ")
    assert result.usual is True and result.chance == 0.0  # temperature 0 on the deterministic server
    # The answer needs the code and the question: removing either one flips the check, and
    # ddmin, splitting in the attribution's order, finds one of the two in fewer runs than
    # removing one message at a time would take.
    question = len(found.messages) - 1
    assert result.cause in ([planted], [question]), result.summary()
    assert result.order.index(result.cause[0]) < 2  # the attribution ranked it first or second
    [its_run] = [t for t in result.trials if t.removed == result.cause]
    assert its_run.holds is False and code not in its_run.text
    assert len(result.trials) < result.one_by_one == len(request_units(found))
    assert "flips `contains:" in result.summary()
    # every run is a fork of the session, with its call
    again = store.load_session(session.uuid)
    runs = [c for c in again.contexts.values() if c.extra.get(REPLAY_KEY, {}).get("label") == "isolate"]
    assert len(runs) == result.calls
    assert all(t.fork_id in again.contexts for t in [*result.noise, *result.trials])


def test_the_command_isolates_and_keep_finds_what_alone_gives_the_answer(
    tmp_path: Path, llm_server: LocalModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store(tmp_path / "store")
    session, planted = planted_session(store, seed=1, distractors=3)
    code = session.active_context.messages[-1].text().split()[-1].rstrip(".")
    argv = [
        "isolate",
        session.uuid,
        "--at",
        "-1",
        "--check",
        f"contains:{code}",
        "--noise",
        "1",
        "--max-tokens",
        "16",
        "--temperature",
        "0",  # the request sets none: the server's default samples, from a seed no one set
    ]
    argv += ["--store", str(tmp_path / "store"), "--base-url", llm_server.base_url]
    assert main([*argv, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    [kept] = saved_isolations(Store(tmp_path / "store").load_session(session.uuid))
    assert kept.id == printed["id"] and kept.as_dict() == printed  # kept whole, read back the same
    assert printed["calls"] == 1 + len(printed["trials"]) and printed["ordered_by"].startswith("position")
    cause = printed["cause"]
    assert cause, printed["summary"]
    [its_run] = [t for t in printed["trials"] if t["removed"] == cause]  # the run that showed it flips
    assert its_run["holds"] is False and code not in its_run["text"] and printed["usual"] is True
    assert main([*argv, "--keep"]) == 0
    out = capsys.readouterr().out
    assert len(saved_isolations(Store(tmp_path / "store").load_session(session.uuid))) == 2
    assert "kept as isolation" in out
    assert "alone still give `contains:" in out and f"user message #{planted}" in out
    assert "one-by-one removal takes" in out
    assert main([*argv[:5], "nonsense", *argv[6:]]) == 2
    assert "--check 'nonsense'" in capsys.readouterr().err


def test_the_replay_page_isolates_keeps_the_result_and_shows_every_run_after_a_reload(
    tmp_path: Path, llm_server: LocalModelServer
) -> None:
    store = Store(tmp_path / "store")
    session, planted = planted_session(store, seed=1, distractors=2)
    code = session.active_context.messages[-1].text().split()[-1].rstrip(".")
    last = str(len(session.active_context.messages) - 1)
    at = open_app_page(store.root, "replay", session=session.uuid, message=last)
    [button] = [b for b in at.button if b.label == "Isolate"]
    assert button.disabled  # no check yet
    at.text_input(key="replay_base_url").set_value(llm_server.base_url).run()
    [check] = [t for t in at.text_input if t.label == "Check"]
    check.set_value("nonsense:1").run()
    [button] = [b for b in at.button if b.label == "Isolate"]
    button.click().run()
    assert not at.exception and any("nonsense" in e.value for e in at.error)
    [check] = [t for t in at.text_input if t.label == "Check"]
    check.set_value(f"contains:{code}").run()
    [noise] = [n for n in at.number_input if n.label == "Unchanged runs"]
    noise.set_value(1).run()
    [button] = [b for b in at.button if b.label == "Isolate"]
    button.click().run(timeout=300)
    assert not at.exception and not at.error, [e.value for e in at.error]
    [kept] = saved_isolations(Store(store.root).load_session(session.uuid))

    later = open_app_page(store.root, "replay", session=session.uuid, message=last)  # a reload
    assert kept.summary()[1:] + "." in [t.value[1:] for t in later.text]
    [runs] = [d.value for d in later.dataframe if "removed" in d.value.columns]
    assert runs["run"].tolist() == ["unchanged"] + ["ddmin"] * len(kept.trials)
    assert runs["fork"].tolist() == [t.fork_id[:8] for t in [*kept.noise, *kept.trials]]  # type: ignore[index]
    said = {None: "failed", True: "holds", False: "does not hold"}
    assert runs["check"].tolist() == [said[t.holds] for t in [*kept.noise, *kept.trials]]
    captions = [c.value.replace("\\", "") for c in later.caption]
    assert any(f"against {kept.one_by_one} for one-by-one removal" in c for c in captions), captions
    del planted  # which message flips it is the model's: the library's tests above judge that
