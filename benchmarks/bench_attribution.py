"""Attribution: planted-fact cases on the local model, at K = 16, 32 and 64 ablations.

Issue 29's faithfulness goal, kept here rather than in a timed test: in a context of N
distractor notes and one that holds the fact the answer repeats (a secret code;
:func:`soap_gen.planted_session`), attribution ranks the planted message first, and
removing its top unit costs the answer more log-odds than removing one at random, in
most (more than half) of at least 20 generated cases. Cases vary the number of
distractors (3 to 8, so 6 to 11 units with the system prompt and the question) and,
by their seed, where the planted message stands. For each K the section reports the
hit rate, the rate at which the top-1 drop beats the random one, the mean top-1 and
top-3 drops against the random ones, the LDS, the scored requests and the time.

Scoring runs on the local SmolLM2 server (``LocalModelServer(deterministic=False)``, as
``soapwb attribute`` starts it; its scores repeat: every request is scored from the
model's state, not sampled). A case's three attributions share one score cache keyed by
the request's body: with the same seed, the K = 16 training draws are the first of the
K = 32 ones, which are the first of the K = 64 ones, so each larger K sends only the
requests the smaller ones did not. The seconds per attribution are therefore measured
with that cache; the figures also give the requests each attribution scores and the
server's seconds per request, which give its cost alone.

About 1,700 requests are sent: minutes on an idle machine (0.1 to 0.2 s a request), 45 on
a shared one running other model servers (1.5 s), too long for ``make bench``'s 15
minutes, so it is not one of its sections: ``make bench-attribution`` (``python -m benchmarks.run --only attribution``)
runs it and writes ``benchmarks/RESULTS-attribution.md``, leaving ``RESULTS.md`` as the
last ``make bench`` wrote it. ``--quick`` runs 2 cases at K = 8, a smoke run.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from analysis import Scorer, attribute
from benchmarks._harness import Bench
from replay import materialize
from soap_core import Store
from soap_gen import planted_session

OPT_IN = True
"""Not run by ``make bench``: only when named (``--only attribution``)."""
RESULTS_FILE = "RESULTS-attribution.md"
"""Where ``benchmarks/run.py`` writes this section's figures (beside RESULTS.md)."""

KS = (16, 32, 64)
QUICK_KS = (8,)
CASES = 20
QUICK_CASES = 2
DISTRACTORS = (3, 4, 5, 6, 7, 8)
"""The distractor counts the cases cycle through."""


class CachedScorer:
    """A scorer that scores each distinct (request, answer) once, and counts what it sent
    to the scorer behind it and the seconds that took. For a scorer whose scores repeat
    (teacher forcing), not a noisy one (a re-run would be a new sample)."""

    def __init__(self, inner: Scorer) -> None:
        self.inner = inner
        self.method = inner.method
        self.base_url = inner.base_url
        self.noisy = bool(getattr(inner, "noisy", False))
        if self.noisy:
            raise ValueError("a noisy scorer's scores are samples: caching them would hide its noise")
        self._cache: dict[str, Any] = {}
        self.sent = 0
        self.seconds = 0.0

    def score(self, request: dict[str, Any], answer: dict[str, Any]) -> Any:
        key = json.dumps([request, answer], sort_keys=True)
        if key not in self._cache:
            started = time.perf_counter()
            self._cache[key] = self.inner.score(request, answer)
            self.seconds += time.perf_counter() - started
            self.sent += 1
        return self._cache[key]


@dataclass(frozen=True)
class Case:
    seed: int
    distractors: int


@dataclass(frozen=True)
class Outcome:
    """One attribution of one case at one K."""

    seed: int
    distractors: int
    k: int
    planted: int
    """The planted message's index in the request (0 is the system prompt)."""
    units: int
    rank: int
    """Where the attribution ranks the planted message (1: first)."""
    first: str
    """The label of the unit ranked first."""
    drops: dict[int, tuple[float, float]]
    """Per top-k: (drop, mean random drop), in nats of log-odds."""
    lds: float | None
    calls: int
    sent: int
    """Of the calls, the requests the server scored (the rest came from the case's cache)."""
    seconds: float
    server_seconds: float

    @property
    def hit(self) -> bool:
        return self.rank == 1

    def beats_random(self, k: int = 1) -> bool:
        drop, random_drop = self.drops[k]
        return drop > random_drop


def planted_cases(count: int) -> list[Case]:
    """``count`` cases, seeds 0, 1, ..., the distractor counts cycling through DISTRACTORS."""
    return [Case(seed, DISTRACTORS[seed % len(DISTRACTORS)]) for seed in range(count)]


def measure(
    bench: Bench, scorer: Scorer, cases: Sequence[Case], ks: Sequence[int], *, log: bool = True
) -> list[Outcome]:
    """Every case attributed at every K (the smallest first, one cache a case)."""
    store = Store(bench.workdir / "attribution-store")
    outcomes = []
    for case in cases:
        session, planted = planted_session(store, case.seed, case.distractors)
        found = materialize(session, None, -1)
        cached = CachedScorer(scorer)
        for k in sorted(ks):
            sent, server = cached.sent, cached.seconds
            started = time.perf_counter()
            result = attribute(session, found, cached, ablations=k, seed=case.seed)
            seconds = time.perf_counter() - started
            ranked = [u.index for u, _ in result.ranked()]
            outcome = Outcome(
                seed=case.seed,
                distractors=case.distractors,
                k=k,
                planted=planted,
                units=len(result.units),
                rank=1 + ranked.index(planted),
                first=result.ranked()[0][0].label,
                drops={int(t["k"]): (float(t["drop"]), float(t["random_drop"])) for t in result.top_k},
                lds=result.lds,
                calls=result.calls,
                sent=cached.sent - sent,
                seconds=seconds,
                server_seconds=cached.seconds - server,
            )
            outcomes.append(outcome)
            if log:
                top1, random1 = outcome.drops[1]
                lds = "n/a" if outcome.lds is None else f"{outcome.lds:.2f}"
                print(
                    f"    seed {case.seed}, {case.distractors} distractors, planted #{planted}, K={k}: "
                    f"rank {outcome.rank}, top-1 drop {top1:+.1f} vs {random1:+.1f}, LDS {lds}, "
                    f"{outcome.sent}/{outcome.calls} requests sent, {seconds:.1f} s",
                    flush=True,
                )
    return outcomes


def _percent(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else float("nan")


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def report(bench: Bench, outcomes: Sequence[Outcome], ks: Sequence[int], *, quick: bool) -> None:
    """The figures: per K, then the cases and the time they took."""
    cases = sorted({(o.seed, o.distractors, o.planted, o.units) for o in outcomes})
    enough = len(cases) >= 20 and not quick
    scale = f"{len(cases)} cases" + ("" if enough else " (fewer than the issue's 20: no verdict)")
    for k in ks:
        at = [o for o in outcomes if o.k == k]
        n = len(at)
        hits = [o for o in at if o.hit]
        missed = [o for o in at if not o.hit]
        rate = _percent(len(hits), n)
        bench.figure(
            f"K={k}: planted message ranked first",
            rate,
            "%",
            "> 50% of ≥ 20 cases",
            (rate > 50) if enough else None,  # the "in most of at least 20 generated cases"
            baseline=f"chance: {_percent(1, round(_mean([o.units for o in at]))):.0f}% (one of the units)",
            note=f"{len(hits)} of {scale}; "
            + (
                "missed: "
                + "; ".join(
                    f"seed {o.seed} ({o.distractors} distractors) ranked it {_ordinal(o.rank)}, "
                    f"{o.first} first"
                    for o in missed
                )
                if missed
                else "no case missed"
            ),
        )
        beats = sum(o.beats_random(1) for o in at)
        beat_rate = _percent(beats, n)
        bench.figure(
            f"K={k}: top-1 drop above the random-1 drop",
            beat_rate,
            "%",
            "> 50% of ≥ 20 cases",
            (beat_rate > 50) if enough else None,
            baseline="each case's mean of 3 single random units removed",
            note=f"{beats} of {scale}; "
            + (
                "not: "
                + "; ".join(
                    f"seed {o.seed} ({o.drops[1][0]:+.1f} vs {o.drops[1][1]:+.1f} nats)"
                    for o in at
                    if not o.beats_random(1)
                )
                if beats < n
                else "every case"
            )
            + " (a random draw may remove the top unit too)",
        )
        for top in (1, 3):
            pairs = [o.drops[top] for o in at if top in o.drops]
            if not pairs:
                continue
            drops = [d for d, _ in pairs]
            randoms = [r for _, r in pairs]
            bench.figure(
                f"K={k}: mean top-{top} drop",
                _mean(drops),
                "nats",
                baseline=f"mean random-{top} drop {_mean(randoms):+.1f} nats",
                note=f"median {statistics.median(drops):+.1f} vs {statistics.median(randoms):+.1f} at random; "
                "log-odds of the answer lost with the top units removed",
            )
        defined = [o.lds for o in at if o.lds is not None]
        bench.figure(
            f"K={k}: median LDS",
            statistics.median(defined) if defined else float("nan"),
            "",
            note=f"mean {_mean(defined):.2f}, lowest {min(defined, default=float('nan')):.2f}, over "
            f"{len(defined)} cases"
            + (f" ({n - len(defined)} had held-out scores that did not vary)" if len(defined) < n else "")
            + f"; {max(4, k // 4)} held-out ablations each"
            + (" (on 4, a rank correlation takes few values: 1, 0.8, 0.4 ...)" if k // 4 <= 4 else ""),
        )
        per_request = sum(o.server_seconds for o in at) / max(1, sum(o.sent for o in at))
        calls = _mean([o.calls for o in at])
        bench.figure(
            f"K={k}: scored requests per attribution",
            calls,
            "requests",
            note=f"{_mean([o.sent for o in at]):.1f} of them sent to the server on average, the rest "
            "in the case's cache (from its smaller K, or an ablation drawn twice)",
        )
        bench.figure(
            f"K={k}: seconds per attribution",
            _mean([o.seconds for o in at]),
            "s",
            note="with the case's cache shared across its K"
            + (f"; alone, about {calls * per_request:.0f} s ({calls:.0f} requests)" if k != min(ks) else "")
            + f"; {per_request:.2f} s a request sent",
        )
    sent = sum(o.sent for o in outcomes)
    spread = sorted({o.distractors for o in outcomes})
    positions = [(planted, units) for _, _, planted, units in cases]
    bench.figure(
        "cases",
        len(cases),
        "cases",
        "≥ 20",
        enough if not quick else None,
        note=f"{spread[0]} to {spread[-1]} distractors; the planted message first among the notes in "
        f"{sum(1 for p, _ in positions if p == 1)}, last in {sum(1 for p, u in positions if p == u - 2)}, "
        "between in the rest" + ("" if not quick else "; quick: a smoke scale"),
    )
    total = sum(o.seconds for o in outcomes)
    rates = sorted(o.server_seconds / o.sent for o in outcomes if o.sent)
    bench.figure(
        "seconds per case (all its K)",
        total / max(1, len(cases)),
        "s",
        note=f"{total / 60:.1f} min in all; {sent:,} requests sent to the server, "
        f"{sum(o.server_seconds for o in outcomes) / max(1, sent):.2f} s each on average, "
        f"{rates[0] if rates else float('nan'):.2f} s in the fastest attribution and "
        f"{statistics.median(rates) if rates else float('nan'):.2f} s in the median one "
        "(a request is a prompt of 40 to 130 tokens on SmolLM2-135M; on a shared machine its "
        "time follows the load, which the header gives)",
    )


def run(bench: Bench) -> None:
    from local_model import LocalModelServer
    from replay import ServerScorer

    ks = QUICK_KS if bench.quick else KS
    cases = planted_cases(bench.scale(CASES, QUICK_CASES))
    with (
        LocalModelServer(deterministic=False, log_path=bench.workdir / "attribution-llm.log") as server,
        ServerScorer(server.base_url) as scorer,
    ):
        scorer.check()
        outcomes = measure(bench, scorer, cases, ks)
    report(bench, outcomes, ks, quick=bench.quick)


__all__ = ["KS", "CachedScorer", "Case", "Outcome", "measure", "planted_cases", "report", "run"]
