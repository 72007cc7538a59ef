"""The Context page on long contexts: a page of messages at a time, an outline bounded
whatever the length, ``?message=`` opening the page that holds the message, and nothing
over the whole context recomputed when the page is turned. Function tests on
workbench.context_views, AppTest runs of the page, and one run in headless Chromium on a
20,000-message context."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from soap_core import (
    Context,
    Message,
    Session,
    Store,
    TextPart,
    ThinkingPart,
    ToolPart,
    ToolResultPart,
    ToolUsePart,
    message_rows,
)
from soap_core.runtime._compaction import SUMMARY_PREFIX
from tests.apptest import APP
from workbench import context_views, loading
from workbench.context_views import (
    OUTLINE_SPAN,
    PAGE_SIZE,
    ContextIndex,
    build_index,
    choose_listing,
    chosen_page,
    landmarks,
    outline_near,
    page_count,
    page_rows,
    page_span,
    parse_index,
    scroll_target,
)

EVIL = "<script>alert(1)</script><img src=x onerror=alert(2)>"


# -- a long context, built with the model classes --------------------------------------


def long_context(messages: int, seed: int = 7, evil_at: int | None = None) -> Context:
    """A context of exactly ``messages`` messages: system prompt, tool definitions, then
    turns of a user question, sometimes a tool call and its result, and an answer with
    some thinking; a compaction summary stands at about two thirds of the way."""
    rng = random.Random(seed)
    tools = [
        ToolPart("lookup", "Look a thing up.", {"type": "object", "properties": {"q": {"type": "string"}}})
    ]
    context = Context.create("You are a patient agent that has been running for a long time.", tools)
    summary_at = messages * 2 // 3
    while len(context.messages) < messages:
        i = len(context.messages)
        if summary_at <= i:
            context.append(Message.create("user", [TextPart(SUMMARY_PREFIX + "the user asked many things.")]))
            summary_at = messages + 1
            continue
        text = f"question {i}: " + "word " * rng.randint(3, 30)
        if evil_at is not None and i >= evil_at:
            text, evil_at = EVIL, None
        context.append(Message.create("user", [TextPart(text)]))
        if rng.random() < 0.5 and len(context.messages) + 2 <= messages:
            call = f"call_{i}"
            context.append(Message.create("assistant", [ToolUsePart(call, "lookup", f'{{"q": "{i}"}}')]))
            result = ToolResultPart(call, "found " * rng.randint(1, 20), name="lookup")
            context.append(Message.create("tool_result", [result]))
        if len(context.messages) < messages:
            parts = [ThinkingPart(f"thinking about {i}"), TextPart("answer " * rng.randint(3, 40))]
            context.append(Message.create("assistant", parts))
    return context


def long_store(root: Path, messages: int, *, forks: bool = True, evil_at: int | None = None) -> Session:
    """A store with one session whose active context is :func:`long_context`; with
    ``forks`` also a replay fork branching after message 100 and a fork of the last
    messages made at the end (as a rolling-window compaction makes it)."""
    context = long_context(messages, evil_at=evil_at)
    session = Session.create("Long", context)
    if forks:
        replay = context.fork(range(101))
        replay.extra["soapwb_replay"] = {"note": "a replay of message 100"}
        context.children.remove(replay.id)
        session.add_context(replay)
        session.add_context(context.fork([0, 1, *range(messages - 30, messages)]))
    Store(root).save_session(session)
    written_a_minute_ago(root)
    return session


def written_a_minute_ago(root: Path) -> None:
    """Date every file and folder of the store a minute back. The catalog does not trust
    a file modified in the last two seconds (its signature may still change unseen), so
    a store read right after it was written would get a new cache key on every run."""
    then = time.time() - 60
    for path in [root, *root.rglob("*")]:
        os.utime(path, (then, then))


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Session]:
    """A 5,000-message session (100 pages), built once for the module."""
    root = tmp_path_factory.mktemp("long") / "store"
    return root, long_store(root, 5_000)


def index_of(session: Session) -> ContextIndex:
    return build_index(session, session.active_context)


# -- the index: one pass over the context ---------------------------------------------


class TestIndex:
    def test_turns_start_at_user_text_and_tool_calls_are_assistant_calls(
        self, big: tuple[Path, Session]
    ) -> None:
        _, session = big
        context = session.active_context
        index = index_of(session)
        assert len(index.kinds) == index.messages == len(context.messages) == 5_000
        for i, message in enumerate(context.messages):
            kind = index.kinds[i]
            assert (kind == "t") == (message.role == "user" and not message.text().startswith(SUMMARY_PREFIX))
            assert (kind == "c") == bool(message.role == "assistant" and message.tool_uses())
        [compaction] = index.compactions
        assert 3_333 <= compaction < 3_340 and context.messages[compaction].text().startswith(SUMMARY_PREFIX)
        assert list(index.turns) == [i for i, kind in enumerate(index.kinds) if kind == "t"]
        assert index.tool_calls == index.kinds.count("c") > 0

    def test_the_chronological_order_is_message_rows_order(self, tmp_path: Path) -> None:
        context = long_context(300)
        context.append(Message.tool_definitions_message([ToolPart("late", "", {})]), "tools")
        index = build_index(Session.create("Chrono", context), context)
        expected = [row.index for row in message_rows(context, chronological=True)]
        assert list(index.order(True)) == expected != list(range(301))
        assert all(index.order(True)[index.position(i, True)] == i for i in range(301))

    def test_a_fork_branches_after_the_last_message_it_copied(self, big: tuple[Path, Session]) -> None:
        _, session = big
        forks = {fork.kind: fork for fork in index_of(session).forks}
        assert forks["replay"].index == 100 and forks["replay"].messages == 101
        assert forks["fork"].index == 4_999 and forks["fork"].messages == 32

    def test_a_child_that_shares_no_message_has_no_branch_point(self) -> None:
        parent = long_context(60)
        session = Session.create("Rewritten", parent)
        child = parent.fork(range(40))
        session.contexts[child.id] = child
        for message in child.messages:
            message.id = f"rewritten-{message.id}"
        kept = parent.fork(range(10, 30))  # a slice of the middle: it branches at its last
        session.contexts[kept.id] = kept
        points = {point.child_id: point.index for point in build_index(session, parent).forks}
        assert points == {child.id: None, kept.id: 29}

    def test_a_discarded_child_is_left_to_the_fork_tree(self, tmp_path: Path) -> None:
        context = long_context(60)
        context.children.append("no-such-context")
        assert build_index(Session.create("Gone", context), context).forks == ()


# -- pages ----------------------------------------------------------------------------


class TestPages:
    def test_pages_cover_every_message_once(self) -> None:
        spans = [page_span(page, 5_001) for page in range(1, page_count(5_001) + 1)]
        assert [i for span in spans for i in span] == list(range(5_001))
        assert page_count(5_001) == 101 and page_count(0) == 1 and page_count(50) == 1

    def test_the_page_parameter_wins_else_the_linked_message_chooses_the_page(self) -> None:
        assert chosen_page(5_000, None, None) == 1
        assert chosen_page(5_000, None, 1_234) == 1_234 // PAGE_SIZE + 1 == 25
        assert chosen_page(5_000, 7, 1_234) == 7
        assert chosen_page(5_000, 101, 1_234) == 25  # past the last page: ignored
        assert chosen_page(5_000, 0, None) == 1

    def test_only_plain_non_negative_numbers_are_indices(self) -> None:
        assert [parse_index(raw) for raw in ("12", " 3", "-1", "1e3", "x", "", None)] == [12, 3] + [None] * 5

    def test_a_listing_holds_the_page_of_the_linked_message_in_the_order_shown(
        self, big: tuple[Path, Session]
    ) -> None:
        _, session = big
        index = index_of(session)
        shown = choose_listing(index, False, None, 1_234)
        assert (shown.page, shown.indices) == (25, list(range(1_200, 1_250)))
        chrono = choose_listing(index, True, None, 1_234)
        assert 1_234 in chrono.indices and chrono.page == index.position(1_234, True) // PAGE_SIZE + 1
        assert choose_listing(index, False, 3, None).indices[0] == 100 and shown.paged

    def test_the_page_scrolls_once_per_new_view_and_not_on_a_first_plain_visit(
        self, big: tuple[Path, Session]
    ) -> None:
        _, session = big
        index = index_of(session)
        linked = choose_listing(index, False, None, 1_234)
        plain = choose_listing(index, False, 2, None)
        assert scroll_target(None, ("c", 25, 1_234, False), linked) == 1_234
        assert scroll_target(("c", 25, 1_234, False), ("c", 25, 1_234, False), linked) is None
        assert scroll_target(None, ("c", 2, None, False), plain) is None
        assert scroll_target(("c", 1, None, False), ("c", 2, None, False), plain) == 50
        assert scroll_target(("other", 1, None, False), ("c", 2, None, False), plain) is None

    def test_page_rows_are_the_rows_message_rows_makes_for_those_messages(
        self, big: tuple[Path, Session]
    ) -> None:
        _, session = big
        context = session.active_context
        every = message_rows(context)
        assert page_rows(context, [0, 1, 2, 4_999]) == [every[0], every[1], every[2], every[4_999]]


# -- the outline ----------------------------------------------------------------------


class TestOutline:
    def test_the_outline_near_a_page_is_bounded_in_order_and_covers_the_page(
        self, big: tuple[Path, Session]
    ) -> None:
        _, session = big
        index, context = index_of(session), session.active_context
        for page in (1, 40, 100):
            near = outline_near(index, context, page, chronological=False)
            assert 0 < len(near) <= OUTLINE_SPAN
            assert [e.index for e in near] == sorted(e.index for e in near)
            here = page_span(page, index.messages)
            on_page = [i for i in here if index.kinds[i] in "tcs"]
            assert set(on_page) <= {e.index for e in near}
            assert all(here.start - PAGE_SIZE <= e.index < here.stop + PAGE_SIZE for e in near)

    def test_outline_entries_name_the_turn_and_the_tool(self, big: tuple[Path, Session]) -> None:
        _, session = big
        index, context = index_of(session), session.active_context
        near = outline_near(index, context, 1, chronological=False)
        first_turn = next(e for e in near if e.kind == "turn")
        assert first_turn.index == index.turns[0] and " turn 1: question " in first_turn.label
        call = next(e for e in near if e.kind == "tool call")
        assert call.label.endswith("tool call lookup")
        fork = next(e for e in outline_near(index, context, 3, chronological=False) if e.kind == "fork")
        assert fork.index == 100 and "replay" in fork.label

    def test_landmarks_are_the_compaction_and_the_forks(self, big: tuple[Path, Session]) -> None:
        _, session = big
        index = index_of(session)
        marks = landmarks(index, session.active_context, 1, chronological=False)
        [compaction] = index.compactions
        assert [(m.index, m.kind) for m in marks] == [
            (100, "fork"),
            (compaction, "compaction"),
            (4_999, "fork"),
        ]

    def test_only_the_landmarks_nearest_the_page_are_listed(self) -> None:
        context = long_context(400)
        session = Session.create("Forky", context)
        for end in range(5, 400, 5):
            session.add_context(context.fork(range(end)))
        index = build_index(session, context)
        marks = landmarks(index, context, page_count(400), chronological=False)
        assert len(index.forks) == 79 and len(marks) == context_views.LANDMARK_SPAN
        assert min(m.index for m in marks) > 200

    def test_the_outline_of_a_long_context_is_read_from_three_pages(self) -> None:
        context = long_context(20_000)
        index = build_index(Session.create("Big", context), context)
        started = time.perf_counter()
        for page in range(1, 400, 7):
            outline_near(index, context, page, chronological=True)
        assert (time.perf_counter() - started) / 57 < 0.02


# -- the page, headless ---------------------------------------------------------------


def texts(at: AppTest) -> list[str]:
    return [element.value for element in at.text]


def shown_indices(at: AppTest) -> list[int]:
    """The display indices of the message boxes shown, in the order shown (a result
    nested under its call comes right after the call)."""
    return [
        int(node.key.removeprefix("message-"))
        for node in all_nodes(at.main)
        if isinstance(getattr(node, "key", None), str) and node.key.startswith("message-")
    ]


def open_context(root: Path, session: Session, **params: str) -> AppTest:
    """The Context page with ``params`` in its URL (``tests.apptest.open_app_page`` cannot
    take ``page=``, its own argument)."""
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params.update(store=str(root), session=session.uuid, **params)
    at.run()
    at.switch_page("workbench/pages/context.py").run()
    assert not at.exception
    return at


def all_nodes(node: Any) -> Iterator[Any]:
    yield node
    for child in getattr(node, "children", {}).values():
        yield from all_nodes(child)


class TestPagedContextPage:
    def test_a_long_context_shows_its_first_page_and_the_whole_context_figures(
        self, big: tuple[Path, Session]
    ) -> None:
        root, session = big
        at = open_context(root, session)
        assert shown_indices(at) == list(range(PAGE_SIZE))
        tokens = session.active_context.total_token_count()
        assert f"5,000 messages, {tokens:,} tokens (cl100k_base)" in texts(at)
        assert "messages 0–49 of 5,000 · page 1 of 100" in [c.value for c in at.caption]

    def test_a_linked_message_opens_its_page_marked_and_unfolded(self, big: tuple[Path, Session]) -> None:
        root, session = big
        linked = next(
            i for i, m in enumerate(session.active_context.messages) if m.has_thinking() and i > 1_234
        )
        at = open_context(root, session, message=str(linked))
        page = linked // PAGE_SIZE
        assert shown_indices(at) == list(range(page * PAGE_SIZE, (page + 1) * PAGE_SIZE))
        assert f"▶ message {linked}, as linked" in texts(at)
        [scroll, mark] = sorted(
            (html.proto.body for html in at.get("html")), key=lambda body: "<script>" not in body
        )
        assert f".st-key-message-{linked} " in mark and "<script>" not in mark
        assert f'"st-key-message-{linked}"' in scroll and "scrollIntoView" in scroll
        thinking = [
            p.text for p in session.active_context.messages[linked].content if isinstance(p, ThinkingPart)
        ]
        opened = [e for e in at.expander if e.label == "thinking" and e.proto.expanded]
        assert [e.text[0].value for e in opened] == thinking
        assert at.number_input(key="context_page").value == page + 1
        assert at.number_input(key="context_goto_message").value == linked
        assert not at.markdown  # nothing of the page's own text leaks out through Streamlit's magic

    def test_every_run_of_a_linked_view_carries_its_scroll_the_browser_runs_once(
        self, big: tuple[Path, Session]
    ) -> None:
        root, session = big
        at = open_context(root, session, message="1300")

        def scrolls() -> list[str]:
            return [h.proto.body for h in at.get("html") if "scrollIntoView" in h.proto.body]

        [first] = scrolls()
        at.run()  # a rerun that may come before the browser drew the first (the URL taking ids)
        assert scrolls() == [first]  # the same script, named by the same view: run once a tab
        assert first.count('window.soapwbScrolledFor === "') == 1
        at.button(key="next-bottom").click().run()
        [turned] = scrolls()
        assert '"st-key-message-1350"' in turned  # a page turned: its first message, a new name
        assert (
            turned.split('soapwbScrolledFor === "')[1][:16] != first.split('soapwbScrolledFor === "')[1][:16]
        )

    def test_next_moves_one_page_and_writes_it_in_the_url(self, big: tuple[Path, Session]) -> None:
        root, session = big
        at = open_context(root, session, message="120")
        at.button(key="next-bottom").click().run()
        assert not at.exception
        assert shown_indices(at)[0] == 150
        assert at.query_params["page"] == "4" and "message" not in at.query_params
        at.button(key="last-top").click().run()
        assert shown_indices(at)[-1] == 4_999
        assert at.button(key="next-top").proto.disabled

    def test_a_typed_page_number_or_message_number_opens_it(self, big: tuple[Path, Session]) -> None:
        root, session = big
        at = open_context(root, session)
        at.number_input(key="context_page").set_value(42).run()
        assert shown_indices(at)[0] == 41 * PAGE_SIZE
        at.number_input(key="context_goto_message").set_value(4_321).run()
        assert 4_321 in shown_indices(at) and at.query_params["message"] == "4321"
        assert "▶ message 4321, as linked" in texts(at)

    def test_a_turn_number_opens_the_message_starting_that_turn(self, big: tuple[Path, Session]) -> None:
        root, session = big
        index = index_of(session)
        at = open_context(root, session)
        at.number_input(key="context_goto_turn").set_value(1_000).run()
        assert at.query_params["message"] == str(index.turns[999])
        assert f"▶ message {index.turns[999]}, as linked" in texts(at)

    def test_picking_an_outline_entry_opens_its_message(self, big: tuple[Path, Session]) -> None:
        root, session = big
        at = open_context(root, session)
        marks = at.radio(key="outline_landmark")
        compaction = next(k for k in marks.options if "compaction" in k)
        marks.set_value(marks.options.index(compaction)).run()
        [at_index] = index_of(session).compactions
        assert at.query_params["message"] == str(at_index) and at_index in shown_indices(at)
        assert at.radio(key="outline_landmark").value is not None

    def test_the_chronological_order_is_paged_too(self, big: tuple[Path, Session]) -> None:
        root, session = big
        at = open_context(root, session, page="2")
        at.toggle[0].set_value(True).run()
        expected = [row.index for row in message_rows(session.active_context, chronological=True)]
        assert shown_indices(at) == expected[PAGE_SIZE : 2 * PAGE_SIZE]

    def test_a_fork_is_marked_after_the_message_it_branched_from(self, big: tuple[Path, Session]) -> None:
        root, session = big
        at = open_context(root, session, message="100", details="1")
        shown = texts(at)
        heading = next(k for k, value in enumerate(shown) if value.startswith("#100 "))
        after = shown[heading : heading + 8]
        assert any(value.startswith("──── forked here: replay ") for value in after)

    def test_a_message_past_the_end_is_reported_and_the_first_page_shown(
        self, big: tuple[Path, Session]
    ) -> None:
        root, session = big
        at = open_context(root, session, message="99999")
        assert "99999" in at.warning[0].value.replace("\\", "")
        assert shown_indices(at)[0] == 0

    def test_another_context_starts_at_its_first_page(self, big: tuple[Path, Session]) -> None:
        root, session = big
        at = open_context(root, session, message="4000")
        fork = next(
            cid
            for cid in session.contexts
            if cid != session.active_context_id and len(session.contexts[cid].messages) == 101
        )
        at.selectbox[0].set_value(fork).run()
        assert "message" not in at.query_params and "page" not in at.query_params
        assert shown_indices(at) == list(range(PAGE_SIZE))

    def test_message_text_in_the_outline_is_escaped_and_stays_text_elsewhere(self, tmp_path: Path) -> None:
        session = long_store(tmp_path, 200, forks=False, evil_at=60)
        at = open_context(tmp_path, session, page="2")
        assert EVIL in texts(at)
        [near] = [r for r in at.radio if r.key == "outline_near"]
        assert any("\\<script\\>" in option for option in near.options)
        carriers = [
            node
            for top in (at.main, at.sidebar)
            for node in all_nodes(top)
            if "<script>" in str(getattr(node, "proto", ""))
        ]
        assert {node.type for node in carriers} == {"text"}


class TestCaching:
    def test_turning_pages_neither_reloads_the_session_nor_rebuilds_the_index(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        session = long_store(tmp_path, 1_000)
        calls = {"load": 0, "index": 0}
        real_load, real_index = Store.load_session, loading.build_index

        def counted_load(self: Store, ref: str, **kwargs: Any) -> Session:
            calls["load"] += 1
            return real_load(self, ref, **kwargs)

        def counted_index(*args: Any) -> ContextIndex:
            calls["index"] += 1
            return real_index(*args)

        monkeypatch.setattr(Store, "load_session", counted_load)
        monkeypatch.setattr(loading, "build_index", counted_index)
        at = open_context(tmp_path, session)
        assert calls == {"load": 1, "index": 1}
        for _ in range(3):
            at.button(key="next-top").click().run()
        at.number_input(key="context_goto_message").set_value(777).run()
        assert not at.exception and 777 in shown_indices(at)
        assert calls == {"load": 1, "index": 1}

    def test_the_context_page_shares_one_session_while_other_pages_get_copies(self, tmp_path: Path) -> None:
        session = long_store(tmp_path, 120, forks=False)
        root = str(tmp_path)
        assert loading.read_only_session(root, session.uuid) is loading.read_only_session(root, session.uuid)
        first, second = loading.load_session(root, session.uuid), loading.load_session(root, session.uuid)
        assert first is not second and first is not loading.read_only_session(root, session.uuid)

    def test_a_write_to_the_store_is_seen_by_the_next_run(self, tmp_path: Path) -> None:
        session = long_store(tmp_path, 120, forks=False)
        at = open_context(tmp_path, session, page="3")
        assert shown_indices(at) == list(range(100, 120))
        loaded = Store(tmp_path).load_session(session.uuid)
        loaded.active_context.append(Message.create("user", [TextPart("one more")]))
        Store(tmp_path).save_session(loaded)
        written_a_minute_ago(tmp_path)  # and so older than the previous file, in a new inode
        at.run()
        assert shown_indices(at) == list(range(100, 121))


# -- in a real browser ----------------------------------------------------------------


def test_a_linked_message_of_a_20000_message_context_opens_marked_in_chromium(tmp_path: Path) -> None:
    from tests.test_browser import CHROMIUM, FLAGS, IN_VIEW, MARKED, SHOTS, settle, streamlit_app

    if not Path(CHROMIUM).exists():
        pytest.skip(f"no chromium at {CHROMIUM}: the browser test cannot run")
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    root = tmp_path / "store"
    session = long_store(root, 20_000)
    with streamlit_app(root, tmp_path / "streamlit.log") as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/context?store={root}&session={session.uuid}&message=15000")
        linked = page.locator(".st-key-message-15000")
        linked.wait_for(state="visible", timeout=60_000)
        assert "▶ message 15000, as linked" in linked.inner_text()
        # the highlight's CSS comes with the page (its element loads lazily)
        # under CI's load the page's elements come in over seconds: each check waits for its state
        page.wait_for_function(MARKED, arg="message-15000", timeout=30_000)
        page.wait_for_function(IN_VIEW, arg="message-15000", timeout=30_000)
        settle(page)
        shown = page.locator("[class*='st-key-message-']").count()
        assert shown == PAGE_SIZE, shown
        assert page.locator('[data-testid="stException"]').count() == 0
        sidebar = page.locator('[data-testid="stSidebar"]')
        with contextlib.suppress(PlaywrightTimeout):  # the assertion below says what it holds
            sidebar.get_by_text("#14,999").first.wait_for(state="visible", timeout=30_000)
        text = sidebar.inner_text()
        assert "Outline" in text and "#14,999" in text, text
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "context-long-linked.png"))
        browser.close()
    shutil.rmtree(root)


SHIFT_ABOVE = (
    "(key) => { const main = document.querySelector('[data-testid=\"stMain\"]'); main.style.overflowAnchor = 'none';"
    " const tall = document.createElement('div'); tall.style.height = '3000px';"
    " main.querySelector('[data-testid=\"stVerticalBlock\"]').prepend(tall);"
    " const r = document.querySelector('.st-key-' + key).getBoundingClientRect();"
    " return r.top >= 0 && r.top < window.innerHeight; }"
)
"""What a slow page does once the linked message is in view: something drawn late above it
(here a 3,000-pixel block) pushes it down and out of the window. Chromium's scroll
anchoring would hold it in place; Safari has none, and it is switched off here. Returns
whether the message is still in view right after the push, measured in the same script:
a check made in a later call raced the page's own scrolling, which on a loaded machine
could bring it back in between (CI saw it in view again)."""


def test_a_linked_message_is_brought_back_when_what_loads_above_it_moves_it(tmp_path: Path) -> None:
    from tests.test_browser import CHROMIUM, FLAGS, IN_VIEW, streamlit_app

    if not Path(CHROMIUM).exists():
        pytest.skip(f"no chromium at {CHROMIUM}: the browser test cannot run")
    from playwright.sync_api import sync_playwright

    root = tmp_path / "store"
    session = long_store(root, 2_000)
    with streamlit_app(root, tmp_path / "streamlit.log") as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/context?store={root}&session={session.uuid}&message=1500")
        page.locator(".st-key-message-1500").wait_for(state="visible", timeout=60_000)
        page.wait_for_function(IN_VIEW, arg="message-1500", timeout=30_000)
        page.wait_for_timeout(600)  # a scroll that stops once it has scrolled a few times has stopped by now
        assert not page.evaluate(SHIFT_ABOVE, "message-1500")  # pushed out of the window
        page.wait_for_function(IN_VIEW, arg="message-1500", timeout=5_000)
        browser.close()
