"""The attribution benchmark (benchmarks/bench_attribution.py) without the model: the
default ``make bench`` leaves it out and writes its figures nowhere near RESULTS.md, its
cases vary the distractors and the planted message's place, and its figures come out of
a scorer that knows the answer (the planted message is worth 10 nats); the real figures
are the benchmark's own, on the local model (``make bench-attribution``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks import bench_attribution as ba
from benchmarks._harness import Bench
from benchmarks.run import RESULTS, bench_modules, opt_in, results_file
from replay import Scored


class KnowsTheCode:
    """Scores an answer by whether its request still holds the message that gives the code
    (+10 nats of log-probability) and the question (+1), counting what it is asked."""

    method = "fake"
    base_url = "http://fake"
    noisy = False

    def __init__(self) -> None:
        self.calls = 0

    def score(self, request: dict[str, Any], answer: dict[str, Any]) -> Scored:
        self.calls += 1
        code = str(answer["content"]).removesuffix(".").split()[-1]
        texts = [str(m.get("content")) for m in request["messages"]]
        held = 10.0 * any(code in t for t in texts) + 1.0 * any("What is" in t for t in texts)
        return Scored(["x"], [held - 12.0])


def test_make_bench_leaves_the_attribution_section_out_and_its_figures_have_their_own_file() -> None:
    assert "bench_attribution" not in bench_modules([])
    assert bench_modules(["attribution"]) == ["bench_attribution"]
    assert opt_in("bench_attribution") and not opt_in("bench_store")
    assert results_file("bench_attribution", RESULTS) == RESULTS.with_name("RESULTS-attribution.md")
    assert results_file("bench_store", RESULTS) == RESULTS
    elsewhere = Path("/tmp/out/results.md")
    assert results_file("bench_attribution", elsewhere) == Path("/tmp/out/RESULTS-attribution.md")


def test_the_cases_vary_the_distractors_and_where_the_planted_message_stands(tmp_path: Path) -> None:
    from soap_core import Store
    from soap_gen import planted_session

    cases = ba.planted_cases(20)
    assert [c.seed for c in cases] == list(range(20))
    assert {c.distractors for c in cases} == set(range(3, 9))
    store = Store(tmp_path)
    places = {planted_session(store, c.seed, c.distractors)[1] for c in cases}
    assert 1 in places and len(places) >= 5


def test_the_section_measures_every_k_with_one_cache_a_case_and_reports_each_figure(tmp_path: Path) -> None:
    bench = Bench(tmp_path, quick=True)
    bench.group = "Attribution"
    scorer = KnowsTheCode()
    outcomes = ba.measure(bench, scorer, ba.planted_cases(3), (8, 16), log=False)
    assert [(o.seed, o.k) for o in outcomes] == [(s, k) for s in range(3) for k in (8, 16)]
    assert all(o.hit and o.rank == 1 for o in outcomes)
    assert all(o.beats_random(1) for o in outcomes)
    # the K = 16 attribution sends fewer requests than it scores: the K = 8 ones are cached
    assert scorer.calls == sum(o.sent for o in outcomes)
    assert all(o.sent < o.calls for o in outcomes if o.k == 16)
    ba.report(bench, outcomes, (8, 16), quick=True)
    named = [f.what for f in bench.figures]
    for k in (8, 16):
        assert f"K={k}: planted message ranked first" in named
        assert f"K={k}: median LDS" in named
    first = next(f for f in bench.figures if f.what == "K=8: planted message ranked first")
    assert first.value == 100 and first.met is None  # 3 cases: no verdict on the goal
    assert "no case missed" in first.note
