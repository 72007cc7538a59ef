"""Attribution by regenerate-and-compare (issue 29, point 1): the weaker method for an
endpoint that cannot score a given answer (hosted chat APIs). Each ablated request is
sent again and its answer compared with the original; unchanged re-runs give the noise
band the weights are read against, and the result says it is the weaker method. The
loop is checked on a scripted endpoint that answers from what the request holds; the
proof that it works is on the real local model, through the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from analysis import NOISE_RUNS, Attribution, attribute, estimate_calls, saved_attributions
from local_model import LocalModelServer
from replay import REGENERATING, RegenerateScorer, ScoreError, materialize
from soap_core import Store
from soap_core.runtime import Completion, LLMError
from soap_gen import planted_session
from soapwb.cli import main


class Reader:
    """An endpoint that repeats the code when the request still holds it, and answers
    with one of two phrasings in turn (the noise of a model at a temperature above 0)."""

    base_url = "http://reader.invalid/v1"
    model = "reader"

    def __init__(self, code: str) -> None:
        self.code, self.sent = code, 0

    def complete(self, request: dict[str, Any]) -> Completion:
        self.sent += 1
        said = json.dumps(request["messages"])
        text = f"The secret code is {self.code}." if f"code is {self.code}" in said else "I do not know it."
        if self.sent % 2:
            text = "Well. " + text
        return Completion({"choices": [{"message": {"role": "assistant", "content": text}}]}, 0.0)


def test_regenerating_ranks_the_message_the_answer_needs_and_measures_its_noise(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    session, planted = planted_session(store, seed=4, distractors=4)
    code = session.active_context.messages[-1].text().split()[-1].rstrip(".")
    found = materialize(session, None, -1)
    reader = Reader(code)
    result = attribute(session, found, RegenerateScorer(reader), ablations=16)
    assert result.method == REGENERATING and len(result.noise) == NOISE_RUNS
    assert 0 < result.band < 0.5  # the two phrasings differ by a word
    assert result.ranked()[0][0].index == planted, result.summary()
    assert result.ranked()[0][1] > result.band  # beyond the noise
    assert result.calls == estimate_calls(found, 16, noisy=True)
    assert reader.sent == result.calls - _cached(result)  # a removal drawn twice is sent once
    assert "weaker method, regenerate-and-compare" in result.trust()
    assert result.top_k[0]["drop"] > result.top_k[0]["random_drop"]
    again = Attribution.from_dict(json.loads(json.dumps(result.as_dict())))
    assert again.noise == result.noise and again.trust() == result.trust()


def _cached(result: Attribution) -> int:
    """Scored requests the attribution did not send again (the same ablation drawn twice)."""
    seen: set[tuple[int, ...]] = set()
    repeats = 0
    for ablation in result.ablations:
        key = tuple(ablation["removed"])
        repeats += key in seen
        seen.add(key)
    return repeats


def test_a_failing_endpoint_is_a_score_error_naming_it() -> None:
    class Down:
        base_url = "http://down.invalid/v1"

        def complete(self, request: dict[str, Any]) -> Completion:
            raise LLMError(self.base_url, "r1", "connection", "refused")

    with pytest.raises(ScoreError, match=r"down\.invalid.*connection: refused"):
        RegenerateScorer(Down()).score({"messages": []}, {"role": "assistant", "content": "x"})


def test_the_command_attributes_by_regenerating_on_the_local_model(
    tmp_path: Path, llm_server: LocalModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store(tmp_path / "store")
    session, planted = planted_session(store, seed=5, distractors=2)
    argv = ["attribute", session.uuid, "--at", "-1", "--ablations", "8", "--store", str(tmp_path / "store")]
    argv += ["--method", "regenerate", "--base-url", llm_server.base_url]
    assert main([*argv, "--temperature", "0", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["method"] == REGENERATING and len(printed["noise"]) == NOISE_RUNS
    assert "weaker method" in printed["trust"]
    [kept] = saved_attributions(Store(tmp_path / "store").load_session(session.uuid))
    assert kept.id == printed["id"] and kept.noise == printed["noise"]
    assert kept.band == 0.0  # temperature 0 on the deterministic server: the re-runs agree
    # the answer repeats the planted code: without it, no regenerated answer can
    assert planted in [u.index for u, _ in kept.ranked()[:2]], kept.summary()
    assert all(0.0 <= a["logit"] <= 1.0 for a in kept.ablations)  # similarities, not log-odds
    scoring = [a for a in argv if a not in ("--method", "regenerate")]
    assert main([*scoring, "--temperature", "0"]) == 2  # scoring reads the answer as given
    assert "--temperature applies to --method regenerate" in capsys.readouterr().err
