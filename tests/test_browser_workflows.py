"""The workflows of issue 14, walked in headless Chromium as a person walks them, on the
demo store and on a generated long context: find a session by text, open the hit, land
on its message, go to Token budget and Replay without picking again, replay with an edit,
see the diff, reload and still see it, hide the replay forks. Each step names itself, so
a failure says which step of the walk broke. Screenshots of each step go to
test-output/browser/workflow-*.png (the README's come from there)."""

from __future__ import annotations

import contextlib
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from demo.build import ANALYZER_STEPS
from local_model import LocalModelServer
from replay import REPLAY_KEY, materialize, short_id
from soap_core import Context, Session, Store, TextPart, read_invocations
from tests.test_browser import CHROMIUM, IN_VIEW, MARKED, SHOTS, settle, streamlit_app
from tests.test_page_context_long import long_store
from workbench.replay_views import EDIT_TAIL

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no chromium at {CHROMIUM}")

EDIT = "Which lines mention db-2? Call grep to look for db-2."
WAIT_MS = 90_000
"""A step's patience: the machine is shared, and a first page view parses the store."""


class Walk:
    """One browser tab walking a workflow; :meth:`step` names what the user does next,
    so that an assertion failing inside it says which step broke, with the page's text."""

    def __init__(self, browser: Browser, name: str) -> None:
        self.page: Page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.name = name
        self.current = ""
        self.shots = 0

    @contextlib.contextmanager
    def step(self, what: str) -> Iterator[Page]:
        self.current = what
        try:
            yield self.page
        except (AssertionError, PlaywrightTimeout) as exc:
            main = self.page.locator('[data-testid="stMain"]')
            shown = main.inner_text()[:3000] if main.count() else "(no page)"
            pytest.fail(f"{self.name}, step {what!r} failed: {exc}\nurl {self.page.url}\npage:\n{shown}")
        exceptions = self.page.locator('[data-testid="stException"]')
        assert exceptions.count() == 0, f"step {what!r}: {exceptions.first.inner_text()}"
        assert "Traceback (most recent call last)" not in self.page.inner_text("body"), what

    def shot(self, label: str) -> None:
        """The whole page: Streamlit scrolls inside its main block, so through a viewport
        as tall as the page (at most 6,000 px), put back afterwards."""
        self.shots += 1
        SHOTS.mkdir(parents=True, exist_ok=True)
        height = self.page.evaluate(
            "() => Math.max(...[...document.querySelectorAll('[data-testid=stMain] *')]"
            ".map(e => e.scrollHeight), document.body.scrollHeight)"
        )
        self.page.set_viewport_size({"width": 1400, "height": min(int(height) + 100, 6_000)})
        time.sleep(1.0)
        self.page.screenshot(path=str(SHOTS / f"workflow-{self.name}-{self.shots}-{label}.png"))
        self.page.set_viewport_size({"width": 1400, "height": 1000})

    def main_text(self) -> str:
        return self.page.inner_text('[data-testid="stMain"]')

    def sidebar(self, link: str, slug: str) -> None:
        """Click a page in the sidebar (its links carry no query parameters) and wait."""
        self.page.get_by_role("link", name=link, exact=True).click()
        self.page.wait_for_url(f"**/{slug}?**", timeout=WAIT_MS)
        settle(self.page)

    def search(self, text: str) -> None:
        box = self.page.get_by_label("Text to find (case-insensitive)")
        box.fill(text)
        box.press("Enter")
        shown = re.compile(r"\d+ messages? contains? " + re.escape(repr(text)))
        self.page.get_by_text(shown).first.wait_for(timeout=WAIT_MS)
        settle(self.page)

    def linked_message_marked_in_view(self, index: int) -> None:
        key = f"message-{index}"
        self.page.locator(f".st-key-{key}").wait_for(state="visible", timeout=WAIT_MS)
        self.page.wait_for_function(MARKED, arg=key, timeout=WAIT_MS)
        self.page.wait_for_function(IN_VIEW, arg=key, timeout=WAIT_MS)

    def close(self) -> None:
        self.page.close()


def wait_for_message(page: Page, message: int) -> None:
    """Wait until the page has written ``message=`` into its URL: a page sets its query
    parameters while it runs, after the navigation a click waits for."""
    from playwright.sync_api import expect

    expect(page).to_have_url(re.compile(rf"[?&]message={message}(&|$)"), timeout=WAIT_MS)


def query(page: Page) -> dict[str, str]:
    from urllib.parse import parse_qsl, urlparse

    return dict(parse_qsl(urlparse(page.url).query))


@pytest.fixture(scope="module")
def demo_served(
    tmp_path_factory: pytest.TempPathFactory, demo_store: Path, llm_server: LocalModelServer
) -> Iterator[tuple[str, Path]]:
    """The app over a copy of the demo store, with the local model for replays."""
    store = tmp_path_factory.mktemp("workflow") / "store"
    shutil.copytree(demo_store, store)
    log = tmp_path_factory.mktemp("streamlit") / "streamlit.log"
    with streamlit_app(store, log, OPENAI_BASE_URL=llm_server.base_url) as url:
        yield url, store


def the_message_asking(session: Session, question: str) -> tuple[str, int]:
    """(context id, display index) of the user message of the active context asking it."""
    context = session.active_context
    for index, message in enumerate(context.messages):
        texts = [p.text for p in message.content if isinstance(p, TextPart)]
        if message.role == "user" and question in texts:
            return context.id, index
    raise AssertionError(f"no user message asks {question!r}")


def test_find_open_jump_budget_replay_edit_diff_reload_and_hide_on_the_demo_store(
    demo_served: tuple[str, Path], browser: Browser
) -> None:
    url, store = demo_served
    question = next(q for q, _tool in ANALYZER_STEPS if "db-1" in q)
    [analyzer] = [s for s in Store(store).sessions() if s.role == "LogAnalyzer"]
    session = Store(store).load_session(analyzer.uuid)
    context_id, asked = the_message_asking(session, question)
    answer = next(
        i for i, m in enumerate(session.contexts[context_id].messages) if i > asked and m.role == "assistant"
    )
    walk = Walk(browser, "demo")

    with walk.step("open the Sessions page") as page:
        page.goto(f"{url}/?store={store}")
        page.get_by_text(f"{len(Store(store).sessions())} sessions").wait_for(timeout=WAIT_MS)
        settle(page)

    with walk.step("find the session by a word of its conversation") as page:
        walk.search("db-1")
        hit = page.locator('[data-testid="stMain"] [data-testid="stPageLink"] a', has_text=f"message {asked}")
        assert hit.count() >= 1, "no link to the message asking about db-1"
        walk.shot("search")

    with walk.step("open the hit: the Context page on that message, marked and in view") as page:
        hit.first.click()
        page.wait_for_url("**/context?**", timeout=WAIT_MS)
        settle(page)
        assert query(page)["session"] == analyzer.uuid and query(page)["message"] == str(asked)
        walk.linked_message_marked_in_view(asked)
        assert question in page.locator(f".st-key-message-{asked}").inner_text()
        walk.shot("context")

    with walk.step("go to Token budget in the sidebar: the same session, no picking") as page:
        walk.sidebar("Token budget", "token_budget")
        assert query(page)["session"] == analyzer.uuid
        assert "Pick a session" not in walk.main_text()
        page.locator('[data-testid="stPlotlyChart"] .main-svg').first.wait_for(timeout=WAIT_MS)
        walk.shot("token-budget")

    with walk.step("go to Replay in the sidebar: the answer to the linked message, verified") as page:
        walk.sidebar("Replay & diff", "replay")
        wait_for_message(page, answer)  # Replay opens on the model's answer to the message
        assert query(page)["session"] == analyzer.uuid and query(page)["context"] == context_id
        text = walk.main_text()
        assert "Pick a session" not in text and "Materialized request" in text
        assert page.locator('[data-testid="stAlertContentError"]').count() == 0, text[:2000]
        assert page.locator('[data-testid="stAlertContentWarning"]').count() == 0, text[:2000]
        walk.shot("replay")

    found = materialize(session, context_id, answer)
    edited = max(i for i, m in enumerate(found.messages) if m.role == "user" and m.text())
    before = set(session.contexts)
    with walk.step("edit the question in the request and run it on the local model") as page:
        page.get_by_text("Messages of the request").click()
        area = page.locator(f'textarea[aria-label="Message {edited}"]')
        area.wait_for(timeout=WAIT_MS)
        area.fill(EDIT)
        samples = page.get_by_role("spinbutton", name="Samples", exact=True)
        samples.fill("2")
        samples.press("Tab")  # the settings outside the form apply on change; the edit stays
        settle(page)
        assert page.locator(f'textarea[aria-label="Message {edited}"]').input_value() == EDIT
        page.get_by_role("button", name="Run", exact=True).click()
        forks = new_replay_forks(store, analyzer.uuid, before, 2)
        fork = forks[0]
        assert all(f.messages[edited].text() == EDIT for f in forks)
        page.get_by_text(f"fork {short_id(fork.id)}", exact=False).first.wait_for(timeout=WAIT_MS)
        settle(page)

    def shows_the_run(page: Page) -> None:
        text = walk.main_text()
        assert "Runs of this message" in text and f"message #{edited} edited" in text, text[-3000:]
        box = page.locator('[data-testid="stVerticalBlock"]', has_text=f"fork {short_id(fork.id)}").last
        shown = box.inner_text()
        assert "• " in shown, "the diff is said in sentences"
        assert "root[" not in shown, "no raw DeepDiff paths"
        left = box.get_by_text("Original", exact=True).first.bounding_box()
        right = box.get_by_text("This run (sample 0)", exact=True).first.bounding_box()
        assert left is not None and right is not None
        assert left["x"] < right["x"] and abs(left["y"] - right["y"]) < 5, "side by side"

    with walk.step("see the run beside the original, and the diff") as page:
        shows_the_run(page)
        walk.shot("replay-run")

    with walk.step("reload the page: the run and its diff are still there") as page:
        page.reload()
        page.get_by_text(f"fork {short_id(fork.id)}", exact=False).first.wait_for(timeout=WAIT_MS)
        settle(page)
        shows_the_run(page)

    with walk.step("the Fork tree: the run is one node named by its edit, and can be unfolded") as page:
        walk.sidebar("Fork tree", "fork_tree")
        assert query(page)["session"] == analyzer.uuid
        page.locator('[data-testid="stPlotlyChart"] .main-svg').first.wait_for(timeout=WAIT_MS)
        chart = page.locator('[data-testid="stPlotlyChart"]').first
        drawn = chart.inner_text()
        assert f"edit of message {edited} (2 samples)" in drawn, drawn
        assert "sample 1 of 2" not in drawn, "the run's forks are folded into one node"
        walk.shot("fork-tree")
        page.get_by_text("Show replay forks").click()
        page.wait_for_url("**forks=all**", timeout=WAIT_MS)
        settle(page)
        drawn = chart.inner_text()
        assert "sample 1 of 2" in drawn and "sample 2 of 2" in drawn, drawn
        page.get_by_text("Show replay forks").click()
        page.wait_for_url(lambda address: "forks=all" not in address, timeout=WAIT_MS)
        settle(page)
        assert "sample 1 of 2" not in chart.inner_text(), "hidden again"

    for link, slug in (
        ("Traceback", "traceback"),
        ("Compaction", "compaction"),
        ("Object state", "object_state"),
    ):
        with walk.step(f"the {link} page from the sidebar, on the same session") as page:
            walk.sidebar(link, slug)
            assert query(page)["session"] == analyzer.uuid
            assert "Pick a session" not in walk.main_text()
            walk.shot(slug.replace("_", "-"))
    walk.close()


def new_replay_forks(
    store: Path, session: str, before: set[str], count: int, timeout_s: float = 300
) -> list[Context]:
    """The ``count`` replay forks a click made (in sample order), once their answers are saved."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        contexts = Store(store).load_session(session).contexts
        new = [c for cid, c in contexts.items() if cid not in before and REPLAY_KEY in c.extra]
        answered = [c for c in new if c.messages and c.messages[-1].role == "assistant"]
        if len(answered) >= count:
            return sorted(answered, key=lambda c: int(c.extra[REPLAY_KEY].get("sample", 0)))
        time.sleep(0.5)
    raise AssertionError(f"no {count} replay forks with an answer appeared")


def test_find_open_jump_replay_edit_and_reload_in_a_20000_message_context(
    browser: Browser, tmp_path: Path, llm_server: LocalModelServer
) -> None:
    """The same walk on a generated long context: the hit lands on its page of 50, marked,
    the other pages take the selection along, and an early answer, opened from its page
    of the transcript, is replayed with an edit that a reload keeps. A late answer is
    replayed too, with all but its last messages dropped by one range: whole, its
    request of 15,000 messages would not fit a model of 2,048 tokens."""
    root = tmp_path / "store"
    session = long_store(root, 20_000)
    context = session.active_context
    asked = next(
        i for i in range(15_000, 16_000) if context.messages[i].role == "user" and context.messages[i].content
    )
    [first] = [p for p in context.messages[asked].content if isinstance(p, TextPart)]
    needle = first.text.split(":", 1)[0] + ":"  # "question 15003:", one message's own words
    answer = next(i for i in range(asked, len(context.messages)) if context.messages[i].role == "assistant")
    early = next(
        i for i, m in enumerate(context.messages) if m.role == "assistant" and not m.tool_uses() and i > 2
    )
    walk = Walk(browser, "long")
    with streamlit_app(root, tmp_path / "streamlit.log", OPENAI_BASE_URL=llm_server.base_url) as url:
        with walk.step("open the Sessions page of the long store") as page:
            page.goto(f"{url}/?store={root}")
            page.get_by_text("1 session").first.wait_for(timeout=WAIT_MS)
            settle(page)

        with walk.step("find the message by its words") as page:
            walk.search(needle)
            hit = page.locator(
                '[data-testid="stMain"] [data-testid="stPageLink"] a', has_text=f"message {asked}"
            )
            assert hit.count() >= 1, f"no link to message {asked}"

        with walk.step("open the hit: its page of the long context, the message marked") as page:
            hit.first.click()
            page.wait_for_url("**/context?**", timeout=WAIT_MS)
            walk.linked_message_marked_in_view(asked)
            settle(page)
            boxes = page.locator("[class*='st-key-message-']").count()
            assert 0 < boxes <= 60, f"{boxes} message boxes drawn: the long context is not paged"
            walk.shot("context")

        with walk.step("go to Token budget and Replay: the selection follows") as page:
            walk.sidebar("Token budget", "token_budget")
            assert query(page)["session"] == session.uuid and "Pick a session" not in walk.main_text()
            walk.sidebar("Replay & diff", "replay")
            wait_for_message(page, answer)  # Replay opens on the model's answer to the message
            assert query(page)["session"] == session.uuid
            assert "Materialized request" in walk.main_text()

        late = len(materialize(session, context.id, answer).messages)
        keep_from = late - EDIT_TAIL  # the form's default window: the last messages of the request
        before = set(Store(root).load_session(session.uuid).contexts)
        with walk.step("replay the late answer with its old history dropped") as page:
            page.get_by_text("Messages of the request").click()
            boxes = page.locator('textarea[aria-label^="Message "]')
            boxes.first.wait_for(timeout=WAIT_MS)
            assert 0 < boxes.count() <= EDIT_TAIL, f"{boxes.count()} message boxes: the form is not windowed"
            page.get_by_role("textbox", name="Drop messages (numbers and ranges)").fill(f"1-{keep_from - 1}")
            page.locator('input[aria-label="Max tokens"]').fill("16")
            page.get_by_role("button", name="Run", exact=True).click()
            [fork] = new_replay_forks(root, session.uuid, before, 1)
            assert fork.extra[REPLAY_KEY]["overrides"]["drops"] == list(range(1, keep_from))
            assert len(fork.messages) <= EDIT_TAIL + 2  # what was sent, and the answer
            page.get_by_text(f"fork {short_id(fork.id)}", exact=False).first.wait_for(timeout=WAIT_MS)
            settle(page)
            assert f"messages #1-#{keep_from - 1} dropped" in walk.main_text()
            walk.shot("replay-late")

        with walk.step("back to the transcript's first page, and Replay on an early answer") as page:
            walk.sidebar("Context", "context")
            page.get_by_role("button", name="First").first.click()
            page.wait_for_url("**page=1**", timeout=WAIT_MS)
            settle(page)
            box = page.locator(f".st-key-message-{early}")
            box.get_by_role("link", name="Replay it, or re-run the agent from here").click()
            page.wait_for_url(f"**/replay?**message={early}**", timeout=WAIT_MS)
            settle(page)
            assert "Materialized request" in walk.main_text()

        found = materialize(session, context.id, early)
        edited = max(i for i, m in enumerate(found.messages) if m.role == "user" and m.text())
        before = set(Store(root).load_session(session.uuid).contexts)
        with walk.step("edit the question, run, and see the run beside the original") as page:
            page.get_by_text("Messages of the request").click()
            area = page.locator(f'textarea[aria-label="Message {edited}"]')
            area.wait_for(timeout=WAIT_MS)
            area.fill(EDIT)
            page.get_by_role("button", name="Run", exact=True).click()
            [fork] = new_replay_forks(root, session.uuid, before, 1)
            assert fork.messages[edited].text() == EDIT and len(fork.messages) == early + 1
            page.get_by_text(f"fork {short_id(fork.id)}", exact=False).first.wait_for(timeout=WAIT_MS)
            settle(page)
            assert f"message #{edited} edited" in walk.main_text()
            walk.shot("replay-run")

        with walk.step("reload: the run is rebuilt from its fork") as page:
            page.reload()
            page.get_by_text(f"fork {short_id(fork.id)}", exact=False).first.wait_for(timeout=WAIT_MS)
            settle(page)
            assert f"message #{edited} edited" in walk.main_text()
    walk.close()
    shutil.rmtree(root)


def test_a_copied_link_without_store_then_a_live_rerun_of_the_demo_and_the_sidebar(
    demo_served: tuple[str, Path], browser: Browser
) -> None:
    """Issue 23's walk: a link copied from another tab, without ``store=`` (the server's
    default store), keeps its session through the sidebar; the demo's Log Analyzer
    re-runs with live tools from a copy of the store (its log path is the store's, not the
    folder it was built in) and its answer comes from the real tool; Traceback keeps the
    re-run out of the agent's history until asked."""
    url, store = demo_served
    [analyzer] = [s for s in Store(store).sessions() if s.role == "LogAnalyzer"]
    session = Store(store).load_session(analyzer.uuid)
    index = next(
        i
        for i, m in enumerate(session.active_context.messages)
        if m.role == "assistant" and any(u.name == "count_lines" for u in m.tool_uses())
    )
    own = [
        r
        for r in read_invocations(session.directory or Path())
        if r.callee.session == analyzer.uuid and not r.rerun
    ]
    walk = Walk(browser, "link")

    with walk.step("open a copied link to the Replay page, without store=") as page:
        page.goto(f"{url}/replay?session={analyzer.uuid[:13]}&message={index}")
        page.get_by_text("Materialized request").first.wait_for(timeout=WAIT_MS)
        settle(page)
        assert query(page)["session"] == analyzer.uuid and query(page)["store"] == str(store)

    with walk.step("re-run the agent from the count_lines call with live tools") as page:
        page.get_by_text("live", exact=True).first.click()  # "Tools answer": live
        settle(page)
        page.get_by_role("button", name="Re-run the agent").click()
        page.get_by_text(re.compile(r"^Re-run 1: ")).first.wait_for(timeout=WAIT_MS * 3)
        settle(page)
        text = walk.main_text()
        assert "count_lines live" in text, text[-3000:]
        assert "tool call failed" not in text and "FileNotFoundError" not in text, text[-3000:]
        assert re.search(r"\banswer: ", text), text[-3000:]
        walk.shot("live-rerun")

    with walk.step("Traceback from the sidebar: the same session, the agent's invocations only") as page:
        walk.sidebar("Traceback", "traceback")
        assert query(page)["session"] == analyzer.uuid
        records = read_invocations(session.directory or Path())
        runs = [r for r in records if r.rerun and r.callee.session == analyzer.uuid]
        assert runs, "the re-run recorded no invocation"
        page.get_by_text(f"Show the workbench's re-runs ({len(runs)})").wait_for(timeout=WAIT_MS)
        assert query(page)["invocation"] in {r.id for r in own}, "opened on one of the agent's own"
        walk.shot("traceback")

    for link, slug in (("Object state", "object_state"), ("Context", "context"), ("Fork tree", "fork_tree")):
        with walk.step(f"{link} from the sidebar keeps the session") as page:
            walk.sidebar(link, slug)
            assert query(page)["session"] == analyzer.uuid
            assert "Pick a session" not in walk.main_text()
    walk.close()
