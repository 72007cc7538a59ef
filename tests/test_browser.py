"""The real workbench in headless Chromium: every page opens without an exception, message
content stays text, and one replay is clicked through. Screenshots of every page are kept
in test-output/browser/ (the README's come from there)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from local_model import LocalModelServer, free_port
from replay import short_id
from soap_core import Store, session_overview
from soapwb.ui_commands import streamlit_command
from tests.workbench_store import XSS
from workbench.session_filters import SORTS, SessionFilter, narrowed

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "test-output" / "browser"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PAGES = {
    "sessions": "",
    "context": "context",
    "fork_tree": "fork_tree",
    "traceback": "traceback",
    "token_budget": "token_budget",
    "replay": "replay",
    "compaction": "compaction",
    "object_state": "object_state",
}


SERVER_TROUBLE = ("Traceback (most recent call last)", "Session State API")
"""Signs in the server's terminal of an exception or of a widget given a value both ways
(Streamlit's "was created with a default value but also had its value set via the
Session State API", issue 23): every browser test fails on them."""


@contextlib.contextmanager
def streamlit_app(store: Path, log_path: Path, **env_extra: str) -> Iterator[str]:
    """``streamlit run app.py`` on a free loopback port; yields its URL."""
    port = free_port()
    env = {**os.environ, "SOAPWB_STORE": str(store), **env_extra}
    log = log_path.open("w")
    command = streamlit_command("127.0.0.1", port)
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as answer:
                if answer.read() == b"ok":
                    break
        except OSError:
            assert process.poll() is None, "streamlit exited"
            assert time.monotonic() < deadline, "streamlit never answered"
            time.sleep(0.3)
    try:
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()
    said = log_path.read_text("utf-8", errors="replace")
    for sign in SERVER_TROUBLE:  # what the person running the workbench would see in the terminal
        assert sign not in said, f"the server said {sign!r}:\n{said[said.index(sign) - 2000 :][:4000]}"


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, workbench_store: Path, llm_server: LocalModelServer
) -> Iterator[tuple[str, Path]]:
    """The app over a copy of the workbench store, with the local model for replays."""
    store = tmp_path_factory.mktemp("browser") / "store"
    shutil.copytree(workbench_store, store)
    log = tmp_path_factory.mktemp("streamlit") / "streamlit.log"
    with streamlit_app(store, log, OPENAI_BASE_URL=llm_server.base_url) as url:
        yield url, store


def open_page(browser: Browser, url: str) -> Page:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url)
    page.wait_for_selector('[data-testid="stMain"]', timeout=30_000)
    settle(page)
    return page


MARKED = (
    "(key) => { const box = document.querySelector('.st-key-' + key);"
    " return box !== null && getComputedStyle(box).borderTopColor === 'rgb(255, 75, 75)'; }"
)
"""For ``page.wait_for_function(MARKED, arg=key)``: the message box ``key`` is drawn with
the linked message's red border. False, not an error, while the box is not drawn yet:
the URL changes before the page that holds it is."""
IN_VIEW = (
    "(key) => { const box = document.querySelector('.st-key-' + key);"
    " if (box === null) return false; const r = box.getBoundingClientRect();"
    " return r.top >= 0 && r.top < window.innerHeight; }"
)
"""For ``page.wait_for_function(IN_VIEW, arg=key)``: the box ``key`` is drawn and its top is
inside the window."""


def settle(page: Page, timeout_s: float = 60) -> None:
    """Wait until the script run is over and every placeholder and chart has drawn."""
    deadline = time.monotonic() + timeout_s

    def busy() -> bool:
        charts = page.locator('[data-testid="stPlotlyChart"]')
        drawn = page.locator('[data-testid="stPlotlyChart"] .main-svg')
        return bool(
            # a run that has not drawn its first element yet (a loaded machine can take
            # longer than the first half second to start it) is as busy as a running one
            not page.locator('[data-testid="stMain"] [data-testid="stElementContainer"]').count()
            or page.locator('[data-testid="stStatusWidget"]').count()
            or page.locator('[data-testid="stSkeleton"]').count()
            or drawn.count() < charts.count()
        )

    time.sleep(0.5)
    while busy() and time.monotonic() < deadline:
        time.sleep(0.2)
    page.wait_for_load_state("networkidle")
    time.sleep(1.0)


def analyst(store: Path) -> str:
    [summary] = [s for s in Store(store).sessions() if s.role == "Analyst"]
    return summary.uuid


@pytest.mark.parametrize("name", list(PAGES))
def test_every_page_opens_without_an_exception(name: str, served: tuple[str, Path], browser: Browser) -> None:
    url, store = served
    page = open_page(browser, f"{url}/{PAGES[name]}?store={store}&session={analyst(store)}")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    assert page.locator('[data-testid="stException"]').count() == 0, page.inner_text(
        '[data-testid="stMain"]'
    )[:2000]
    assert "Traceback (most recent call last)" not in page.inner_text("body")
    page.close()


def test_the_chosen_session_follows_through_the_sidebar(served: tuple[str, Path], browser: Browser) -> None:
    """A session picked on the Sessions page stays chosen on every page reached from the
    sidebar (whose links clear the URL's parameters), with its context and message."""
    url, store = served
    session = analyst(store)
    page = open_page(browser, f"{url}/?store={store}")
    page.locator('[data-testid="stSelectbox"]', has_text=re.compile(r"^Session")).first.click()
    page.locator('[role="option"]', has_text="Analyst").first.click()
    page.wait_for_url(f"**session={session}**", timeout=60_000)
    settle(page)
    assert f"session={session}" in page.url
    seen = {}
    for link, slug in (
        ("Context", "context"),
        ("Token budget", "token_budget"),
        ("Replay & diff", "replay"),
        ("Fork tree", "fork_tree"),
    ):
        page.get_by_role("link", name=link, exact=True).click()
        page.wait_for_url(f"**/{slug}**", timeout=60_000)
        settle(page)
        main = page.inner_text('[data-testid="stMain"]')
        seen[link] = (f"session={session}" in page.url, "Pick a session" not in main)
    assert seen == {link: (True, True) for link in seen}, seen
    context = page.url.split("context=", 1)[1].split("&", 1)[0]
    page.get_by_role("link", name="Sessions", exact=True).click()
    page.wait_for_url(lambda address: "/fork_tree" not in address, timeout=60_000)
    settle(page)
    page.get_by_role("link", name="Context", exact=True).click()
    page.wait_for_url("**/context**", timeout=60_000)
    settle(page)
    assert f"context={context}" in page.url, "the context chosen on a page is kept too"
    page.close()


def test_clicking_a_row_of_the_sessions_table_opens_its_context(
    served: tuple[str, Path], browser: Browser
) -> None:
    url, store = served
    session = analyst(store)
    listing = Store(store)
    overviews = [session_overview(listing, s) for s in listing.sessions()]
    row = [o.uuid for o in narrowed(overviews, SessionFilter(), next(iter(SORTS)))].index(session)  # as drawn
    page = open_page(browser, f"{url}/?store={store}")
    grid = page.locator('[data-testid="stDataFrame"]').first
    box = grid.bounding_box()
    assert box is not None
    row_height = 35  # the grid's header and rows, at streamlit's default size
    page.mouse.click(box["x"] + 12, box["y"] + row_height * (row + 1) + row_height / 2)
    with contextlib.suppress(PlaywrightTimeout):  # the assertion below says where it stayed
        page.wait_for_url("**/context?**", timeout=60_000)
    settle(page)
    assert "/context?" in page.url and f"session={session}" in page.url, page.url
    assert "Pick a session" not in page.inner_text('[data-testid="stMain"]')
    page.close()


def test_html_in_a_message_is_shown_as_text(served: tuple[str, Path], browser: Browser) -> None:
    url, store = served
    dialogs: list[str] = []
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(f"{url}/context?store={store}&session={analyst(store)}")
    page.wait_for_selector('[data-testid="stMain"]', timeout=30_000)
    settle(page)
    main = page.locator('[data-testid="stMain"]')
    with contextlib.suppress(PlaywrightTimeout):  # a loaded machine draws the messages late
        main.get_by_text(XSS, exact=False).first.wait_for(timeout=60_000)
    assert XSS in main.inner_text()
    assert page.locator('img[src="x"]').count() == 0
    assert main.locator("script").count() == 0
    assert dialogs == []
    page.screenshot(path=str(SHOTS / "context-html-as-text.png"), full_page=False)
    page.close()


def test_one_replay_clicked_through_saves_a_fork_and_shows_its_output(
    served: tuple[str, Path], browser: Browser
) -> None:
    url, store = served
    session = analyst(store)
    before = {cid for cid in Store(store).load_session(session).contexts}
    page = open_page(browser, f"{url}/replay?store={store}&session={session}")
    page.get_by_role("button", name="Run", exact=True).click()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        after = Store(store).load_session(session).contexts
        new = [c for cid, c in after.items() if cid not in before and "soapwb_replay" in c.extra]
        if new and new[0].messages and new[0].messages[-1].role == "assistant":
            break
        time.sleep(0.5)
    else:
        pytest.fail("no replay fork with an answer appeared")
    settle(page)
    text = page.inner_text('[data-testid="stMain"]')
    assert f"fork {short_id(new[0].id)}" in text  # the short id, the full one in its tooltip
    assert page.locator('[data-testid="stException"]').count() == 0
    page.screenshot(path=str(SHOTS / "replay-after-run.png"), full_page=True)
    page.close()


def test_the_first_request_of_a_new_server_for_a_page_url_gets_the_apps_navigation(
    workbench_store: Path, browser: Browser, tmp_path: Path
) -> None:
    with streamlit_app(workbench_store, tmp_path / "streamlit.log") as url:
        page = open_page(browser, f"{url}/traceback")
        page.wait_for_selector('[data-testid="stSidebar"] >> text=Store (folder or URL)', timeout=20_000)
        sidebar = page.inner_text('[data-testid="stSidebar"]')
        assert "Store (folder or URL)" in sidebar and "Token budget" in sidebar
        assert "No store chosen" not in page.inner_text('[data-testid="stMain"]')
        page.close()


def test_ctrl_enter_in_a_box_of_the_replay_form_runs_nothing_only_the_button_does(
    served: tuple[str, Path], browser: Browser
) -> None:
    """Streamlit submits a form on Ctrl+Enter in a text area (its first button: Run); the
    replay form turns that off, so typing an edit never sends a request by accident. The
    endpoint is a port where nothing listens: a run says so on the page, and saves nothing."""
    url, store = served
    session = analyst(store)
    page = open_page(browser, f"{url}/replay?store={store}&session={session}")
    page.get_by_text("Materialized request").first.wait_for(timeout=60_000)
    endpoint = page.get_by_label("Endpoint base URL")
    endpoint.fill(f"http://127.0.0.1:{free_port()}/v1")
    endpoint.press("Enter")
    settle(page)
    page.get_by_text("Messages of the request").click()
    area = page.locator('textarea[aria-label="Message 5"]')
    area.wait_for(timeout=30_000)
    area.fill("Count them twice.")
    area.press("Control+Enter")
    time.sleep(3)
    settle(page)
    main = page.locator('[data-testid="stMain"]')
    assert "never reached the model" not in main.inner_text(), "Ctrl+Enter ran the request"
    page.get_by_role("button", name="Run", exact=True).click()
    page.get_by_text("never reached the model").first.wait_for(timeout=60_000)
    page.close()
