"""Attribution and isolation as a person sees them in headless Chromium (issue 29): a link
to an attributed answer opens the Context page with the answer's heat strip drawn and
each message's weight on its badge (a paragraph by its strongest sentence); the answer's
link goes on to the Replay page, whose "Why this answer" shows the same attribution with
its unit chosen, and the kept isolation with every run it made."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from analysis import Check, attribute, isolate, save_attribution, save_isolation
from local_model import LocalModelServer
from replay import Overrides, ServerScorer, materialize
from soap_core import Store
from soap_core.runtime import LLMEndpoint
from soap_gen import planted_paragraph
from tests.test_browser import open_page, settle, streamlit_app
from tests.test_browser_replay import full_screenshot, main_text, wait_for_text


@pytest.fixture(scope="module")
def attributed(
    tmp_path_factory: pytest.TempPathFactory, scoring_server: LocalModelServer, llm_server: LocalModelServer
) -> Iterator[tuple[str, str, int]]:
    """The app over a store whose planted answer is attributed by sentence on the real
    model and isolated (the app's URL, the session, the planted sentence's number)."""
    store = Store(tmp_path_factory.mktemp("browser-attribution") / "store")
    session, planted = planted_paragraph(store, seed=7, distractors=3)
    found = materialize(session, None, -1)
    with ServerScorer(scoring_server.base_url) as scorer:
        save_attribution(store, session, attribute(session, found, scorer, ablations=8, unit="sentence"))
    code = session.active_context.messages[-1].text().split()[-1].rstrip(".")
    made = isolate(
        store,
        session,
        found,
        LLMEndpoint(llm_server.base_url),
        Check.parse(f"contains:{code}"),
        noise=1,
        base=Overrides(max_tokens=16, temperature=0),
    )
    save_isolation(store, session, made)
    log = tmp_path_factory.mktemp("streamlit-attribution") / "streamlit.log"
    with streamlit_app(store.root, log) as url:
        yield url, session.uuid, planted


def test_a_link_to_an_attributed_answer_shows_its_weights_and_leads_to_its_isolation(
    attributed: tuple[str, str, int], browser: Browser
) -> None:
    url, session, planted = attributed
    page = open_page(browser, f"{url}/context?session={session}&message=3")
    wait_for_text(page, "Why the answer at message 3")
    text = main_text(page)
    assert f"user message #1, sentence {planted}" in text.split("Why the answer at message 3")[1]
    heat = page.locator('[data-testid="stExpander"] [data-testid="stPlotlyChart"] .main-svg')
    assert heat.count() >= 1 and heat.first.bounding_box()["width"] > 300  # type: ignore[index]
    assert f"to the answer at message 3 (its sentence {planted})" in text
    full_screenshot(page, "attribution-context")

    page.get_by_text("Replay it, or re-run the agent from here").first.click()
    page.wait_for_url("**/replay?**")
    settle(page)
    wait_for_text(page, "Why this answer")
    assert page.locator('input[aria-label="Unit"]').input_value() == "sentence"  # the attribution's own
    wait_for_text(page, "unchanged")
    text = main_text(page)
    assert f"#1.{planted}" in text
    assert "does not hold" in text  # the isolation's runs, each with its check
    # ddmin went in the order of the attribution by sentence, each message by its strongest
    assert "each message by its sentence that weighs most" in text
    full_screenshot(page, "attribution-replay")
    page.close()
