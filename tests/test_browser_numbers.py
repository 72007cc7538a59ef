"""Numbers a person can read, in headless Chromium against the real local model: a drift
measurement above the confirmation limit asks first, counts its model calls while it
runs and stops on Stop with the runs made kept; the token budget's hover shows a call's
whole make-up; the traceback's bars name their object and hold their calls. Screenshots
go to test-output/browser/."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from local_model import LocalModelServer
from soap_core import REPLAY_KEY, Store
from tests.test_browser import SHOTS, analyst, open_page, settle, streamlit_app

CONFIRM_ABOVE = 3
"""Lowered so that two calls of two strategies with their noise samples (8) ask first."""


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, workbench_store: Path, llm_server: LocalModelServer
) -> Iterator[tuple[str, Path]]:
    store = tmp_path_factory.mktemp("numbers") / "store"
    shutil.copytree(workbench_store, store)
    log = tmp_path_factory.mktemp("streamlit") / "streamlit.log"
    with streamlit_app(
        store, log, OPENAI_BASE_URL=llm_server.base_url, SOAPWB_CONFIRM_ABOVE=str(CONFIRM_ABOVE)
    ) as url:
        yield url, store


def drift_forks(store: Path, uuid: str) -> list[str]:
    session = Store(store).load_session(uuid, require_active=False)
    labels = [c.extra.get(REPLAY_KEY, {}).get("label") or "" for c in session.contexts.values()]
    return [label for label in labels if label.startswith("drift")]


def main_text(page: Page) -> str:
    return page.inner_text('[data-testid="stMain"]')


def wait_for_text(page: Page, pattern: str, timeout_s: float = 120) -> re.Match[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(pattern, main_text(page))
        if found:
            return found
        time.sleep(0.2)
    pytest.fail(f"{pattern!r} never appeared; the page says:\n{main_text(page)[:3000]}")


def pick_calls(page: Page, *labels: str) -> None:
    """Choose options of the "Calls to re-run" multiselect by the start of their label."""
    picker = page.locator('[data-testid="stMultiSelect"]').filter(has_text="Calls to re-run")
    for label in labels:
        picker.locator("input").click()
        picker.locator("input").fill(label.split(" (")[0])  # typed, as a person would in a long list
        page.locator('[role="option"]', has_text=label).first.click()
        settle(page)
    page.keyboard.press("Escape")


def test_a_large_drift_run_asks_counts_and_stops_keeping_the_runs_made(
    served: tuple[str, Path], browser: Browser
) -> None:
    url, store = served
    uuid = analyst(store)
    page = open_page(browser, f"{url}/compaction?store={store}&session={uuid}&strategies=rolling-messages:3")
    pick_calls(page, "call 1 (", "call 2 (")
    page.get_by_role("button", name="Measure drift").click()
    wait_for_text(page, r"Measuring drift makes 8 model calls: 2 calls × 2 strategies")
    confirm = page.get_by_role("button", name="Run 8 model calls")
    confirm.wait_for(timeout=30_000)
    assert drift_forks(store, uuid) == [], "nothing runs before the confirmation"
    SHOTS.mkdir(parents=True, exist_ok=True)
    confirm.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "compaction-confirm.png"))

    confirm.click()
    counted = wait_for_text(page, r"([1-7]) of 8 model calls")
    page.locator('[data-testid="stProgress"]').scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "compaction-running.png"))
    page.get_by_role("button", name="Stop measuring").click()
    stopped = wait_for_text(page, r"Stopped after (\d) of 8 model calls")
    settle(page)
    made = int(stopped.group(1))
    assert int(counted.group(1)) <= made < 8
    assert len(drift_forks(store, uuid)) == made, "every run counted is saved, none after the stop"
    assert f"the {made} run{'' if made == 1 else 's'} made are saved in the store" in main_text(page)
    assert page.get_by_role("button", name="Stop measuring").count() == 0
    time.sleep(3)  # nothing goes on running after the stop
    assert len(drift_forks(store, uuid)) == made
    page.get_by_text("Stopped after").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "compaction-stopped.png"))
    page.locator('[data-testid="stDataFrame"]').last.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "compaction-stopped-runs.png"))
    assert page.locator('[data-testid="stException"]').count() == 0
    page.close()


def test_the_token_budget_hover_shows_the_whole_makeup(served: tuple[str, Path], browser: Browser) -> None:
    url, store = served
    page = open_page(browser, f"{url}/token_budget?store={store}&session={analyst(store)}")
    chart = page.locator('[data-testid="stPlotlyChart"]').first
    chart.scroll_into_view_if_needed()
    time.sleep(1)
    box = chart.locator(".nsewdrag").first.bounding_box()
    assert box is not None
    hover = ""
    for share in (0.5, 0.55, 0.6, 0.65, 0.7):  # plotly hovers on mouse moves, not on a jump
        page.mouse.move(box["x"] + box["width"] * share, box["y"] + box["height"] * 0.7)
        time.sleep(0.5)
        hover = chart.locator(".hoverlayer").text_content() or ""
        if "tokens (" in hover:
            break
    for category in ("system prompt", "tool definitions", "user", "assistant"):
        assert re.search(rf"{category}: [\d,]+ tokens \(\d+\.\d%\)", hover), hover
    assert re.search(r"call \d+: [\d,]+ tokens", hover), hover
    chart.screenshot(path=str(SHOTS / "token_budget-hover.png"))
    page.close()


def test_the_traceback_bars_are_labelled_with_their_calls_inside(
    served: tuple[str, Path], browser: Browser
) -> None:
    url, store = served
    archivist = next(s.uuid for s in Store(store).sessions() if s.role == "Archivist")
    page = open_page(browser, f"{url}/traceback?store={store}&session={archivist}")
    chart = page.locator('[data-testid="stPlotlyChart"]').first
    chart.scroll_into_view_if_needed()
    labels = chart.locator(".annotation text").all_text_contents()
    assert any(label.startswith("Researcher.invoke via ask_researcher") for label in labels), labels
    assert (chart.locator("g.legend").first.text_content() or "").count("LLM call") == 1
    chart.screenshot(path=str(SHOTS / "traceback-timeline.png"))
    page.close()
