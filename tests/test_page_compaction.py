"""The Compaction page, run headless with AppTest: the curves, the comparison table and
the dropped lists carry the analysis library's simulations for the strategies in the
URL; simulating never writes to the store; "Measure drift" re-runs calls on a real
local model, the unchanged noise samples too, saves every run as a drift fork and judges
each strategy's drift against the noise band; a large measurement asks first."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

import analysis
from analysis import AS_SENT, DriftRun, DriftStep, SimPoint, Simulation, history_of, simulate, verdict_in
from local_model import LocalModelServer
from soap_core import REPLAY_KEY, Store
from tests.apptest import open_app_page
from tests.conftest import snapshot
from workbench import compaction_views
from workbench.compaction_views import (
    CURVE_POINTS,
    MOST_MARKS,
    DriftJob,
    curve_points,
    curves_figure,
    curves_note,
    default_specs,
)

APP = Path(__file__).resolve().parents[1] / "app.py"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "soap"
SESSION = "20250611-3f0c2b6e-8a41-4d8e-9c1a-5b7d2e9f4a10"
ACTIVE = "e7c40f19-2a6b-4d35-8e91-7b03a5c6d2f4"
DRIFT_JOB = "compaction_drift_job"  # where the page keeps its measurement
SPECS = ["rolling-tokens:400:0.5", "rolling-messages:3", "summarize:300:2", "strip-thinking"]
DROPPED_LINE = re.compile(r"^(.+): (\d+) messages? dropped by call \d+$")
EVIL = "<script>alert(1)</script><img src=x onerror=alert(2)>"


def open_page(store: Path, timeout: float = 60, **params: str) -> AppTest:
    return open_app_page(store, "compaction", timeout, **params)


def curves(at: AppTest) -> dict[str, dict[str, Any]]:
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    return {trace["name"]: trace for trace in spec["data"]}


def tables_with(at: AppTest, column: str) -> list[list[dict[str, Any]]]:
    """Every table shown that has ``column``, as records, in the order shown."""
    frames = [element.value for element in at.dataframe if column in element.value.columns]
    return [frame.astype(object).where(frame.notna(), None).to_dict("records") for frame in frames]


def comparison(at: AppTest) -> list[dict[str, Any]]:
    [found] = tables_with(at, "peak tokens")
    return found


def drift_runs(at: AppTest) -> list[dict[str, Any]]:
    [found] = tables_with(at, "distance")
    return found


def dropped_lists(at: AppTest) -> dict[str, list[dict[str, Any]]]:
    """The dropped lists by strategy: the page names each strategy and its count in a
    text line, followed by a table when the count is not zero."""
    counted = [DROPPED_LINE.match(element.value) for element in at.text]
    with_rows = [m.group(1) for m in counted if m and int(m.group(2))]
    return dict(zip(with_rows, tables_with(at, "history index"), strict=True))


def plain(elements: Any) -> str:
    """The values of message elements (success, info, warning), Markdown escapes undone."""
    return "\n".join(element.value.replace("\\", "") for element in elements)


def texts(at: AppTest) -> str:
    return "\n".join(element.value for element in at.text)


def analyst(store: Path) -> str:
    return next(s.uuid for s in Store(store).sessions() if s.role == "Analyst")


def drift_forks(store: Path, uuid: str) -> list[str]:
    session = Store(store).load_session(uuid, require_active=False)
    labels = [c.extra.get(REPLAY_KEY, {}).get("label") or "" for c in session.contexts.values()]
    return sorted(label for label in labels if label.startswith("drift"))


class TestWithoutASelection:
    def test_without_a_session_it_asks_for_one(self) -> None:
        at = open_page(FIXTURE)
        assert at.info
        assert not at.get("plotly_chart")

    def test_an_unknown_session_offers_the_picker_not_an_exception(self) -> None:
        at = open_page(FIXTURE, session="no-such-session", strategies="rolling-messages:3")
        assert at.warning and not at.error and [s.label for s in at.selectbox] == ["Session"]
        assert not at.get("plotly_chart")


def break_active_context(store: Path) -> None:
    (store / "agents" / "HelloPete" / SESSION / f"{ACTIVE}.json").write_text("{")


class TestSimulation:
    def test_the_table_is_the_library_summary_of_each_strategy_in_the_url(self) -> None:
        at = open_page(FIXTURE, session=SESSION, strategies=",".join(SPECS))
        expected = [s.summary() for s in simulate(Store(FIXTURE).load_session(SESSION), ["none", *SPECS])]
        shown = comparison(at)
        assert [
            {
                "strategy": r["strategy"],
                "peak_tokens": r["peak tokens"],
                "tokens_sent": r["tokens sent"],
                "compactions": r["compactions"],
                "tokens_saved": r["tokens saved"],
            }
            for r in shown
        ] == expected
        assert all("drift" not in r for r in shown)  # nothing measured: no column of blanks
        assert at.query_params["strategies"] == ",".join(SPECS)

    def test_each_curve_is_the_simulated_size_per_call_with_its_compactions(self) -> None:
        at = open_page(FIXTURE, session=SESSION, strategies=",".join(SPECS))
        shown = curves(at)
        for simulation in simulate(Store(FIXTURE).load_session(SESSION), ["none", *SPECS]):
            line = shown[simulation.strategy]
            assert line["x"] == [p.call for p in simulation.points]
            assert line["y"] == [p.tokens for p in simulation.points]
            marks = shown[f"{simulation.strategy} compactions"]
            assert marks["x"] == [p.call for p in simulation.points if p.compacted]
        assert shown["none"]["y"] == [275, 326, 430]

    def test_without_strategies_in_the_url_it_picks_ones_sized_to_the_session(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        expected = default_specs(history_of(Store(FIXTURE).load_session(SESSION)))
        assert at.query_params["strategies"] == ",".join(expected)
        assert [r["strategy"] for r in comparison(at)] == ["none", *expected]

    def test_without_strategies_it_starts_with_the_one_the_session_ran_with(
        self, workbench_store: Path
    ) -> None:
        at = open_page(workbench_store, session=analyst(workbench_store))
        assert at.query_params["strategies"].split(",")[0] == "rolling-messages:6"
        assert at.number_input(key="rolling-messages_n").value == 6
        assert "The session ran with rolling-messages:6 (its call log)." in texts(at)  # recorded as its spec

    def test_changing_a_number_changes_the_url_and_the_simulation(self) -> None:
        at = open_page(FIXTURE, session=SESSION, strategies="rolling-messages:3")
        at.number_input(key="rolling-messages_n").set_value(2).run()
        assert not at.exception
        assert at.query_params["strategies"] == "rolling-messages:2"
        [expected] = [
            s.summary() for s in simulate(Store(FIXTURE).load_session(SESSION), ["rolling-messages:2"])
        ]
        assert comparison(at)[1]["tokens sent"] == expected["tokens_sent"]

    def test_a_bad_strategy_is_an_error_and_the_good_ones_still_run(self) -> None:
        at = open_page(FIXTURE, session=SESSION, strategies="bogus:1,rolling-messages:3,rolling-tokens:x")
        assert len(at.error) == 2
        assert [r["strategy"] for r in comparison(at)] == ["none", "rolling-messages:3"]

    def test_the_peteos_calls_are_said_to_be_reconstructed(self) -> None:
        at = open_page(FIXTURE, session=SESSION, strategies="rolling-messages:3")
        assert "reconstructed from the contexts" in texts(at)

    def test_an_unreadable_active_context_is_an_error_not_an_exception(self, store_copy: Path) -> None:
        break_active_context(store_copy)
        at = open_page(store_copy, session=SESSION, strategies="rolling-messages:3")
        assert any("is missing" in e.value for e in at.error)
        assert not at.get("plotly_chart")

    def test_simulating_never_changes_the_store(self, store_copy: Path) -> None:
        before = snapshot(store_copy)
        at = open_page(store_copy, session=SESSION, strategies=",".join(SPECS))
        at.slider(key="dropped_call").set_value(1).run()
        assert not at.exception
        assert snapshot(store_copy) == before


class TestClicks:
    def test_a_click_recomputes_only_what_it_changed(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The history, the simulations, the curves and the dropped lists are kept per
        state of the store: at 100,000 messages every click recomputed them, 7.6 s each."""
        store = tmp_path / "store"
        shutil.copytree(FIXTURE, store)  # a store no earlier test has cached
        counted: Counter[str] = Counter()
        for module, name in (
            (analysis, "history_of"),
            (analysis, "simulate_items"),
            (compaction_views, "curves_figure"),
            (compaction_views, "dropped_rows"),
        ):
            real = getattr(module, name)

            def wrapper(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
                counted[_name] += 1
                return _real(*args, **kwargs)

            monkeypatch.setattr(module, name, wrapper)  # the page imports them on each run
        at = open_page(store, session=SESSION, strategies="rolling-tokens:400:0.5")
        assert counted == {"history_of": 1, "simulate_items": 1, "curves_figure": 1, "dropped_rows": 2}
        counted.clear()
        at.run()
        assert not at.exception and not counted
        at.slider(key="dropped_call").set_value(1).run()
        assert counted == {"dropped_rows": 2}  # the none strategy's and the rolling window's


class TestWhatEachDropped:
    @pytest.mark.parametrize("call", [1, 2])
    def test_the_dropped_list_at_a_call_is_what_the_simulation_dropped(self, call: int) -> None:
        at = open_page(FIXTURE, session=SESSION, strategies=",".join(SPECS), call=str(call))
        session = Store(FIXTURE).load_session(SESSION)
        history = history_of(session)
        for simulation in simulate(session, ["none", *SPECS]):
            gone = simulation.dropped_at(call)
            assert f"{simulation.strategy}: {len(gone)} message" in texts(at)
            if not gone:
                assert simulation.strategy not in dropped_lists(at)
                continue
            rows = dropped_lists(at)[simulation.strategy]
            assert [history.items[r["history index"]].id for r in rows] == gone
            assert [r["tokens"] for r in rows] == [history.items[r["history index"]].tokens for r in rows]
            assert [r["role"] for r in rows] == [history.messages[i].role for i in gone]

    def test_the_slider_moves_the_call_and_the_url(self) -> None:
        at = open_page(FIXTURE, session=SESSION, strategies="rolling-tokens:400:0.5")
        assert at.query_params["call"] == "2"
        assert dropped_lists(at)["rolling-tokens:400:0.5"]
        at.slider(key="dropped_call").set_value(1).run()
        assert at.query_params["call"] == "1"
        assert "rolling-tokens:400:0.5: 0 messages dropped by call 1" in texts(at)

    def test_html_in_a_dropped_message_is_shown_as_data_not_rendered(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session=analyst(workbench_store), strategies="rolling-messages:2")
        rows = dropped_lists(at)["rolling-messages:2"]
        assert any(EVIL[:20] in r["preview"] for r in rows)
        assert not any("<script" in element.value for element in at.markdown)
        assert "reconstructed" not in texts(at)


class TestDrift:
    def test_without_an_endpoint_the_button_is_disabled_with_a_reason(self) -> None:
        at = open_page(FIXTURE, session=SESSION, strategies="rolling-messages:3")
        assert at.button(key="measure_drift").disabled
        assert any("endpoint" in info.value for info in at.info)

    def test_a_failing_endpoint_shows_each_runs_error(self, workbench_store: Path, tmp_path: Path) -> None:
        store = tmp_path / "store"
        shutil.copytree(workbench_store, store)
        at = open_page(store, session=analyst(store), strategies="rolling-messages:3")
        at.text_input(key="drift_endpoint").input("http://127.0.0.1:9/v1").run()
        at.multiselect(key="drift_calls").select(0).run()
        at.button(key="measure_drift").click().run(timeout=120)
        assert not at.exception
        failures = [e.value for e in at.error]
        assert len(failures) == 4 and all("failed" in f and "connection" in f for f in failures)
        assert any("noise sample 2 at call 0" in f for f in failures)
        assert all("drift" not in r for r in comparison(at))  # every run failed: nothing measured
        assert "No noise band" in texts(at)

    def test_a_summary_that_cannot_be_written_is_an_error_not_an_exception(
        self, workbench_store: Path, tmp_path: Path
    ) -> None:
        store = tmp_path / "store"
        shutil.copytree(workbench_store, store)
        at = open_page(store, session=analyst(store), strategies="summarize:100:2")
        at.text_input(key="drift_endpoint").input("http://127.0.0.1:9/v1").run()
        at.multiselect(key="drift_calls").select(8).run()
        at.button(key="measure_drift").click().run(timeout=120)
        assert not at.exception
        shown = [e.value.replace("\\", "") for e in at.error]  # the page escapes Markdown
        assert any(
            line.startswith("drift run summarize:100:2 at call 8 failed: summary not written")
            and "Connection refused" in line
            for line in shown
        )
        assert all("drift" not in r for r in comparison(at))  # every run failed: nothing measured

    def test_measuring_drift_on_the_local_model_fills_the_table_and_saves_forks(
        self, workbench_store: Path, tmp_path: Path, llm_server: LocalModelServer
    ) -> None:
        store = tmp_path / "store"
        shutil.copytree(workbench_store, store)
        uuid = analyst(store)
        at = open_page(store, session=uuid, strategies="rolling-messages:3")
        last = len(history_of(Store(store).load_session(uuid)).calls) - 1
        at.text_input(key="drift_endpoint").input(llm_server.base_url).run()
        at.multiselect(key="drift_calls").select(last).run()
        assert not at.button(key="measure_drift").disabled
        at.button(key="measure_drift").click().run(timeout=300)
        assert not at.exception
        assert not at.error
        shown = comparison(at)
        assert [r["strategy"] for r in shown] == ["none", "rolling-messages:3"]
        assert all(isinstance(r["drift"], float) and 0 <= r["drift"] <= 1 for r in shown)
        runs = drift_runs(at)
        assert [(r["run"], r["strategy"], r["call"]) for r in runs] == [
            ("strategy", "none", last),
            ("strategy", "rolling-messages:3", last),
            ("noise sample 1", AS_SENT, last),
            ("noise sample 2", AS_SENT, last),
        ]
        assert [r["drift"] for r in shown] == [r["distance"] for r in runs[:2]]
        assert drift_forks(store, uuid) == [
            f"drift noise sample 1 at call {last}",
            f"drift noise sample 2 at call {last}",
            f"drift none at call {last}",
            f"drift rolling-messages:3 at call {last}",
        ]
        # the deterministic model answers the call as sent alike each time: a band of width zero
        noise = [r["distance"] for r in runs if r["strategy"] == AS_SENT]
        assert len(set(noise)) == 1
        band = f"{noise[0]:.2f}–{noise[0]:.2f}"
        assert [r["noise band"] for r in shown] == [band, band]
        verdict = verdict_in(shown[0]["drift"], noise[0], noise[0])
        assert shown[0]["vs noise"] == verdict
        assert f"none: drift {shown[0]['drift']:.2f}, noise band {band}: {verdict}" in texts(at)
        assert "Drift measured: 4 model calls" in plain(at.success)
        assert not at.button(key="measure_drift").disabled  # finished: it can be measured again

    def test_a_large_measurement_asks_first_and_cancel_runs_nothing(
        self, workbench_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("SOAPWB_CONFIRM_ABOVE", "3")
        store = tmp_path / "store"
        shutil.copytree(workbench_store, store)
        uuid = analyst(store)
        at = open_page(store, session=uuid, strategies="rolling-messages:3")
        at.text_input(key="drift_endpoint").input("http://127.0.0.1:9/v1").run()
        at.multiselect(key="drift_calls").select(0).select(1).run()
        at.button(key="measure_drift").click().run()
        assert not at.exception
        assert len(at.warning) == 1
        warning = plain(at.warning)
        assert "makes 8 model calls: 2 calls × 2 strategies (none, rolling-messages:3) = 4 runs" in warning
        assert "2 × 2 unchanged re-runs for the noise band = 4" in warning
        assert at.button(key="drift_confirm").label == "Run 8 model calls"
        assert at.button(key="measure_drift").disabled  # one measurement at a time
        at.button(key="drift_cancel").click().run()
        assert not at.warning and not at.error
        assert "Not run: the 8 model calls were cancelled" in plain(at.info)
        assert drift_forks(store, uuid) == []
        assert not tables_with(at, "distance")

    def test_a_run_interrupted_mid_way_asks_before_it_goes_on_and_stop_ends_it(
        self, workbench_store: Path, tmp_path: Path
    ) -> None:
        """A click elsewhere (or Streamlit's own Stop) ends the script run that was making
        the calls; the next one makes none until told to."""
        store = tmp_path / "store"
        shutil.copytree(workbench_store, store)
        uuid = analyst(store)
        at = open_page(store, session=uuid, strategies="rolling-messages:3")
        steps = [DriftStep("none", 1), DriftStep("rolling-messages:3", 1)]
        job = DriftJob((uuid, ("none", "rolling-messages:3")), "http://127.0.0.1:9/v1", steps, started=True)
        job.record(steps[0], DriftRun("none", 1, 0.25, False, "fork-1"), 3.0)
        at.session_state[DRIFT_JOB] = job
        at.run()
        assert "Paused after 1 of 2 model calls" in plain(at.info)
        assert at.button(key="drift_continue").label == "Continue: 1 model calls left"
        assert len(job.results) == 1 and drift_forks(store, uuid) == []
        at.button(key="drift_stop").click().run()
        assert not at.exception
        assert "Stopped after 1 of 2 model calls" in plain(at.info)
        assert not [b for b in at.button if b.key in ("drift_stop", "drift_continue")]
        assert [r["strategy"] for r in drift_runs(at)] == ["none"]

    def test_a_confirmed_measurement_runs_on_the_local_model(
        self,
        workbench_store: Path,
        tmp_path: Path,
        llm_server: LocalModelServer,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        monkeypatch.setenv("SOAPWB_CONFIRM_ABOVE", "2")
        store = tmp_path / "store"
        shutil.copytree(workbench_store, store)
        uuid = analyst(store)
        at = open_page(store, session=uuid, strategies="rolling-messages:3")
        at.text_input(key="drift_endpoint").input(llm_server.base_url).run()
        at.number_input(key="drift_noise").set_value(1).run()
        at.multiselect(key="drift_calls").select(1).run()
        at.button(key="measure_drift").click().run()
        assert at.button(key="drift_confirm").label == "Run 3 model calls"
        assert drift_forks(store, uuid) == []
        at.button(key="drift_confirm").click().run(timeout=300)
        assert not at.exception and not at.error
        assert len(drift_forks(store, uuid)) == 3
        assert "Drift measured: 3 model calls" in plain(at.success)
        assert [r["strategy"] for r in drift_runs(at)] == ["none", "rolling-messages:3", AS_SENT]


def simulated(strategy: str, calls: int, compacted_at: Iterable[int]) -> Simulation:
    """A simulation of ``calls`` calls that compacts at ``compacted_at``."""
    marks = set(compacted_at)
    return Simulation(
        strategy, [SimPoint(i, 10 * i, 10 * i, i in marks, ["m"] if i in marks else []) for i in range(calls)]
    )


class TestLongSessions:
    def test_a_curve_of_fifty_thousand_calls_draws_an_even_step_and_every_rare_compaction(self) -> None:
        rare = simulated("rolling-tokens:9:0.5", 50_000, (12_345, 40_001))
        drawn = [p.call for p in curve_points(rare.points)]
        assert len(drawn) <= CURVE_POINTS + 4 and drawn == sorted(drawn)
        assert {0, 49_999, 12_344, 12_345, 40_000, 40_001} <= set(drawn)
        traces = {t["name"]: t for t in curves_figure([rare]).to_plotly_json()["data"]}
        assert list(traces["rolling-tokens:9:0.5"]["x"]) == drawn
        assert list(traces["rolling-tokens:9:0.5 compactions"]["x"]) == [12_345, 40_001]
        note = curves_note([rare])
        assert note is not None and f"about {CURVE_POINTS:,} of the 50,000 calls" in note

    def test_a_strategy_compacting_at_nearly_every_call_is_not_marked_and_says_so(self) -> None:
        window = simulated("rolling-messages:40", 50_000, range(25_000, 50_000))
        drawn = curve_points(window.points)
        assert len(drawn) <= CURVE_POINTS + 1  # its compactions do not all join the step
        names = [t["name"] for t in curves_figure([window]).to_plotly_json()["data"]]
        assert names == ["rolling-messages:40"]
        note = curves_note([window])
        assert note is not None and "rolling-messages:40 compacts at 25,000 calls: too many to mark" in note

    def test_a_short_session_draws_every_call_and_mark_and_says_nothing(self) -> None:
        short = simulated("rolling-messages:2", CURVE_POINTS, range(3, MOST_MARKS + 3))
        assert curve_points(short.points) == short.points and curves_note([short]) is None
        traces = {t["name"]: t for t in curves_figure([short]).to_plotly_json()["data"]}
        assert len(traces["rolling-messages:2 compactions"]["x"]) == MOST_MARKS


def test_the_curves_of_a_short_session_tick_whole_calls() -> None:
    assert (
        curves_figure([simulated("rolling-messages:2", 4, ())])
        .to_plotly_json()["layout"]["xaxis"]
        .get("dtick")
        == 1
    )
    assert (
        "dtick"
        not in curves_figure([simulated("rolling-messages:2", 300, ())]).to_plotly_json()["layout"]["xaxis"]
    )
