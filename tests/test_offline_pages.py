"""The workbench asks nothing of another machine (headless Chromium): every page opened
with each request leaving 127.0.0.1 blocked and counted finds none, and a session whose
tools are named like links shows no link off the machine on its Context page."""

from __future__ import annotations

import shutil
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Route

from local_model import LocalModelServer
from tests.test_browser import PAGES, SHOTS, analyst, settle, streamlit_app
from tests.test_page_labels import LINK_NAMES, link_named_store

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
INLINE_SCHEMES = {"data", "blob", "about"}
"""URLs the browser answers itself, without asking any machine."""


def leaves_the_machine(url: str) -> bool:
    """Whether fetching or following ``url`` asks another machine: anything but a URL the
    browser answers itself and an http(s)/ws(s) URL of this machine (a ``mailto:`` is
    a link off the machine too)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme in INLINE_SCHEMES:
        return False
    return parts.scheme not in {"http", "https", "ws", "wss"} or parts.hostname not in LOCAL_HOSTS


@pytest.fixture(scope="module")
def offline(
    tmp_path_factory: pytest.TempPathFactory, workbench_store: Path, llm_server: LocalModelServer
) -> Iterator[tuple[str, Path, str]]:
    """The app as ``soapwb ui`` runs it (a local model for replays) over the workbench
    store plus a session whose tools are named like links: (url, store, that session)."""
    store = tmp_path_factory.mktemp("offline") / "store"
    shutil.copytree(workbench_store, store)
    linker = link_named_store(store)
    log = tmp_path_factory.mktemp("streamlit") / "streamlit.log"
    with streamlit_app(store, log, OPENAI_BASE_URL=llm_server.base_url) as url:
        yield url, store, linker.uuid


def open_blocking(browser: Browser, url: str, outside: list[str]) -> Page:
    """``url`` in a new page whose every request leaving the machine is refused and
    recorded in ``outside``."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})

    def refuse_outside(route: Route) -> None:
        if leaves_the_machine(route.request.url):
            outside.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    page.route("**/*", refuse_outside)
    page.goto(url)
    drawn(page)
    return page


RUN_OVER = '[data-testid="stApp"][data-test-script-state="notRunning"]'
"""The app once a script run is over (before the first it is ``initial``)."""


def drawn(page: Page) -> None:
    """Wait until the page's script run is over and what it sent has drawn: a page
    whose requests are routed loads its scripts later, and a check made sooner would
    see an empty page ask for nothing."""
    page.wait_for_selector('[data-testid="stMain"] h1', timeout=120_000)
    page.wait_for_selector(RUN_OVER, state="attached", timeout=120_000)
    settle(page)
    page.wait_for_selector(RUN_OVER, state="attached", timeout=120_000)


def test_no_page_of_the_workbench_asks_another_machine_for_anything(
    offline: tuple[str, Path, str], browser: Browser
) -> None:
    url, store, _ = offline
    asked: dict[str, list[str]] = {}
    for name, slug in PAGES.items():
        outside: list[str] = []
        page = open_blocking(browser, f"{url}/{slug}?store={store}&session={analyst(store)}", outside)
        assert page.locator('[data-testid="stException"]').count() == 0, name  # it drew, without the outside
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"offline-{name}.png"), full_page=True)
        page.close()
        if outside:
            asked[name] = outside
    assert asked == {}


def test_the_context_page_links_nowhere_off_the_machine_for_tools_named_like_links(
    offline: tuple[str, Path, str], browser: Browser
) -> None:
    url, store, linker = offline
    outside: list[str] = []
    page = open_blocking(browser, f"{url}/context?store={store}&session={linker}", outside)
    labels = [  # the tool definitions' expander, and the tool call and the turn in the sidebar's outline
        page.locator('[data-testid="stExpander"] summary', has_text="4 tool definitions"),
        page.locator('[data-testid="stSidebar"] [data-testid="stRadio"] label', has_text="tool call"),
        page.locator('[data-testid="stSidebar"] [data-testid="stRadio"] label', has_text="Write to mail"),
    ]
    for label in labels:
        label.first.wait_for(timeout=60_000)
    drawn(page)
    for label in labels:  # each reads as written, the invisible joiners aside
        shown = label.first.inner_text().replace("\u2060", "")
        assert any(name in shown for name in LINK_NAMES), shown
    links = page.eval_on_selector_all("a[href]", "links => links.map(a => a.href)")
    page.screenshot(path=str(SHOTS / "offline-context-link-names.png"), full_page=True)
    page.close()
    assert [link for link in links if leaves_the_machine(link)] == []
    assert outside == []
