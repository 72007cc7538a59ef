"""The Context page as a transcript in headless Chromium, as a person uses it: a result
sits under its call, thinking is folded until opened, ids appear only after the details
toggle is switched, a link to a tool-result message lands on it marked, and a result on
the next page is one click away. Screenshots go to test-output/browser/."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_browser import CHROMIUM, FLAGS, IN_VIEW, MARKED, SHOTS, settle, streamlit_app
from tests.transcript_store import transcript_store

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no chromium at {CHROMIUM}")


def test_the_transcript_nests_results_folds_thinking_hides_ids_and_marks_a_linked_result(
    tmp_path: Path,
) -> None:
    from playwright.sync_api import sync_playwright

    root = tmp_path / "store"
    session, marks = transcript_store(root)
    messages = session.active_context.messages
    base = f"/context?store={root}&session={session.uuid}"
    SHOTS.mkdir(parents=True, exist_ok=True)
    with streamlit_app(root, tmp_path / "streamlit.log") as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url + base)
        page.locator(".st-key-message-0").wait_for(state="visible", timeout=60_000)
        settle(page)
        assert page.locator('[data-testid="stException"]').count() == 0

        # the result is inside its call's box, and only there
        nested = page.locator(f".st-key-message-{marks.call} .st-key-message-{marks.result}")
        assert nested.count() == 1 and nested.is_visible()
        assert "12 books" in nested.inner_text()
        assert page.locator(f".st-key-message-{marks.result}").count() == 1
        call_box = page.locator(f".st-key-message-{marks.call}")
        assert 'tool call search(query="cats")' in call_box.inner_text()

        # thinking is folded until its expander is opened
        thinking = page.get_by_text("The catalogue knows; search it first.")
        assert not thinking.is_visible()
        call_box.get_by_text("thinking").first.click()
        thinking.wait_for(state="visible", timeout=10_000)
        call_box.get_by_text("thinking").first.click()  # folded again for the screenshot

        # ids and sequence numbers wait behind the details toggle
        main = page.locator('[data-testid="stMain"]')
        call_id = messages[marks.call].id
        assert call_id not in main.inner_text() and "call_id call_cats" not in main.inner_text()
        page.screenshot(path=str(SHOTS / "context-transcript.png"), full_page=False)
        page.get_by_text("Show details (ids, sequence numbers, anchors)").click()
        page.get_by_text(f"id {call_id}", exact=False).first.wait_for(state="visible", timeout=30_000)
        settle(page)
        assert "call_id call_cats" in main.inner_text() and "details=1" in page.url
        page.screenshot(path=str(SHOTS / "context-transcript-details.png"), full_page=False)

        # a link to the tool-result message lands on it, marked, inside its call
        page.goto(f"{url}{base}&message={marks.result}")
        key = f"message-{marks.result}"
        page.locator(f".st-key-{key}").wait_for(state="visible", timeout=60_000)
        page.wait_for_function(MARKED, arg=key, timeout=10_000)
        page.wait_for_function(IN_VIEW, arg=key, timeout=10_000)
        settle(page)
        linked = page.locator(f".st-key-message-{marks.call} .st-key-{key}")
        assert linked.count() == 1 and f"▶ message {marks.result}, as linked" in linked.inner_text()
        page.screenshot(path=str(SHOTS / "context-transcript-linked-result.png"), full_page=False)

        # the result on the next page is one click away, and it names its call
        page.goto(url + base)
        page.locator(".st-key-message-0").wait_for(state="visible", timeout=60_000)
        settle(page)
        page.locator(f".st-key-message-{marks.boundary_call}").get_by_text("result on page 2").click()
        page.wait_for_url(f"**message={marks.boundary_result}**", timeout=30_000)
        key = f"message-{marks.boundary_result}"
        page.wait_for_function(MARKED, arg=key, timeout=30_000)
        settle(page)
        shown = page.locator(f".st-key-{key}").inner_text()
        assert 'result of search(query="edge")' in shown and "the call is on page 1" in shown
        assert page.locator('[data-testid="stException"]').count() == 0
        browser.close()
