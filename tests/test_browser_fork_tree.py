"""The Fork tree in a real headless Chromium, on a session whose replay forks were made by
real replays against the local model: the runs are drawn as one named node each, the
"Show replay forks" toggle shows and hides every fork, two contexts picked one after the
other both stay picked and both reach the Diff link, and a click on a node opens it."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from playwright.sync_api import Browser, Page
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from local_model import LocalModelServer
from replay import replay_runs
from soap_core import Store
from tests.replayed_store import ReplayedStore, replayed_store
from tests.test_browser import SHOTS, settle, streamlit_app


@pytest.fixture(scope="module")
def replayed_app(
    tmp_path_factory: pytest.TempPathFactory, workbench_store: Path, llm_server: LocalModelServer
) -> Iterator[tuple[str, ReplayedStore]]:
    replayed = replayed_store(workbench_store, tmp_path_factory.mktemp("tree") / "store", llm_server.base_url)
    log = tmp_path_factory.mktemp("streamlit-tree") / "streamlit.log"
    with streamlit_app(replayed.root, log, OPENAI_BASE_URL=llm_server.base_url) as url:
        yield url, replayed


def chart_text(page: Page) -> str:
    return page.locator('[data-testid="stPlotlyChart"]').first.inner_text()


def query(page: Page) -> dict[str, str]:
    return {key: values[0] for key, values in parse_qs(urlparse(page.url).query).items()}


def pick_option(page: Page, label: str, starting: str) -> None:
    """Open the multiselect or selectbox labelled ``label``, type to narrow its options
    (the list draws only those in view) and click the one that begins with ``starting``."""
    box = page.get_by_role("combobox", name=label)
    box.click()
    box.press_sequentially(starting, delay=10)
    page.get_by_role("option").filter(has_text=re.compile("^" + re.escape(starting))).first.click()
    page.keyboard.press("Escape")


def picked_tags(page: Page) -> list[str]:
    """The labels of the picks a multiselect shows as tags."""
    tags = page.locator('[data-testid="stMultiSelect"] [data-tag]')
    return [tags.nth(i).get_attribute("aria-label") or "" for i in range(tags.count())]


def click_point(page: Page, trace: int, point: int = 0) -> None:
    """A mouse click on one marker of the chart (traces: edges, then one per kind)."""
    marker = page.locator('[data-testid="stPlotlyChart"] .scatterlayer .trace').nth(trace).locator(".point")
    marker.nth(point).scroll_into_view_if_needed()
    page.mouse.move(0, 0)
    box = marker.nth(point).bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)


def test_the_fork_tree_groups_hides_and_sends_two_to_diff(
    replayed_app: tuple[str, ReplayedStore], browser: Browser
) -> None:
    url, replayed = replayed_app
    main = f"main@{replayed.index}"
    page = browser.new_page(viewport={"width": 1400, "height": 2600})  # tall: the screenshots show it all
    page.goto(f"{url}/fork_tree?store={replayed.root}&session={replayed.session}")
    page.wait_for_selector('[data-testid="stPlotlyChart"] .main-svg', timeout=60_000)
    settle(page)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "fork_tree-runs.png"), full_page=True)

    drawn = chart_text(page)
    assert f"replay of {main}: temperature 0.9 (3 samples)" in drawn
    assert f"noise band: replay of {main} (2 samples)" in drawn
    assert "sample 1 of 3" not in drawn  # each run is one node until the forks are shown
    main_text = page.inner_text('[data-testid="stMain"]')
    assert "Analyst · " in main_text and "The 7 replay forks are shown as one node per run." in main_text

    page.get_by_text("Show replay forks").click()
    page.wait_for_url("**forks=all**", timeout=60_000)
    settle(page)
    assert "sample 2 of 3" in chart_text(page)
    page.screenshot(path=str(SHOTS / "fork_tree-all-forks.png"), full_page=True)
    page.get_by_text("Show replay forks").click()
    page.wait_for_url(lambda address: "forks=all" not in address, timeout=60_000)
    settle(page)
    assert "sample 2 of 3" not in chart_text(page), "the forks are hidden again"

    pick_option(page, "Two contexts to diff", f"replay of {main}: temperature 0.9 · sample 1 of 3")
    page.wait_for_url("**diff_a=**", timeout=60_000)
    settle(page)
    pick_option(page, "Two contexts to diff", f"noise band: replay of {main} · sample 2 of 2")
    with contextlib.suppress(PlaywrightTimeout):  # the assertions below say what was kept
        page.wait_for_url("**diff_b=**", timeout=60_000)
    settle(page)
    tags = picked_tags(page)
    assert len(tags) == 2, tags
    assert tags[0].startswith(f"replay of {main}: temperature 0.9 · sample 1 of 3 · ")
    assert tags[1].startswith(f"noise band: replay of {main} · sample 2 of 2 · ")
    assert (query(page).get("diff_a"), query(page).get("diff_b")) == (replayed.hot[0], replayed.noise[1])
    link = page.get_by_role("link", name="Diff these two")
    href = link.get_attribute("href") or ""
    assert f"diff_a={replayed.hot[0]}" in href and f"diff_b={replayed.noise[1]}" in href, href
    page.screenshot(path=str(SHOTS / "fork_tree-diff-pair.png"), full_page=True)

    click_point(page, trace=1)  # the root
    page.wait_for_url(
        lambda address: query_of(address).get("context") not in (None, replayed.active), timeout=60_000
    )
    settle(page)
    node = page.get_by_role("combobox", name="Node").input_value()
    assert "root · " in node, node
    assert picked_tags(page) == tags, "a click on a node keeps the pair"

    runs = {run.id for run in replay_runs(Store(replayed.root).load_session(replayed.session))}
    click_point(page, trace=3)  # the first run's node
    page.wait_for_url(lambda address: query_of(address).get("context") in runs, timeout=60_000)
    settle(page)
    node = page.get_by_role("combobox", name="Node").input_value()
    assert node.startswith(("replay of", "noise band")), node
    page.screenshot(path=str(SHOTS / "fork_tree-run-opened.png"), full_page=True)
    page.close()


def query_of(address: str) -> dict[str, str]:
    return {key: values[0] for key, values in parse_qs(urlparse(address).query).items()}
