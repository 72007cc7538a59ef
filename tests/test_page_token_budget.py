"""The Token budget page, run headless with AppTest: its figure and tables carry the
analysis library's numbers (call budgets, message budgets, the chain), on the peteos
fixture (calls reconstructed, no limit, one compaction 430 → 379) and on the workbench
store (a call log with a context limit, compactions, a three-session chain)."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

import analysis
from analysis import (
    CATEGORIES,
    CallBudget,
    CompactionEvent,
    call_budgets,
    chain_budget,
    message_budgets,
)
from soap_core import Store
from soap_core.runtime import AgenticObject, ModelSettings, RollingTokenWindow, Runtime
from tests.apptest import open_app_page
from tests.scripted import ScriptedEndpoint, says
from workbench import token_budget_views
from workbench.token_budget_views import (
    CHART_CALLS,
    COMPACTION_TRACE,
    CONTEXT_LIMIT_TRACE,
    THRESHOLD_TRACE,
    TOTAL_TRACE,
    budget_figure,
    category_label,
    chain_label,
    chart_calls,
    chart_note,
)

APP = Path(__file__).resolve().parents[1] / "app.py"
WINDOW_SECTION = "window_choice"  # workbench/pages/token_budget.py's key of the rolling-window section
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "soap"
SESSION = "20250611-3f0c2b6e-8a41-4d8e-9c1a-5b7d2e9f4a10"
ACTIVE = "e7c40f19-2a6b-4d35-8e91-7b03a5c6d2f4"
ROOT_CONTEXT = "b1d6e0a2-7c3f-4e59-a0b8-2f6d91c4e7a3"


def open_page(store: Path, **params: str) -> AppTest:
    return open_app_page(store, "token_budget", **params)


def chart(at: AppTest, index: int) -> dict[str, Any]:
    return json.loads(at.get("plotly_chart")[index].proto.spec)


def traces(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {trace["name"]: trace for trace in spec["data"]}


def texts(at: AppTest) -> str:
    return "\n".join(element.value for element in at.text)


def role_session(store: Path, role: str) -> str:
    return next(s.uuid for s in Store(store).sessions() if s.role == role)


def records(at: AppTest, index: int) -> list[dict[str, Any]]:
    table = at.dataframe[index].value
    return table.astype(object).where(table.notna(), None).to_dict("records")


class TestWithoutASelection:
    def test_without_a_session_it_asks_for_one_and_draws_nothing(self) -> None:
        at = open_page(FIXTURE)
        assert at.info
        assert not at.get("plotly_chart")

    def test_an_unknown_session_offers_the_picker_not_an_exception(self) -> None:
        at = open_page(FIXTURE, session="no-such-session")
        assert at.warning and not at.error and [s.label for s in at.selectbox] == ["Session"]
        assert not at.get("plotly_chart")

    def test_an_unknown_session_in_the_workbench_store_offers_the_picker(self, workbench_store: Path) -> None:
        at = open_page(workbench_store, session="20991231-ffff")
        assert at.warning and not at.error


class TestOnThePeteosFixture:
    def test_each_layer_of_the_chart_is_the_library_makeup_of_each_call(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        budgets = call_budgets(Store(FIXTURE).load_session(SESSION))
        shown = traces(chart(at, 0))
        layers = [category_label(c) for c in CATEGORIES if category_label(c) in shown]
        assert layers, "no make-up layer drawn"
        assert "tool_definitions" not in shown and "system_prompt" not in shown  # named in words
        for category in CATEGORIES:
            expected = [b.makeup[category] for b in budgets]
            name = category_label(category)
            if name in shown:
                assert shown[name]["x"] == [b.number for b in budgets]
                assert shown[name]["y"] == expected
                assert shown[name]["stackgroup"] == "makeup"
            else:
                assert not any(expected), f"{category} has tokens but is not drawn"
        totals = [sum(shown[name]["y"][i] for name in layers) for i in range(len(budgets))]
        assert totals == [b.tokens for b in budgets] == [275, 326, 379]

    def test_the_calls_are_said_to_be_reconstructed_and_no_limit_is_drawn(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        assert "reconstructed from the contexts" in texts(at)
        assert CONTEXT_LIMIT_TRACE not in traces(chart(at, 0))

    def test_the_compaction_430_to_379_is_marked_at_the_call_after_it(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        spec = chart(at, 0)
        marker = traces(spec)[COMPACTION_TRACE]
        assert marker["x"] == [2] and marker["y"] == [379]
        assert "430 → 379" in marker["text"][0]
        assert [shape["x0"] for shape in spec["layout"]["shapes"]] == [2]
        table = records(at, 0)
        assert "430 → 379" in table[2]["compactions before"]
        assert [row["compactions before"] for row in table[:2]] == ["", ""]

    def test_hovering_a_call_shows_its_whole_makeup_with_shares(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        budgets = call_budgets(Store(FIXTURE).load_session(SESSION))
        spec = chart(at, 0)
        assert spec["layout"]["hovermode"] == "x unified"
        shown = traces(spec)
        layers = [c for c in CATEGORIES if category_label(c) in shown]
        for category in layers:
            name = category_label(category)
            assert shown[name]["hovertemplate"].startswith(f"{name}: %{{customdata[0]:,}} tokens")
            assert "%{customdata[1]:.1%}" in shown[name]["hovertemplate"]
            assert [c[0] for c in shown[name]["customdata"]] == [b.makeup[category] for b in budgets]
        for index, budget in enumerate(budgets):
            split = [shown[category_label(c)]["customdata"][index][1] for c in layers]
            assert sum(split) == pytest.approx(1.0, abs=1e-5)
            assert split == pytest.approx([budget.makeup[c] / budget.tokens for c in layers], abs=1e-6)
        total = shown[TOTAL_TRACE]
        assert total["y"] == [b.tokens for b in budgets] and total["showlegend"] is False
        assert "call %{x}: %{y:,} tokens" in total["hovertemplate"]
        assert [c[0] for c in total["customdata"]] == [b.timestamp for b in budgets]

    def test_no_threshold_line_until_one_is_typed(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        assert THRESHOLD_TRACE not in traces(chart(at, 0))
        assert at.number_input(key="threshold_input").value is None
        assert "No compaction setting is recorded for this session" in texts(at)
        at.number_input(key="threshold_input").set_value(400).run()
        assert not at.exception
        assert traces(chart(at, 0))[THRESHOLD_TRACE]["y"] == [400, 400, 400]
        assert at.query_params["threshold"] == "400"

    def test_a_click_counts_nothing_again(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """The budgets, tables and figure are kept per state of the store: at 100,000
        messages every click recounted them, 15 s each."""
        store = tmp_path / "store"
        shutil.copytree(FIXTURE, store)  # a store no earlier test has cached
        counted: Counter[str] = Counter()
        for name in ("call_budgets", "message_budgets", "budget_figure"):
            module = analysis if name != "budget_figure" else token_budget_views
            real = getattr(module, name)

            def wrapper(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
                counted[_name] += 1
                return _real(*args, **kwargs)

            monkeypatch.setattr(module, name, wrapper)  # the page imports them on each run
        at = open_page(store, session=SESSION)
        assert counted == {"call_budgets": 1, "message_budgets": 1, "budget_figure": 1}
        counted.clear()
        at.run()
        at.selectbox(key="context_picker").select(ROOT_CONTEXT).run()
        assert not at.exception
        assert counted == {"message_budgets": 1}  # only the other context's messages
        at.number_input(key="threshold_input").set_value(400).run()
        assert counted == {"message_budgets": 1, "budget_figure": 1}  # a new line to draw

    def test_a_threshold_in_the_url_is_drawn(self) -> None:
        at = open_page(FIXTURE, session=SESSION, threshold="350")
        assert traces(chart(at, 0))[THRESHOLD_TRACE]["y"] == [350, 350, 350]

    def test_the_chart_is_the_one_the_pure_function_builds(self) -> None:
        at = open_page(FIXTURE, session=SESSION, threshold="350")
        budgets = call_budgets(Store(FIXTURE).load_session(SESSION))
        expected = budget_figure(budgets, 350).to_plotly_json()["data"]
        shown = chart(at, 0)["data"]
        assert [(t["name"], list(t["x"]), list(t["y"])) for t in expected] == [
            (t["name"], t["x"], t["y"]) for t in shown
        ]

    def test_the_call_table_holds_every_call_with_its_makeup(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        budgets = call_budgets(Store(FIXTURE).load_session(SESSION))
        table = records(at, 0)
        assert [row["tokens"] for row in table] == [b.tokens for b in budgets]
        assert [row["context"] for row in table] == [b.context_id for b in budgets]
        assert [row["timestamp"] for row in table] == [b.timestamp for b in budgets]
        for category in CATEGORIES:
            assert [row[category_label(category)] for row in table] == [b.makeup[category] for b in budgets]
        assert all(row["recorded"] is False and row["context limit"] is None for row in table)

    def test_the_message_table_shows_the_stale_cached_count(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        context = Store(FIXTURE).load_session(SESSION).contexts[ACTIVE]
        expected = message_budgets(context)
        table = records(at, 2)
        assert [(r["tokens"], r["cumulative"], r["cached"], r["stale"]) for r in table] == [
            (m.tokens, m.cumulative, m.cached, m.stale) for m in expected
        ]
        assert (table[0]["stale"], table[0]["cached"], table[0]["tokens"]) == (True, 49, 79)
        assert any("cached 49" in w.value and "true 79" in w.value for w in at.warning)

    def test_the_message_table_follows_the_context_in_the_url(self) -> None:
        at = open_page(FIXTURE, session=SESSION, context=ROOT_CONTEXT)
        context = Store(FIXTURE).load_session(SESSION).contexts[ROOT_CONTEXT]
        assert [r["tokens"] for r in records(at, 2)] == [m.tokens for m in message_budgets(context)]
        assert at.query_params["context"] == ROOT_CONTEXT

    def test_an_unreadable_active_context_leaves_the_others_counted(self, tmp_path: Path) -> None:
        store = tmp_path / "soap"
        shutil.copytree(FIXTURE, store)
        (store / "agents" / "HelloPete" / SESSION / f"{ACTIVE}.json").write_text("{")
        at = open_page(store, session=SESSION)
        budgets = call_budgets(Store(store).load_session(SESSION, require_active=False))
        assert [row["tokens"] for row in records(at, 0)] == [b.tokens for b in budgets]
        assert any("no readable file" in w.value for w in at.warning)

    def test_the_chain_is_this_session_alone(self) -> None:
        at = open_page(FIXTURE, session=SESSION)
        bars = chart(at, 1)["data"][0]
        assert bars["y"] == [980] == [s.prompt_tokens for s in chain_budget(Store(FIXTURE), SESSION)]
        assert "this session alone" in texts(at)
        assert records(at, 1)[0]["session"] == SESSION

    def test_the_window_section_shows_where_the_stale_count_changes_peteoss_choice(self) -> None:
        """The fixture's system prompt caches 49 tokens for 79: at a 360-token window
        peteos (cached counts) keeps the user's question, true counts drop it."""
        at = open_page(FIXTURE, session=SESSION, context=ROOT_CONTEXT)
        assert not any("rolling token window" in t.value for t in at.text)  # computed once opened
        at.session_state[WINDOW_SECTION] = True
        at.run().number_input(key="window_tokens").set_value(360).run()
        assert not at.exception
        [note] = [t.value for t in at.text if "rolling token window of 360" in t.value]
        assert "chooses differently: 1 message(s) kept only with peteos's cached counts" in note
        [table] = [d.value for d in at.dataframe if "kept (cached counts)" in d.value.columns]
        assert table["role"].tolist() == ["user"]
        assert table["kept (cached counts)"].tolist() == [True]
        assert table["kept (true counts)"].tolist() == [False]

    def test_the_window_section_says_when_both_counts_agree(self) -> None:
        at = open_page(FIXTURE, session=SESSION, context=ROOT_CONTEXT)
        at.session_state[WINDOW_SECTION] = True
        at.run().number_input(key="window_tokens").set_value(10_000).run()
        assert any("keeps the same" in t.value for t in at.text)


class TestOnTheWorkbenchStore:
    def test_the_context_limit_from_the_call_log_is_a_line(self, workbench_store: Path) -> None:
        uuid = role_session(workbench_store, "Analyst")
        at = open_page(workbench_store, session=uuid)
        budgets = call_budgets(Store(workbench_store).load_session(uuid))
        shown = traces(chart(at, 0))
        assert shown[CONTEXT_LIMIT_TRACE]["y"] == [b.context_limit for b in budgets] == [2048] * len(budgets)
        assert "from the call log" in texts(at)
        for category in shown.keys() & set(CATEGORIES):
            assert shown[category]["y"] == [b.makeup[category] for b in budgets]

    def test_every_compaction_fork_is_marked_with_its_sizes(self, workbench_store: Path) -> None:
        uuid = role_session(workbench_store, "Analyst")
        at = open_page(workbench_store, session=uuid)
        budgets = call_budgets(Store(workbench_store).load_session(uuid))
        compacted = [b for b in budgets if b.compactions_before]
        assert compacted
        marker = traces(chart(at, 0))[COMPACTION_TRACE]
        assert marker["x"] == [b.number for b in compacted]
        for text, budget in zip(marker["text"], compacted, strict=True):
            event = budget.compactions_before[0]
            assert f"{event.tokens_before} → {event.tokens_after}" in text

    def test_the_chain_shows_every_session_with_its_prompt_tokens(self, workbench_store: Path) -> None:
        uuid = role_session(workbench_store, "Researcher")
        at = open_page(workbench_store, session=uuid)
        chain = chain_budget(Store(workbench_store), uuid)
        assert [s.role for s in chain] == ["Analyst", "Researcher", "Archivist"]
        bars = chart(at, 1)["data"][0]
        assert bars["y"] == [s.prompt_tokens for s in chain]
        assert bars["x"] == [chain_label(s) for s in chain]
        table = records(at, 1)
        assert [(r["role"], r["depth"], r["calls"], r["prompt tokens"]) for r in table] == [
            (s.role, s.depth, s.calls, s.prompt_tokens) for s in chain
        ]
        assert [r["completion tokens"] for r in table] == [s.completion_tokens for s in chain]

    def test_the_chain_reuses_the_budgets_it_is_given_and_reads_the_rest(
        self, workbench_store: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        uuid = role_session(workbench_store, "Researcher")
        store = Store(workbench_store)
        expected = chain_budget(store, uuid)
        known = call_budgets(store.load_session(uuid))
        read = []
        load = Store.load_session
        monkeypatch.setattr(
            Store, "load_session", lambda self, ref, **kw: read.append(ref) or load(self, ref, **kw)
        )
        assert chain_budget(store, uuid, known={uuid: known}) == expected
        assert uuid not in read and len(read) == len(expected) - 1

    def test_html_in_a_message_is_never_rendered(self, workbench_store: Path) -> None:
        uuid = role_session(workbench_store, "Analyst")
        at = open_page(workbench_store, session=uuid)
        assert not any("<script" in element.value for element in at.markdown)


class Windowed(AgenticObject):
    settings = ModelSettings(max_tokens=32, context_limit=4096)
    compaction = RollingTokenWindow(threshold=900, keep=0.5)


class Wider(Windowed):
    compaction = RollingTokenWindow(threshold=1500, keep=0.5)


@pytest.fixture(scope="module")
def windowed_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two sessions the runtime ran with rolling token windows of 900 and 1,500 tokens."""
    root = tmp_path_factory.mktemp("windowed") / "store"
    runtime = Runtime(root, ScriptedEndpoint(says("One."), says("Two."), says("Three.")))  # type: ignore[arg-type]
    windowed = Windowed(runtime=runtime, object_id="windowed")
    windowed.invoke("First question.", thread="t")
    windowed.invoke("Second question.", thread="t")
    Wider(runtime=runtime, object_id="wider").invoke("A question.")
    return root


class TestTheThresholdTheSessionRanWith:
    def test_the_field_starts_at_the_recorded_threshold_and_draws_it(self, windowed_store: Path) -> None:
        at = open_page(windowed_store, session=role_session(windowed_store, "Windowed"))
        assert at.number_input(key="threshold_input").value == 900
        assert traces(chart(at, 0))[THRESHOLD_TRACE]["y"] == [900, 900]
        assert (
            "Starts at 900 tokens, the threshold the session ran with: "
            "rolling-tokens:900:0.5 (from its call log)."
        ) in texts(at)
        assert "threshold" not in at.query_params  # the session's own value needs no parameter

    def test_a_typed_threshold_goes_into_the_url_and_says_so(self, windowed_store: Path) -> None:
        at = open_page(windowed_store, session=role_session(windowed_store, "Windowed"))
        at.number_input(key="threshold_input").set_value(1200).run()
        assert at.query_params["threshold"] == "1200"
        assert traces(chart(at, 0))[THRESHOLD_TRACE]["y"] == [1200, 1200]
        assert "Threshold 1,200 tokens typed here; the session ran with a threshold of 900 tokens." in texts(
            at
        )

    def test_a_threshold_in_the_link_wins_over_the_recorded_one(self, windowed_store: Path) -> None:
        at = open_page(windowed_store, session=role_session(windowed_store, "Windowed"), threshold="700")
        assert at.number_input(key="threshold_input").value == 700
        assert "Threshold 700 tokens from the link (?threshold=)" in texts(at)

    def test_a_message_window_falls_back_to_the_context_window_and_says_so(
        self, workbench_store: Path
    ) -> None:
        at = open_page(workbench_store, session=role_session(workbench_store, "Analyst"))
        assert at.number_input(key="threshold_input").value == 2048
        assert traces(chart(at, 0))[THRESHOLD_TRACE]["y"][0] == 2048
        assert (
            "Starts at the model's context window, 2,048 tokens (from the call log): the session "
            "compacted with rolling-messages:6, which has no token threshold."
        ) in texts(at)

    def test_another_session_starts_at_its_own_threshold(self, windowed_store: Path) -> None:
        at = open_page(windowed_store, session=role_session(windowed_store, "Windowed"))
        at.number_input(key="threshold_input").set_value(1200).run()
        assert at.query_params["threshold"] == "1200"
        at.selectbox(key="session_picker").set_value(role_session(windowed_store, "Wider")).run()
        assert not at.exception
        assert at.number_input(key="threshold_input").value == 1500
        assert "threshold" not in at.query_params


def many_calls(count: int, compacted_at: tuple[int, ...]) -> list[CallBudget]:
    event = CompactionEvent(parent_id="p", child_id="c", tokens_before=900, tokens_after=100)
    return [
        CallBudget(
            number=n,
            context_id="c",
            message_index=n,
            message_id=None,
            timestamp=None,
            recorded=False,
            tokens=100 + n % 800,
            makeup={"user": 100 + n % 800} if n != count - 2 else {"user": 1, "thinking": 99},
            compactions_before=[event] if n in compacted_at else [],
        )
        for n in range(count)
    ]


class TestManyCalls:
    def test_a_chart_of_fifty_thousand_calls_draws_an_even_step_and_every_drop(self) -> None:
        budgets = many_calls(50_000, compacted_at=(12_345, 40_001))
        drawn = chart_calls(budgets)
        numbers = [b.number for b in drawn]
        assert len(drawn) <= CHART_CALLS + 4 and numbers == sorted(numbers)
        assert {0, 49_999, 12_344, 12_345, 40_000, 40_001} <= set(numbers)
        figure = budget_figure(budgets).to_plotly_json()["data"]
        layers = {t["name"]: t for t in figure}
        assert list(layers[TOTAL_TRACE]["x"]) == numbers
        assert "thinking" in layers, "a layer seen only at an undrawn call still has its legend entry"
        assert list(layers[COMPACTION_TRACE]["x"]) == [12_345, 40_001]
        note = chart_note(budgets, drawn)
        assert note is not None and f"{len(drawn):,} of the 50,000 calls" in note

    def test_a_chart_of_few_calls_draws_every_one_and_says_nothing(self) -> None:
        budgets = many_calls(CHART_CALLS, compacted_at=())
        assert chart_calls(budgets) == budgets and chart_note(budgets, budgets) is None


def test_a_short_session_s_chart_ticks_whole_calls_and_a_long_one_is_left_to_plotly() -> None:
    short = budget_figure(many_calls(4, compacted_at=())).to_plotly_json()["layout"]["xaxis"]
    assert short.get("dtick") == 1  # plotly ticks 0, 0.5, 1, ... on four calls
    long = budget_figure(many_calls(500, compacted_at=())).to_plotly_json()["layout"]["xaxis"]
    assert "dtick" not in long
