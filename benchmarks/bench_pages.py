"""Pages in a real browser: the Context page of a long context, the Sessions page of a big store.

The goals are absolute (issue 12 point 4, issue 14 point 2). In headless Chromium (Debian's
``chromium`` with the flags of tests/test_browser.py) the Context page of a 100,000-message
context shows the first message of its page in under 2 s, and the Sessions page of a
store of 10,000 sessions its table in under 2 s; the Python work of showing the page for
one message (a rerun: reading the caches, building the page's elements) stays under
200 ms.

A browser time runs from ``page.goto`` to the element being visible, in a browser whose
HTTP cache already holds Streamlit's scripts (as a user's does), against a server that
has already shown that page once (its caches warm), except the figures named "first
open", which include reading the store (its catalog already built: that first indexing
is timed on its own); each is the best of five tries (noise only adds time), a first
open of the Context page the best of three servers started for it. Beside them stands the time of a page that shows
one line (the baseline): what Streamlit itself costs on this machine, which is shared.
The stores are built in-process with the model classes (the long context by
``tests.test_page_context_long.long_store``: turns, tool calls, a compaction summary and
two forks), so the figures measure the pages, not a generator.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from benchmarks import inspect_view, phoenix_view
from benchmarks._harness import Bench
from benchmarks._stores import shared_store, store_shape
from soap_core import Session, Store
from soap_core._catalog import is_catalog_file
from workbench.context_views import PAGE_SIZE

if TYPE_CHECKING:  # playwright comes with the dev extras; run() imports it
    from playwright.sync_api import Browser, BrowserContext, Page

GOAL_PAGE_S = 2.0
GOAL_VIEW_MS = 200.0
SHOTS = Path(__file__).resolve().parents[1] / "test-output" / "bench"

EMPTY_CONTEXT_PAGE = "text=Pick a session to see it here."
"""What the Context page shows with no session chosen: the baseline of the page timings
(it said "No session selected" before 94d661f; waiting for that text timed out at 60 s)."""


def time_until_visible(context: BrowserContext, url: str, selector: str, timeout_s: float) -> float:
    """Seconds from navigating a new tab to ``url`` until ``selector`` is visible
    (inf if it never is within ``timeout_s``)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page = context.new_page()
    try:
        started = time.perf_counter()
        page.goto(url, timeout=timeout_s * 1000)
        page.locator(selector).first.wait_for(state="visible", timeout=timeout_s * 1000)
        return time.perf_counter() - started
    except PlaywrightTimeout:
        return float("inf")
    finally:
        page.close()


def page_figure(bench: Bench, what: str, seconds: float, baseline: float, note: str = "") -> None:
    met = seconds < GOAL_PAGE_S
    bench.figure(
        what,
        seconds,
        "s",
        f"< {GOAL_PAGE_S:g} s",
        met,
        baseline=f"a one-line page: {baseline:.2f} s",
        note=note,
    )


def context_page(
    bench: Bench, browser: Browser, url: str, root: Path, session: Session, messages: int
) -> None:
    """The Context page in the browser: pages opened by ``?message=`` once the server
    has shown the session (the first open, untimed here: :func:`first_opens`)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    base = f"{url}/context?store={root}"
    baseline = min([time_until_visible(context, base, EMPTY_CONTEXT_PAGE, 60) for _ in range(5)])
    time_until_visible(context, f"{base}&session={session.uuid}", ".st-key-message-0", 600)
    warm = []
    for linked in (messages // 2, messages * 3 // 4 + 7, messages - 1, messages // 3, 7):
        first_of_page = linked - linked % PAGE_SIZE
        warm.append(
            time_until_visible(
                context,
                f"{base}&session={session.uuid}&message={linked}",
                f".st-key-message-{first_of_page}",
                120,
            )
        )
    page_figure(
        bench, f"Context page, {messages:,} messages: a page opened by ?message=", min(warm), baseline
    )
    bench.ratio(
        "that page against a one-line page of the app",
        min(warm),
        baseline,
        1.5,
        baseline_is="a one-line page, same server and browser",
        note="what the page adds to what Streamlit itself costs here",
    )
    tab = context.new_page()
    tab.goto(f"{base}&session={session.uuid}&message={messages // 2}")
    tab.locator(f".st-key-message-{messages // 2}").wait_for(state="visible", timeout=120_000)
    settled(tab)
    elements = tab.locator('[data-testid="stElementContainer"]').count()
    shown = tab.locator("[class*='st-key-message-']").count()
    bench.figure(
        "elements on that page",
        elements,
        "elements",
        note=f"{shown} message boxes; the unpaged page drew 387,000 elements for 100,000 messages",
    )
    SHOTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(SHOTS / "context-long.png"))
    context.close()


FIRST_OPENS = 3


def first_opens(bench: Bench, browser: Browser, root: Path, session: Session, messages: int) -> float:
    """The Context page's first open of the session: only once per server (its caches
    keep the session after), so each of the tries starts a server of its own. Best of
    them, beside the best one-line page and the best reopening of the same link, both on
    the same servers: the reopening draws the same page with the session already read, so
    the first open against it is what reading the session and indexing its messages add."""
    from tests.test_browser import streamlit_app

    firsts, baselines, agains = [], [], []
    for attempt in range(FIRST_OPENS):
        with streamlit_app(root, bench.workdir / f"pages-first-{attempt}.log") as url:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            base = f"{url}/context?store={root}"
            baselines.append(
                min([time_until_visible(context, base, EMPTY_CONTEXT_PAGE, 60) for _ in range(3)])
            )
            link = f"{base}&session={session.uuid}"
            firsts.append(time_until_visible(context, link, ".st-key-message-0", 600))
            agains.append(min([time_until_visible(context, link, ".st-key-message-0", 60) for _ in range(2)]))
            context.close()
    first, baseline, again = min(firsts), min(baselines), min(agains)
    page_figure(
        bench,
        f"Context page, {messages:,} messages: first open (reads the store)",
        first,
        baseline,
        note=f"best of {FIRST_OPENS} servers ({', '.join(f'{t:.2f}' for t in firsts)} s); the catalog's "
        "spans and facts: the page parses only its own messages (soap_core/_spans.py)",
    )
    bench.ratio(
        "that first open against the same link opened again",
        first,
        again,
        1.5,
        baseline_is=f"the same link again, same servers and browser: {again:.2f} s",
        note="what reading the session and indexing its messages add to drawing the page; "
        f"against a one-line page ({baseline:.2f} s) the first open is {first / baseline:.2f}x, "
        "which also holds what drawing 50 messages costs (the ?message= ratio below)",
    )
    return first


def settled(tab: Page) -> None:
    from tests.test_browser import settle

    settle(tab)


def view_in_python(bench: Bench, root: Path, session: Session, messages: int) -> float:
    """The rerun that shows the page of one message, in this process (AppTest), after a
    first run has filled the caches; and what a rerun paid for the session before."""
    from streamlit.testing.v1 import AppTest

    from tests.apptest import APP
    from workbench import loading

    at = AppTest.from_file(str(APP), default_timeout=600)
    at.query_params.update(store=str(root), session=session.uuid, message="0")
    at.run()
    at.switch_page("workbench/pages/context.py").run()
    assert not at.exception, at.exception
    rng = random.Random(5)
    times = []
    for _ in range(7):
        at.query_params["message"] = str(rng.randrange(messages))
        started = time.perf_counter()
        at.run()
        times.append(time.perf_counter() - started)
        assert not at.exception, at.exception
    view_ms = min(times) * 1000
    bench.figure(
        f"page view of one message, {messages:,}-message context (Python, cache warm)",
        view_ms,
        "ms",
        f"< {GOAL_VIEW_MS:g} ms",
        view_ms < GOAL_VIEW_MS,
        note=f"best of 7 AppTest reruns (AppTest's own work included); median {sorted(times)[3] * 1000:.0f} ms",
    )
    loading.load_session(str(root), session.uuid)
    copy_s = min([timed(lambda: loading.load_session(str(root), session.uuid)) for _ in range(2)])
    shared_s = min([timed(lambda: loading.read_only_session(str(root), session.uuid)) for _ in range(3)])
    bench.figure(
        "the session from st.cache_data, as every rerun read it before (a copy)",
        copy_s * 1000,
        "ms",
        note=f"st.cache_resource (shared, now used by the Context page): {shared_s * 1000:.1f} ms",
    )
    return min(times)


def clicks_in_python(bench: Bench, root: Path, session: Session, messages: int, view_s: float) -> None:
    """A click on Replay & diff, Token budget and Compaction over the long context, in this
    process (AppTest), held against a click on the Context page of the same context. These
    pages once redid their whole work at every click: at 100,000 messages Replay drew a
    text area per message of the request and never finished, Token budget took 14.7 s and
    Compaction 7.6 s."""
    from streamlit.testing.v1 import AppTest

    from tests.apptest import APP

    for page, name in (
        ("replay", "Replay & diff"),
        ("token_budget", "Token budget"),
        ("compaction", "Compaction"),
    ):
        at = AppTest.from_file(str(APP), default_timeout=900)
        at.query_params.update(store=str(root), session=session.uuid)
        at.run()
        first = timed(lambda at=at, page=page: at.switch_page(f"workbench/pages/{page}.py").run())
        assert not at.exception, at.exception
        clicks = [timed(at.run) for _ in range(5)]
        assert not at.exception, at.exception
        bench.ratio(
            f"{name} page, a click on the {messages:,}-message context (Python, cache warm)",
            min(clicks),
            view_s,
            3.0,
            baseline_is="a click on the Context page of the same context",
            note=f"best of 5 reruns; the page's first run took {first:.1f} s",
        )


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def sessions_page(bench: Bench, browser: Browser, url: str, root: Path, sessions: int) -> None:
    """The Sessions page of a store of ``sessions`` sessions, as it is today."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    baseline = min(
        [time_until_visible(context, f"{url}/context?store={root}", EMPTY_CONTEXT_PAGE, 60) for _ in range(5)]
    )
    limit = bench.scale(900, 120)
    table = '[data-testid="stDataFrame"]'
    first = time_until_visible(context, f"{url}/?store={root}", table, limit)
    again = time_until_visible(context, f"{url}/?store={root}", table, limit) if first < limit else first
    gave_up = f"no table after {limit} s; " if first == float("inf") else ""
    page_figure(
        bench,
        f"Sessions page, {sessions:,} sessions: first open",
        first if first != float("inf") else limit,
        baseline,
        note=gave_up + "listing, table and picker from the catalog; the browser's own load is the baseline",
    )
    page_figure(
        bench,
        f"Sessions page, {sessions:,} sessions: opened again",
        again if again != float("inf") else limit,
        baseline,
    )
    context.close()


def live_follow(bench: Bench, browser: Browser, url: str, root: Path) -> None:
    """The Sessions page left open while a writer process (tests/live_writer.py) saves new
    sessions: seconds from the end of the save to the page counting the new session,
    without a reload (issue 27 point 3); the best of three saves."""
    from tests.test_browser import open_page
    from tests.test_browser_live import LiveWriter, shown_after

    page = open_page(browser, f"{url}/?store={root}")
    writer = LiveWriter(root)
    tries = []
    try:
        for _ in range(3):
            before = len(Store(root).sessions())
            writer.send("session")
            saved = float(writer.answer("saved")[1])
            tries.append(shown_after(page, rf"^{before + 1} sessions?$", saved, within_s=60))
    finally:
        writer.close()
        page.close()
    best = min(tries)
    bench.figure(
        "live follow: writer save → row shown (Sessions page left open)",
        best,
        "s",
        f"< {GOAL_PAGE_S:g} s",
        best < GOAL_PAGE_S,
        note="file events (watchdog) bump the follower; the page's fragment looks every second and reruns; "
        "tries: " + ", ".join(f"{t:.2f}" for t in tries),
    )


SERVER_RSS_GOAL_MB = 1024
"""The workbench serving one long context: a laptop keeps it open beside a browser."""


def _server_peak_mb() -> float | None:
    """The peak resident memory (VmHWM) of the Streamlit server this run started."""
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
            command = (status.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields.get("PPid", "0")) == os.getpid() and b"streamlit" in command:
            return int(fields["VmHWM"].split()[0]) / 1024
    return None


def server_memory(bench: Bench, root: Path, messages: int) -> None:
    peak = _server_peak_mb()
    if peak is None:
        raise RuntimeError("the Streamlit server of this run was not found under /proc")
    size = sum(p.stat().st_size for p in root.rglob("*.json") if not is_catalog_file(p))
    bench.figure(
        f"the workbench serving the {messages:,}-message context: peak memory of its server",
        peak,
        "MB",
        f"≤ {SERVER_RSS_GOAL_MB} MB",
        peak <= SERVER_RSS_GOAL_MB,
        note=f"after the Context page's timings (first open, pages by ?message=); the session's files are "
        f"{size / 1e6:,.0f} MB; Streamlit, pandas and plotly themselves included",
    )


def _parse_each(paths: list[Path]) -> None:
    """Read and parse each file, keeping none: a list of every parsed file would time
    Python's garbage collector walking the ones kept (it made this baseline 4x slower)."""
    for path in paths:
        orjson.loads(path.read_bytes())


SECOND_INDEXING_UNDER_S = 3.0
"""A first indexing this short is timed twice (its noise is a larger part of it); a
longer one once, to keep the bench within its time."""


def first_indexing(bench: Bench, root: Path, what: str) -> None:
    """A new store's first listing as the workbench makes it (what its first page view
    waits for), held against reading the same bytes with orjson (issue 28 point 2:
    ≤ 2x); then the token counts and the text search filling in behind it, done here
    before the pages are timed (a server does it in a background thread while they
    are). `soapwb ls` waits for the counts too: its figure is the sum."""
    catalog = Store(root, counts_behind=True).catalog()
    assert catalog is not None
    every = [p for p in root.rglob("*.json") if not is_catalog_file(p)]
    indexed = [p for p in every if p.parent.name not in ("calls", "invocations")]  # what a listing reads
    size = sum(p.stat().st_size for p in indexed)
    _parse_each(indexed)  # into the page cache, for both (this machine evicts what sat unread a while)
    timings: list[float] = []
    while len(timings) < (2 if not timings or timings[0] < SECOND_INDEXING_UNDER_S else 1):
        if timings:  # the faster of two, as for orjson (bench_store._first_indexing_seconds)
            catalog.clear()
        waiting = catalog.counts_waiting()
        timings.append(timed(lambda: catalog.refresh(counts_behind=True)))
        behind = catalog.counts_waiting() - waiting
    indexing = min(timings)
    counting = timed(catalog.fill_counts)
    filling = timed(catalog.fill_text)
    reading = min(timed(lambda: _parse_each(indexed)) for _ in range(2))
    bench.ratio(
        f"the catalog's first indexing of a new store of {what}",
        indexing,
        reading,
        2,
        baseline_is=f"orjson of the files it indexes ({len(indexed):,} session and context files, "
        f"{size / 1e6:,.0f} MB; each parsed and let go, as the indexing does; best of 2, the files read once "
        "before either is timed, so both find them in the page cache)",
        note=f"{indexing:.2f} s vs {reading:.2f} s ("
        + (
            f"the faster of {timings[0]:.2f} s and {timings[1]:.2f} s, the second after emptying the catalog"
            if len(timings) > 1
            else f"one indexing: a second is made only under {SECOND_INDEXING_UNDER_S:g} s"
        )
        + f"); the store holds {len(every):,} files with its call and "
        "invocation records, which a listing does not read. "
        + (
            f"Each of {behind:,} context files is listed from its file-level keys; its messages are checked, "
            "and their rows, spans, facts and token counts written, by a thread behind it (the Sessions page "
            "says so, and draws its table again once they are in)"
            if behind
            else "Every row, span, fact and token count (too few sessions to leave them behind)"
        )
        + "; the messages' text goes to the search index behind it; a progress bar on the page and in the CLI",
    )
    bench.figure(
        f"the same with every token count taken first (`soapwb ls`, any API listing), {what}",
        (indexing + counting) / reading,
        "x",
        baseline="orjson of the same files",
        note=f"{indexing:.2f} s listing + {counting:.2f} s filling in (Catalog.fill_counts: each waiting file read "
        "again, its messages checked and their rows written, cl100k_base of every message, a count known by its "
        "text's hash taken from the cache)",
    )
    bench.figure(
        f"the text search filling in behind it, {what}",
        filling,
        "s",
        note="Catalog.fill_text: a background thread of the workbench, or the first search (which says so)",
    )


def phoenix_store(bench: Bench) -> tuple[Path, int]:
    """The store shown side by side with Phoenix: the shape of the big one, fewer sessions
    (benchmarks/phoenix_view.py says why)."""
    sessions = bench.scale(120, 30)  # the export and its ingestion take a third of a second a session
    return shared_store(bench, "store-phoenix", **{**store_shape(bench), "sessions": sessions}), sessions


def run(bench: Bench) -> None:
    from playwright.sync_api import sync_playwright

    from tests.test_browser import CHROMIUM, FLAGS, streamlit_app
    from tests.test_page_context_long import long_store

    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"no chromium at {CHROMIUM}: the browser figures cannot be measured")
    messages = bench.scale(100_000, 2_000)
    sessions = store_shape(bench)["sessions"]
    long_root = bench.workdir / "pages-long"
    session = long_store(long_root, messages)
    many_root = shared_store(bench)
    for root, what in (
        (long_root, f"one {messages:,}-message session"),
        (many_root, f"{sessions:,} sessions"),
    ):
        first_indexing(bench, root, what)
    with (
        streamlit_app(long_root, bench.workdir / "pages-streamlit.log") as url,
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            first = first_opens(bench, browser, long_root, session, messages)
            inspect_view.side_by_side(
                bench, browser, session.active_context, first, f"one {messages:,}-message conversation"
            )
            context_page(bench, browser, url, long_root, session, messages)
            server_memory(bench, long_root, messages)
            sessions_page(bench, browser, url, many_root, sessions)
            phoenix_view.side_by_side(bench, browser, url, *phoenix_store(bench))
            live_follow(bench, browser, url, long_root)
        finally:
            browser.close()
    view_s = view_in_python(bench, long_root, session, messages)
    clicks_in_python(bench, long_root, session, messages, view_s)
