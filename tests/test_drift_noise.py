"""Drift against a noise band, and a measurement counted before and while it runs: the
plan's model calls, the band of unchanged re-runs (measured as drift is), the verdicts
and sentences the Compaction page shows, and a job that stops between two calls."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from analysis import (
    AS_SENT,
    DriftBand,
    DriftRun,
    DriftRunner,
    DriftStep,
    NoCompaction,
    RollingMessages,
    SummarizeOlder,
    drift_band,
    drift_plan,
    drift_rows,
    history_of,
    model_calls,
    simulate_items,
)
from local_model import LocalModelServer
from replay import materialize
from soap_core import REPLAY_KEY, Store
from soap_core.runtime import LLMEndpoint
from workbench.compaction_views import (
    CONFIRM_ABOVE,
    DriftJob,
    band_note,
    comparison_table,
    confirm_above,
    drift_errors,
    drift_line,
    drift_runs_table,
    judged,
    new_job,
    outcome_note,
    paused_note,
    plan_note,
    progress_text,
)


def run(strategy: str, call: int, distance: float | None, error: str | None = None) -> DriftRun:
    return DriftRun(strategy, call, distance, distance == 0 if distance is not None else None, "fork", error)


def noise(call: int, sample: int, distance: float) -> tuple[DriftStep, DriftRun]:
    return DriftStep(AS_SENT, call, sample), run(AS_SENT, call, distance)


def measured(strategy: str, call: int, distance: float | None) -> tuple[DriftStep, DriftRun]:
    return DriftStep(strategy, call), run(strategy, call, distance)


def analyst(store: Path) -> str:
    return next(s.uuid for s in Store(store).sessions() if s.role == "Analyst")


class TestThePlan:
    def test_it_runs_every_strategy_and_every_noise_sample_at_every_call(self, workbench_store: Path) -> None:
        history = history_of(Store(workbench_store).load_session(analyst(workbench_store)))
        strategies = [NoCompaction(), RollingMessages(3)]
        simulations = simulate_items(history.items, history.calls, strategies)
        steps = drift_plan(history, strategies, simulations, [2, 5], noise_samples=2)
        assert [(s.strategy, s.call, s.sample) for s in steps] == [
            ("none", 2, 0),
            ("rolling-messages:3", 2, 0),
            (AS_SENT, 2, 1),
            (AS_SENT, 2, 2),
            ("none", 5, 0),
            ("rolling-messages:3", 5, 0),
            (AS_SENT, 5, 1),
            (AS_SENT, 5, 2),
        ]
        assert model_calls(steps) == 8
        assert [s.label for s in steps[:3]] == [
            "drift none at call 2",
            "drift rolling-messages:3 at call 2",
            "drift noise sample 1 at call 2",
        ]

    def test_a_summary_the_strategy_must_write_is_a_model_call_too(self, workbench_store: Path) -> None:
        history = history_of(Store(workbench_store).load_session(analyst(workbench_store)))
        strategies = [NoCompaction(), SummarizeOlder(100, 2)]
        simulations = simulate_items(history.items, history.calls, strategies)
        last = len(history.calls) - 1
        assert simulations[1].dropped_at(last) and not simulations[1].dropped_at(0)
        steps = drift_plan(history, strategies, simulations, [0, last])
        assert [s.model_calls for s in steps] == [1, 1, 1, 2]
        assert model_calls(steps) == 5
        assert "plus 1 summary written by the model" in plan_note(steps)

    def test_a_call_that_does_not_exist_is_refused_before_any_run(self, workbench_store: Path) -> None:
        history = history_of(Store(workbench_store).load_session(analyst(workbench_store)))
        strategies = [NoCompaction()]
        simulations = simulate_items(history.items, history.calls, strategies)
        with pytest.raises(ValueError, match="call 99 does not exist"):
            drift_plan(history, strategies, simulations, [99])

    def test_the_note_spells_out_calls_times_strategies_plus_the_noise_samples(self) -> None:
        steps = [
            DriftStep(s, c) for c in range(12) for s in ("none", "rolling-tokens:600:0.5", "strip-thinking")
        ]
        steps += [DriftStep(AS_SENT, c, k) for c in range(12) for k in (1, 2)]
        assert plan_note(steps) == (
            "Measuring drift makes 60 model calls: 12 calls × 3 strategies (none, rolling-tokens:600:0.5, "
            "strip-thinking) = 36 runs, plus 12 × 2 unchanged re-runs for the noise band = 24."
        )


class TestTheNoiseBand:
    def test_each_unchanged_sample_is_its_mean_distance_over_the_calls(self) -> None:
        """Only the re-runs of the requests as sent make the band: "none" (the whole
        history) is a strategy like the others, not what a compacted session sent."""
        results = [
            measured("none", 1, 0.30),
            measured("none", 2, 0.40),
            noise(1, 1, 0.50),
            noise(2, 1, 0.46),
            noise(1, 2, 0.20),
            noise(2, 2, 0.50),
            measured("rolling-messages:3", 1, 0.9),
        ]
        band = drift_band(results)
        assert band is not None
        assert band.sample_drifts == (0.48, 0.35)
        assert (band.low, band.high, band.samples) == (0.35, 0.48, 2)
        assert band.call_range(1) == (0.2, 0.5) and band.call_range(2) == (0.46, 0.5)
        assert band.call_range(7) is None

    def test_the_verdict_is_within_beyond_or_below(self) -> None:
        band = DriftBand((0.35, 0.48))
        assert band.verdict(0.42) == "within noise"
        assert band.verdict(0.35) == band.verdict(0.48) == "within noise"
        assert band.verdict(0.49) == "beyond noise"
        assert band.verdict(0.1) == "below noise"

    def test_fewer_than_two_unchanged_samples_make_no_band(self) -> None:
        assert drift_band([measured("none", 1, 0.42), noise(1, 1, 0.40)]) is None  # none is no sample
        failed = (DriftStep(AS_SENT, 1, 2), run(AS_SENT, 1, None, "x"))
        assert drift_band([noise(1, 1, 0.40), failed]) is None
        assert drift_band([noise(1, 1, 0.40), noise(1, 2, 0.42)]) is not None

    def test_the_strategies_rows_leave_the_noise_samples_out(self, workbench_store: Path) -> None:
        history = history_of(Store(workbench_store).load_session(analyst(workbench_store)))
        simulations = simulate_items(history.items, history.calls, [NoCompaction(), RollingMessages(3)])
        results = [measured("none", 1, 0.4), noise(1, 1, 0.0), measured("rolling-messages:3", 1, 0.8)]
        rows = drift_rows(simulations, results)
        assert [(r.strategy, r.drift, len(r.runs)) for r in rows] == [
            ("none", 0.4, 1),
            ("rolling-messages:3", 0.8, 1),
        ]


class TestWhatThePageSays:
    def test_a_drift_reads_against_its_band(self, workbench_store: Path) -> None:
        history = history_of(Store(workbench_store).load_session(analyst(workbench_store)))
        simulations = simulate_items(history.items, history.calls, [NoCompaction(), RollingMessages(3)])
        results = [
            measured("none", 1, 0.42),
            noise(1, 1, 0.35),
            noise(1, 2, 0.48),
            measured("rolling-messages:3", 1, 0.9),
        ]
        band = drift_band(results)
        rows = drift_rows(simulations, results)
        assert band is not None and band.samples == 2
        assert [drift_line(row, band) for row in rows] == [
            "none: drift 0.42, noise band 0.35–0.48: within noise",
            "rolling-messages:3: drift 0.90, noise band 0.35–0.48: beyond noise",
        ]
        table = comparison_table(simulations, rows, band)
        assert list(table["noise band"]) == ["0.35–0.48", "0.35–0.48"]
        assert list(table["vs noise"]) == ["within noise", "beyond noise"]
        assert "2 unchanged re-runs of the requests the session really sent" in band_note(band, measured=True)
        assert "no width" not in band_note(band, measured=True)
        assert "The band has no width" in band_note(DriftBand((0.5, 0.5)), measured=True)

    def test_a_value_just_outside_the_band_never_prints_as_its_edge(self) -> None:
        band = DriftBand((0.35, 0.48))
        assert judged(0.4801, band) == ("0.4801", "0.3500", "0.4800", "beyond noise")
        assert judged(0.484, band) == ("0.484", "0.350", "0.480", "beyond noise")
        assert judged(0.4799, band)[3] == "within noise"

    def test_without_a_band_it_says_so(self, workbench_store: Path) -> None:
        history = history_of(Store(workbench_store).load_session(analyst(workbench_store)))
        simulations = simulate_items(history.items, history.calls, [NoCompaction()])
        [row] = drift_rows(simulations, [measured("none", 1, 0.42)])
        assert drift_line(row, None) == "none: drift 0.42, no noise band to judge it against"
        assert band_note(None, measured=True).startswith("No noise band")
        assert comparison_table(simulations, [row], None)["noise band"].tolist() == [None]

    def test_the_runs_table_lists_the_noise_samples_with_the_spread_at_their_call(self) -> None:
        results = [
            measured("none", 1, 0.35),
            noise(1, 1, 0.3),
            noise(1, 2, 0.4),
            measured("rolling-messages:3", 1, 0.9),
        ]
        records = drift_runs_table(results, drift_band(results)).to_dict("records")
        assert [(r["run"], r["strategy"], r["noise at this call"], r["vs noise"]) for r in records] == [
            ("strategy", "none", "0.30–0.40", "within noise"),
            ("noise sample 1", AS_SENT, "0.30–0.40", ""),
            ("noise sample 2", AS_SENT, "0.30–0.40", ""),
            ("strategy", "rolling-messages:3", "0.30–0.40", "beyond noise"),
        ]

    def test_a_failed_noise_sample_is_an_error_line(self) -> None:
        results = [(DriftStep(AS_SENT, 4, 2), run(AS_SENT, 4, None, "connection refused"))]
        assert drift_errors(results) == ["drift run noise sample 2 at call 4 failed: connection refused"]


class TestAJob:
    def steps(self, count: int) -> list[DriftStep]:
        return [DriftStep("none", call) for call in range(count)]

    def test_above_the_limit_it_waits_for_a_confirmation(self) -> None:
        assert new_job(("s", ()), "u", self.steps(11), CONFIRM_ABOVE).status == "confirm"
        assert new_job(("s", ()), "u", self.steps(10), CONFIRM_ABOVE).status == "running"
        assert confirm_above({"SOAPWB_CONFIRM_ABOVE": "2"}) == 2
        assert confirm_above({"SOAPWB_CONFIRM_ABOVE": "many"}) == confirm_above({}) == CONFIRM_ABOVE

    def test_it_counts_model_calls_as_they_are_made_and_finishes(self) -> None:
        steps = [DriftStep("summarize:100:2", 0, 0, 2), DriftStep("none", 0), DriftStep(AS_SENT, 0, 1)]
        job = DriftJob(("s", ()), "u", steps)
        assert progress_text(job) == "0 of 4 model calls · next: summarize:100:2 at call 0"
        job.record(steps[0], run("summarize:100:2", 0, 0.5), 2.0)
        assert progress_text(job) == "2 of 4 model calls · next: none at call 0"
        job.record(steps[1], run("none", 0, 0.1), 1.0)
        assert progress_text(job) == "3 of 4 model calls · next: noise sample 1 at call 0"
        job.record(steps[2], run(AS_SENT, 0, 0.1), 1.0)
        assert job.status == "done" and job.pending() == []
        assert outcome_note(job) == "Drift measured: 4 model calls in 4 s."

    def test_a_stopped_job_says_how_many_ran_and_that_their_forks_stay(self) -> None:
        job = DriftJob(("s", ()), "u", self.steps(36))
        for step in job.steps[:12]:
            job.record(step, run("none", step.call, 0.0), 1.5)
        job.status = "stopped"
        assert outcome_note(job) == (
            "Stopped after 12 of 36 model calls (18 s): the 12 runs made are saved in the store as drift "
            "forks and counted below; 24 model calls were not made."
        )
        assert len(job.pending()) == 24


def test_a_measurement_with_noise_samples_on_the_local_model_saves_every_run(
    workbench_store: Path, tmp_path: Path, llm_server: LocalModelServer
) -> None:
    """The runner on a real model: each run, the noise samples too, is a labelled fork,
    and the band comes from the unchanged runs (deterministic model: they agree)."""
    root = tmp_path / "store"
    shutil.copytree(workbench_store, root)
    store = Store(root)
    session = store.load_session(analyst(root))
    strategies = [NoCompaction(), RollingMessages(3)]
    history = history_of(session)
    last = len(history.calls) - 1
    steps = drift_plan(
        history, strategies, simulate_items(history.items, history.calls, strategies), [last], 2
    )
    runner = DriftRunner(store, session, strategies, LLMEndpoint(llm_server.base_url))
    results = [(step, runner.run(step)) for step in steps]
    assert all(r.error is None and r.distance is not None for _, r in results)
    band = drift_band(results)
    assert band is not None and band.samples == 2 and band.low == band.high
    saved = store.load_session(session.uuid, require_active=False).contexts
    labels = sorted(c.extra[REPLAY_KEY].get("label", "") for c in saved.values() if REPLAY_KEY in c.extra)
    assert [label for label in labels if label.startswith("drift")] == [
        f"drift noise sample 1 at call {last}",
        f"drift noise sample 2 at call {last}",
        f"drift none at call {last}",
        f"drift rolling-messages:3 at call {last}",
    ]
    produced = history.items[history.calls[last]].id
    [origin] = [c for c in session.contexts.values() if any(m.id == produced for m in c.messages)]
    sent = [m.id for m in materialize(session, origin, produced).messages]
    for step, made in results:
        if step.noise:  # each noise sample re-sent the request exactly as the session sent it
            assert [m.id for m in saved[made.fork_id].messages[:-1]] == sent


def test_an_interrupted_job_says_where_it_paused() -> None:
    job = DriftJob(("s", ()), "u", [DriftStep("none", call) for call in range(5)], started=True)
    job.record(job.steps[0], run("none", 0, 0.1), 1.0)
    assert paused_note(job) == (
        "Paused after 1 of 5 model calls: the page was interrupted while they ran (a click elsewhere, or "
        "Streamlit's Stop). The 1 run made are saved; continue, or stop here."
    )


def test_a_newer_script_run_takes_over_and_a_stop_counts_the_call_under_way() -> None:
    """Streamlit starts the script run of a click without waiting for the one making a
    call: the older loop records its call, then makes no other; a Stop waits for it."""
    job = DriftJob(("s", ()), "u", [DriftStep("none", call) for call in range(5)])
    in_flight, release = threading.Event(), threading.Event()
    made: list[int] = []

    def slow(step: DriftStep) -> DriftRun:
        made.append(step.call)
        in_flight.set()
        release.wait(10)
        return run("none", step.call, 0.0)

    older = threading.Thread(target=job.run_pending, args=(job.take_over(), slow, lambda: None))
    older.start()
    assert in_flight.wait(10)
    job.take_over()  # the Stop's script run
    job.status = "stopped"
    assert not job.wait_for_call_under_way(0.2)  # the call is still under way
    release.set()
    assert job.wait_for_call_under_way(10)
    older.join(10)
    assert made == [0] and len(job.results) == 1 and job.made_calls == 1
    assert outcome_note(job).startswith("Stopped after 1 of 5 model calls")


def test_a_loop_that_lost_the_job_makes_no_further_call_even_if_it_still_runs() -> None:
    job = DriftJob(("s", ()), "u", [DriftStep("none", call) for call in range(3)])
    older = job.take_over()
    calls: list[int] = []

    def take_over_after_the_first(step: DriftStep) -> DriftRun:
        calls.append(step.call)
        job.take_over()  # a click: a newer script run owns the job now
        return run("none", step.call, 0.0)

    job.run_pending(older, take_over_after_the_first, lambda: None)
    assert calls == [0] and job.status == "running" and job.started
    assert paused_note(job).startswith("Paused after 1 of 3 model calls")
