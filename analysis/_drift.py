"""Answer drift: would the model have answered the same under another compaction strategy?

At chosen calls, the history each strategy would have kept is sent to the model again
(through replay, so every run is saved as a labelled fork) and its answer compared
with the answer the model really gave. Summaries are written by a real agentic object.

A distance alone says little: a model at a temperature above 0 answers an unchanged
request differently too. The noise band (:func:`drift_band`) is measured the same way
as drift, from unchanged re-runs of what the session really sent at each call (the
request rebuilt as it was, :data:`AS_SENT`), so a strategy's drift can be called within
the noise or beyond it. "none" (the whole history, uncompacted) is one strategy among
the others: for a session that compacted, it is not what the model saw. A measurement is a plan of steps (:func:`drift_plan`), run one at a time
by a :class:`DriftRunner`, so that a page can say how many model calls it will make,
count them as they go, and stop between two.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from analysis._lab import (
    History,
    Simulation,
    Strategy,
    StripThinking,
    SummarizeOlder,
    history_of,
    simulate_items,
)
from replay import Endpoint, Materialized, Output, diff_outputs, materialize, replay
from soap_core import Context, Message, Session, SoapError, Store, TextPart, ThinkingPart, is_marked
from soap_core.runtime import AgenticObject, LLMEndpoint, ModelSettings, Runtime
from soap_core.runtime._compaction import SUMMARY_PREFIX, render_for_summary

Summarizer = Callable[[list[Message]], str]


class ConversationSummarizer(AgenticObject):
    """Writes the summary that replaces older messages."""

    system_prompt = "You summarize conversations in two or three sentences, keeping facts and numbers."
    settings = ModelSettings(max_tokens=96)


@functools.cache
def _scratch_store() -> str:
    """One folder per process for the summarizer's own sessions (kept out of the user's store)."""
    return tempfile.mkdtemp(prefix="soapwb-summaries-")


def model_summarizer(endpoint: LLMEndpoint) -> Summarizer:
    """A summarizer object on the given endpoint, keeping its own sessions out of the store."""
    scratch = _scratch_store()
    writer = ConversationSummarizer(runtime=Runtime(scratch, endpoint))

    def summarize(messages: list[Message]) -> str:
        return str(writer.invoke("Summarize this conversation:\n\n" + render_for_summary(messages)))

    return summarize


@dataclass
class DriftRun:
    strategy: str
    call: int
    distance: float | None
    identical: bool | None
    fork_id: str
    error: str | None = None


@dataclass
class DriftRow:
    """One line of the comparison table."""

    strategy: str
    peak_tokens: int
    tokens_sent: int
    compactions: int
    tokens_saved: int
    drift: float | None
    """Mean distance of its answers from the original ones (None: not measured)."""
    runs: list[DriftRun] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def view_messages(
    history: History, simulation: Simulation, strategy: Strategy, call: int, summarizer: Summarizer | None
) -> list[Message]:
    """What ``strategy`` would have sent at ``call``, as messages."""
    cut = history.calls[call]
    dropped = set(simulation.dropped_at(call))
    kept = [history.messages[i.id] for i in history.items[:cut] if i.id not in dropped]
    if isinstance(strategy, StripThinking):
        stripped = []
        for message in kept:
            copy = message.copy()
            copy.content = [p for p in message.content if not isinstance(p, ThinkingPart)]
            stripped.append(copy)
        return stripped
    if isinstance(strategy, SummarizeOlder) and dropped:
        gone = [history.messages[i] for i in (i.id for i in history.items[:cut]) if i in dropped]
        text = summarizer(gone) if summarizer else "(no summarizer)"
        note = Message.create("user", [TextPart(SUMMARY_PREFIX + text)])
        specials = [m for m in kept if m.is_special]
        return [*specials, note, *(m for m in kept if not m.is_special)]
    return kept


BASELINE = "none"
"""The strategy that keeps the whole history (no compaction)."""
AS_SENT = "as sent"
"""The request the session really sent at a call, replayed unchanged: the noise band's
samples. (Built from the "none" strategy before, which for a session that compacted is
not what the model saw: a band of 1.00–1.00 that called every strategy noise.)"""


@dataclass(frozen=True)
class DriftStep:
    """One run of a drift measurement: a strategy's view of the history sent at one call,
    or (``sample`` 1 and up) the unchanged history sent again, for the noise band."""

    strategy: str
    call: int
    sample: int = 0
    """0: the strategy's own run; 1 and up: an unchanged re-run measuring the noise."""
    model_calls: int = 1
    """The model calls the run makes: 2 when a summary has to be written first."""

    @property
    def noise(self) -> bool:
        return self.strategy == AS_SENT

    @property
    def label(self) -> str:
        """The label of the fork the run is saved as."""
        if self.noise:
            return f"drift noise sample {self.sample} at call {self.call}"
        return f"drift {self.strategy} at call {self.call}"


def drift_plan(
    history: History,
    strategies: Sequence[Strategy],
    simulations: Sequence[Simulation],
    calls: Sequence[int],
    noise_samples: int = 0,
) -> list[DriftStep]:
    """Every run a measurement makes, call by call (so a measurement stopped early has
    whole calls, each with its noise samples): each strategy, then ``noise_samples``
    unchanged re-runs of the request as the session sent it. A summarizing strategy that dropped messages by a call asks the
    model for the summary too, which the steps count."""
    steps: list[DriftStep] = []
    for call in calls:
        if not 0 <= call < len(history.calls):
            raise ValueError(f"call {call} does not exist: the session has {len(history.calls)} calls")
        for strategy, simulation in zip(strategies, simulations, strict=True):
            summary = isinstance(strategy, SummarizeOlder) and bool(simulation.dropped_at(call))
            steps.append(DriftStep(strategy.name, call, 0, 2 if summary else 1))
        steps += [DriftStep(AS_SENT, call, sample) for sample in range(1, noise_samples + 1)]
    return steps


def model_calls(steps: Sequence[DriftStep]) -> int:
    """How many model calls the steps make (runs plus the summaries they need)."""
    return sum(step.model_calls for step in steps)


class DriftRunner:
    """Runs the steps of a drift measurement one at a time, so that a caller can count
    them, show how far it got and stop between two of them; every run is saved as a
    replay fork as soon as it is made."""

    def __init__(
        self,
        store: Store,
        session: Session,
        strategies: Sequence[Strategy],
        endpoint: Endpoint,
        summarizer: Summarizer | None = None,
    ) -> None:
        self.store, self.session, self.endpoint, self.summarizer = store, session, endpoint, summarizer
        self.history = history_of(session)
        self.strategies = {s.name: s for s in strategies}
        simulated = simulate_items(self.history.items, self.history.calls, list(self.strategies.values()))
        self.simulations = {s.strategy: s for s in simulated}

    def run(self, step: DriftStep) -> DriftRun:
        if step.strategy == AS_SENT:
            found = sent_at(self.session, self.history, step.call)  # sent again unchanged
            return _replayed(self.store, self.session, found, self.endpoint, step.label, AS_SENT, step.call)
        strategy = self.strategies[step.strategy]
        return _drift_run(
            self.store,
            self.session,
            self.history,
            self.simulations[step.strategy],
            strategy,
            step.call,
            self.endpoint,
            self.summarizer,
            step.label,
        )


def drift_rows(
    simulations: Sequence[Simulation], results: Sequence[tuple[DriftStep, DriftRun]]
) -> list[DriftRow]:
    """The comparison table from the runs made so far (the noise samples left out): each
    strategy's drift is the mean distance of its answers from the original ones."""
    rows = []
    for simulation in simulations:
        runs = [run for step, run in results if not step.noise and step.strategy == simulation.strategy]
        measured = [r.distance for r in runs if r.distance is not None]
        rows.append(
            DriftRow(**simulation.summary(), drift=statistics.mean(measured) if measured else None, runs=runs)
        )
    return rows


MIN_DRIFT_SAMPLES = 2
"""A band needs two unchanged samples: one alone would pass for a band of width zero."""


@dataclass(frozen=True)
class DriftBand:
    """How far unchanged re-runs land from the original answers, measured the way drift
    is: each unchanged sample's mean distance from the original answers over the calls
    it ran at. (The replay page's noise band is the spread between unchanged re-runs;
    drift is a distance from the original answer, so its band is one too.)"""

    sample_drifts: tuple[float, ...]
    """One per unchanged re-run of the requests as sent (each noise sample over its calls)."""
    per_call: dict[int, tuple[float, ...]] = field(default_factory=dict)
    """The distances of the unchanged runs at each call."""

    @property
    def samples(self) -> int:
        return len(self.sample_drifts)

    @property
    def low(self) -> float:
        return min(self.sample_drifts)

    @property
    def high(self) -> float:
        return max(self.sample_drifts)

    def verdict(self, drift: float) -> str:
        """``within noise``, ``beyond noise`` (further from the original than any unchanged
        sample) or ``below noise`` (closer to it than any unchanged sample)."""
        return verdict_in(drift, self.low, self.high)

    def call_range(self, call: int) -> tuple[float, float] | None:
        """The spread of the unchanged runs at one call (None below two of them)."""
        found = self.per_call.get(call, ())
        return (min(found), max(found)) if len(found) >= MIN_DRIFT_SAMPLES else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "low": self.low,
            "high": self.high,
            "sample_drifts": list(self.sample_drifts),
            "per_call": {str(k): list(v) for k, v in self.per_call.items()},
        }


def verdict_in(value: float, low: float, high: float) -> str:
    if value > high:
        return "beyond noise"
    if value < low:
        return "below noise"
    return "within noise"


def drift_band(results: Sequence[tuple[DriftStep, DriftRun]]) -> DriftBand | None:
    """The noise band of the unchanged re-runs of the requests as sent made so far; None
    with fewer than two samples that have a distance."""
    by_sample: dict[int, list[float]] = {}
    per_call: dict[int, list[float]] = {}
    for step, run in results:
        if step.strategy != AS_SENT or run.distance is None:
            continue
        by_sample.setdefault(step.sample, []).append(run.distance)
        per_call.setdefault(step.call, []).append(run.distance)
    drifts = tuple(round(statistics.mean(d), 6) for _, d in sorted(by_sample.items()))
    if len(drifts) < MIN_DRIFT_SAMPLES:
        return None
    return DriftBand(drifts, {call: tuple(d) for call, d in per_call.items()})


def compare(
    store: Store,
    session: Session,
    strategies: Sequence[Strategy],
    drift_at: Sequence[int] = (),
    endpoint: Endpoint | None = None,
    summarizer: Summarizer | None = None,
) -> list[DriftRow]:
    """The comparison table; with ``drift_at`` and an endpoint, answers are re-run."""
    return measure(store, session, strategies, drift_at, endpoint, summarizer)[0]


def measure(
    store: Store,
    session: Session,
    strategies: Sequence[Strategy],
    drift_at: Sequence[int] = (),
    endpoint: Endpoint | None = None,
    summarizer: Summarizer | None = None,
    *,
    noise_samples: int = 0,
    on_step: Callable[[int, int, DriftStep], None] | None = None,
) -> tuple[list[DriftRow], DriftBand | None, list[tuple[DriftStep, DriftRun]]]:
    """The comparison table, the noise band of ``noise_samples`` unchanged re-runs of
    each call as sent (None below two), and every run; ``on_step(done, total, step)``
    before each run."""
    history = history_of(session)
    simulations = simulate_items(history.items, history.calls, strategies)
    if endpoint is None or not drift_at:
        return drift_rows(simulations, []), None, []
    runner = DriftRunner(store, session, strategies, endpoint, summarizer)
    steps = drift_plan(history, strategies, simulations, drift_at, noise_samples)
    order = [x.name for x in strategies]
    by_strategy = sorted(steps, key=lambda s: order.index(s.strategy) if s.strategy in order else len(order))
    results = []
    for done, step in enumerate(by_strategy):
        if on_step is not None:
            on_step(done, len(by_strategy), step)
        results.append((step, runner.run(step)))
    return drift_rows(simulations, results), drift_band(results), results


def _origin_context(session: Session, produced: str) -> Context:
    """The context the message was produced in: never a replay fork (a drift run at a
    later call copies the earlier messages, and a store read back may list it first)."""
    holding = [c for c in session.contexts.values() if any(m.id == produced for m in c.messages)]
    return next((c for c in holding if not is_marked(c)), holding[0])


def sent_at(session: Session, history: History, call: int) -> Materialized:
    """The request of ``call`` (of :func:`analysis.history_of`) rebuilt as the session sent it."""
    if not 0 <= call < len(history.calls):
        raise ValueError(f"call {call} does not exist: the session has {len(history.calls)} calls")
    produced = history.items[history.calls[call]].id
    return materialize(session, _origin_context(session, produced), produced)


def _replayed(
    store: Store, session: Session, found: Any, endpoint: Endpoint, label: str, strategy: str, call: int
) -> DriftRun:
    """One drift run of ``found`` (a materialized request, or a strategy's variant of it)
    and its distance from the answer the model really gave."""
    [run] = replay(store, session, found, endpoint, label=label)
    if not run.ok:
        return DriftRun(strategy, call, None, None, run.fork_id if run.saved else "", run.error)
    original = session.contexts[found.context_id].messages[found.index]
    diff = diff_outputs(Output.of(original), Output.of(run.output))
    return DriftRun(strategy, call, diff.distance, diff.identical, run.fork_id)


def _drift_run(
    store: Store,
    session: Session,
    history: History,
    simulation: Simulation,
    strategy: Strategy,
    call: int,
    endpoint: Endpoint,
    summarizer: Summarizer | None,
    label: str,
) -> DriftRun:
    found = sent_at(session, history, call)
    try:
        messages = view_messages(history, simulation, strategy, call, summarizer)
    except SoapError as exc:  # the summary could not be written: this run fails, not the table
        return DriftRun(strategy.name, call, None, None, "", f"summary not written: {exc}")
    variant = dataclasses.replace(found, messages=messages, notes=[*found.notes, f"strategy {strategy.name}"])
    return _replayed(store, session, variant, endpoint, label, strategy.name, call)
