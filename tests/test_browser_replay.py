"""A replay clicked through in headless Chromium as a person does it: edit the last user
message, run it against the local model, read the outputs side by side and the diff in
sentences, reload the page, and find the run and its diff still there (they are rebuilt
from the fork the run saved, not kept in the browser session)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from local_model import LocalModelServer
from replay import REPLAY_KEY, Output, materialize, output_words, replay, short_id
from soap_core import Context, Store
from soap_core.runtime import LLMEndpoint
from tests.test_browser import SHOTS, analyst, open_page, settle, streamlit_app

EDIT = "Say hello to the team."


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, workbench_store: Path, llm_server: LocalModelServer
) -> Iterator[tuple[str, Path]]:
    """The app over a copy of the workbench store, with the local model for replays."""
    store = tmp_path_factory.mktemp("browser-replay") / "store"
    shutil.copytree(workbench_store, store)
    log = tmp_path_factory.mktemp("streamlit-replay") / "streamlit.log"
    with streamlit_app(store, log, OPENAI_BASE_URL=llm_server.base_url) as url:
        yield url, store


def new_run(store: Path, session: str, before: set[str], timeout_s: float = 180) -> Context:
    """The replay fork the click made, once its answer is saved."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        contexts = Store(store).load_session(session).contexts
        new = [c for cid, c in contexts.items() if cid not in before and REPLAY_KEY in c.extra]
        if new and new[0].messages and new[0].messages[-1].role == "assistant":
            return new[0]
        time.sleep(0.5)
    pytest.fail("no replay fork with an answer appeared")


def main_text(page: Page) -> str:
    return page.inner_text('[data-testid="stMain"]')


def wait_for_text(page: Page, text: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in main_text(page) and time.monotonic() < deadline:
        time.sleep(0.5)


def full_screenshot(page: Page, name: str) -> None:
    """The whole page (Streamlit scrolls inside its main block, so a tall viewport it is)."""
    height = page.evaluate(
        "() => Math.max(...[...document.querySelectorAll('[data-testid=stMain] > *')]"
        ".map(e => e.scrollHeight), document.body.scrollHeight)"
    )
    page.set_viewport_size({"width": 1400, "height": min(int(height) + 200, 12_000)})
    time.sleep(1.0)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 1000})


def test_an_edited_replay_shows_side_by_side_and_outlasts_a_reload(
    served: tuple[str, Path], browser: Browser
) -> None:
    url, store = served
    session = analyst(store)
    loaded = Store(store).load_session(session)
    found = materialize(loaded, None, -1)
    edited = max(i for i, m in enumerate(found.messages) if m.role == "user" and m.text())
    before = set(loaded.contexts)
    page = open_page(browser, f"{url}/replay?store={store}&session={session}")
    assert page.locator('[data-testid="stException"]').count() == 0
    assert page.locator('[data-testid="stAlertContentError"]').count() == 0  # opens on a replayable message

    page.get_by_text("Messages of the request").click()
    area = page.locator(f'textarea[aria-label="Message {edited}"]')
    area.wait_for(timeout=30_000)
    area.fill(EDIT)
    page.get_by_role("button", name="Run", exact=True).click()
    fork = new_run(store, session, before)
    assert fork.messages[edited].text() == EDIT
    wait_for_text(page, f"fork {short_id(fork.id)}")
    settle(page)

    def shows_the_run() -> None:
        text = main_text(page)
        assert f"fork {short_id(fork.id)}" in text, text[-3000:]
        assert "Runs of this message" in text and "edited" in text
        assert "(both empty)" not in text
        box = page.locator('[data-testid="stVerticalBlock"]', has_text=f"fork {short_id(fork.id)}").last
        shown = box.inner_text()
        assert "• text changed:" in shown  # the diff in sentences
        left = box.get_by_text("Original", exact=True).first.bounding_box()
        right = box.get_by_text("This run (sample 0)", exact=True).first.bounding_box()
        assert left is not None and right is not None
        assert left["x"] < right["x"] and abs(left["y"] - right["y"]) < 5  # side by side
        assert page.locator('[data-testid="stException"]').count() == 0

    shows_the_run()
    full_screenshot(page, "replay-side-by-side")

    page.reload()
    page.wait_for_selector('[data-testid="stMain"]', timeout=30_000)
    wait_for_text(page, f"fork {short_id(fork.id)}")
    settle(page)
    shows_the_run()
    full_screenshot(page, "replay-after-reload")
    page.close()


def test_the_diff_tab_shows_a_tool_call_beside_a_text_answer_and_phrases_the_difference(
    served: tuple[str, Path], browser: Browser
) -> None:
    url, store = served
    session = Store(store).load_session(analyst(store))
    active = session.active_context
    call = max(i for i, m in enumerate(active.messages) if m.role == "assistant" and m.tool_uses())
    [fork] = [c for c in session.contexts.values() if REPLAY_KEY in c.extra][:1]
    page = open_page(browser, f"{url}/replay?store={store}&diff_a={active.id}@{call}&diff_b={fork.id}")
    wait_for_text(page, "count_errors removed")
    text = main_text(page)
    assert (
        "tool call 1: count_errors" in text
        and "tool call 1 count_errors removed (was count_errors())" in text
    )
    assert "(both empty)" not in text and "root[" not in text  # no raw DeepDiff path in sight
    # the Replay tab is drawn too, hidden: only what the Diff tab shows is measured
    left = (
        page.get_by_text("tool call 1: count_errors", exact=False).filter(visible=True).first.bounding_box()
    )
    right = page.get_by_text(fork.messages[-1].text(), exact=True).filter(visible=True).first.bounding_box()
    assert left is not None and right is not None and left["x"] < right["x"]
    # the runs the page colours are those of the word diff of the two outputs; the local
    # model's answer may share words with the call, so the first run of each kind is looked up
    runs = output_words(Output.of(active.messages[call]), Output.of(fork.messages[-1]))
    first = {op: text for op, text in reversed(runs)}
    assert "delete" in first and "insert" in first, runs
    removed = page.get_by_text("[-" + first["delete"], exact=False).filter(visible=True).first
    added = page.get_by_text("{+" + first["insert"], exact=False).filter(visible=True).first
    backgrounds = [
        run.evaluate("e => getComputedStyle(e.closest('span[style], span') || e).backgroundColor")
        for run in (removed, added)
    ]
    assert all(b not in ("", "rgba(0, 0, 0, 0)", "transparent") for b in backgrounds), backgrounds
    assert backgrounds[0] != backgrounds[1]  # red for the first's, green for the second's
    full_screenshot(page, "replay-diff-tab")
    page.close()


def test_a_replayed_tool_call_is_shown_as_text_on_both_sides(
    served: tuple[str, Path], browser: Browser, llm_server: LocalModelServer
) -> None:
    """The message that only calls a tool, replayed unchanged against the local model:
    both sides show the call as its name and arguments, and the diff names the argument."""
    url, store = served
    loaded = Store(store).load_session(analyst(store))
    active = loaded.active_context
    call = max(i for i, m in enumerate(active.messages) if m.role == "assistant" and m.tool_uses())
    found = materialize(loaded, active, call)
    [run] = replay(Store(store), loaded, found, LLMEndpoint(llm_server.base_url))
    assert run.ok and run.output is not None and run.output.tool_uses()
    page = open_page(browser, f"{url}/replay?store={store}&session={loaded.uuid}&message={call}")
    wait_for_text(page, f"fork {short_id(run.fork_id)}")
    settle(page)
    full_screenshot(page, "replay-tool-call")
    box = page.locator('[data-testid="stVerticalBlock"]', has_text=f"fork {short_id(run.fork_id)}").last
    name = run.output.tool_uses()[0].name
    deadline = time.monotonic() + 30  # code blocks draw once their highlighter has loaded
    while (shown := box.inner_text()).count(f"tool call 1: {name}") < 3 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert shown.count(f"tool call 1: {name}") == 3, shown  # left, right and the word diff
    assert "(both empty)" not in shown and "•" in shown and "root[" not in shown
    page.close()


def test_an_edit_typed_in_the_form_survives_a_change_of_the_settings_beside_it(
    served: tuple[str, Path], browser: Browser
) -> None:
    """The sample settings sit outside the form so that they can disable each other; a
    person who types an edit first and then checks the noise band keeps the edit, and
    sees K and concurrency come alive."""
    url, store = served
    session = analyst(store)
    found = materialize(Store(store).load_session(session), None, -1)
    edited = max(i for i, m in enumerate(found.messages) if m.role == "user" and m.text())
    page = open_page(browser, f"{url}/replay?store={store}&session={session}")
    unchanged = page.get_by_role("spinbutton", name="Unchanged samples (K)")
    assert unchanged.is_disabled()
    page.get_by_text("Messages of the request").click()
    area = page.locator(f'textarea[aria-label="Message {edited}"]')
    area.fill(EDIT)
    page.get_by_text("Measure the noise band").click()
    settle(page)
    assert not page.get_by_role("spinbutton", name="Unchanged samples (K)").is_disabled()
    assert not page.get_by_role("spinbutton", name="Concurrency").is_disabled()
    assert page.locator(f'textarea[aria-label="Message {edited}"]').input_value() == EDIT
    page.close()
