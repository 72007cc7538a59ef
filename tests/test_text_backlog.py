"""A new store's first listing indexes everything but the messages' text, which fills
in behind it (a background thread in the workbench, or the first search): the listing
reports its progress, the text search says how much waits, a search finds what a scan of
the files finds, and a file changed between the read and the write is not filled from
the old bytes."""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest

import soap_core._catalog as catalog_module
from soap_core import Store, reporting_progress, search_store
from soap_core._catalog import CATALOG_FILE
from soapwb import common
from soapwb.cli import main
from tests.apptest import open_app_page
from tests.test_catalog import QUERIES, _age, build_sessions_store
from workbench import indexing


def waiting_files(root: Path) -> set[str]:
    with sqlite3.connect(root / CATALOG_FILE) as db:
        return {f"{d}/{f}" for d, f in db.execute("SELECT dir, file FROM text_backlog")}


def context_files(root: Path) -> set[str]:
    return {
        str(p.relative_to(root).as_posix())
        for p in root.glob("sessions/*/*.json")
        if p.name != "session.json"
    }


def test_the_first_listing_reports_its_progress_and_leaves_every_text_to_fill_in(tmp_path: Path) -> None:
    build_sessions_store(tmp_path, 12, seed=3)
    _age(tmp_path)  # written a while ago: a listing reads each file once
    reports: list[tuple[str, int, int]] = []
    with reporting_progress(lambda *r: reports.append(r)):
        listed = Store(tmp_path).sessions()
    assert len(listed) == 12
    assert reports[0] == ("sessions", 0, 12) and reports[-1] == ("sessions", 12, 12)
    assert [done for _, done, _ in reports] == list(range(13))
    assert waiting_files(tmp_path) == context_files(tmp_path)
    catalog = Store(tmp_path).catalog()
    assert catalog is not None and catalog.text_waiting() == len(context_files(tmp_path))

    reports.clear()
    with reporting_progress(lambda *r: reports.append(r)):
        Store(tmp_path).sessions()  # nothing changed: no work, no report
    assert reports == []


def test_a_search_fills_the_text_in_first_and_finds_what_a_scan_finds(tmp_path: Path) -> None:
    build_sessions_store(tmp_path, 10, seed=5)
    _age(tmp_path)
    store = Store(tmp_path)
    store.sessions()
    total = len(context_files(tmp_path))
    reports: list[tuple[str, int, int]] = []
    with reporting_progress(lambda *r: reports.append(r)):
        found = {q: [h.as_dict() for h in search_store(store, q)] for q in QUERIES}
    assert [done for _, done, _ in reports] == list(range(total + 1))  # once: no work, no report
    assert {(stage, of) for stage, _, of in reports} == {("text", total)}
    assert waiting_files(tmp_path) == set()
    scan = Store(tmp_path, use_catalog=False)
    assert found == {q: [h.as_dict() for h in search_store(scan, q)] for q in QUERIES}
    assert any(found.values())


def test_a_file_rewritten_after_the_listing_is_searched_as_it_is_now(tmp_path: Path) -> None:
    build_sessions_store(tmp_path, 4, seed=7)
    store = Store(tmp_path)
    store.sessions()
    path = sorted(tmp_path.glob("sessions/*/*.json"), key=lambda p: p.name == "session.json")[0]
    data = json.loads(path.read_text())
    data["messages"][0]["content"][0]["text"] = "a sentence only the rewrite holds"
    path.write_text(json.dumps(data, indent=2))
    catalog = store.catalog()
    assert catalog is not None
    waiting = catalog.text_waiting()
    assert catalog.fill_text() == waiting - 1  # not from bytes other than the indexed ones
    assert [h.context_id for h in search_store(store, "only the rewrite holds")] == [data["id"]]
    assert waiting_files(tmp_path) == set()


def test_a_file_changed_between_the_read_and_the_write_keeps_its_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fill reads outside the lock: a refresh that indexes the file again in between
    wins, and the text read before it is dropped."""
    build_sessions_store(tmp_path, 3, seed=9)
    store = Store(tmp_path)
    store.sessions()
    catalog = store.catalog()
    assert catalog is not None
    read = catalog_module._texts_of

    def read_then_reindex(path: Path, sig: str, count: int) -> dict[int, str] | None:
        texts = read(path, sig, count)
        with sqlite3.connect(tmp_path / CATALOG_FILE) as db:  # what a re-index leaves: a new signature
            db.execute("UPDATE context_files SET sig = 'moved' WHERE file = ?", (path.name,))
        return texts

    monkeypatch.setattr(catalog_module, "_texts_of", read_then_reindex)
    assert catalog.fill_text() == 0
    assert waiting_files(tmp_path) == context_files(tmp_path)


def test_a_background_fill_and_listings_in_another_thread_both_finish(tmp_path: Path) -> None:
    build_sessions_store(tmp_path, 30, seed=11)
    store = Store(tmp_path)
    expected = [s.uuid for s in store.sessions()]
    catalog = store.catalog()
    assert catalog is not None
    errors: list[BaseException] = []

    def fill() -> None:
        try:
            catalog.fill_text()
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=fill)
    worker.start()
    listings = [[s.uuid for s in store.sessions()] for _ in range(20)]
    worker.join(timeout=60)
    assert not worker.is_alive() and errors == []
    assert all(listing == expected for listing in listings)
    assert catalog.text_waiting() == 0


class _Clock:
    """A clock that moves a second at every look: any work is slow enough to draw."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_soapwb_ls_and_search_draw_a_bar_on_stderr_for_a_new_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    build_sessions_store(tmp_path, 6, seed=13)
    _age(tmp_path)
    monkeypatch.setattr(common, "STORE_WORK_SHOWN_AFTER_S", 0.0)
    assert main(["ls", "--store", str(tmp_path), "--json"]) == 0
    listed = capsys.readouterr()
    assert listed.err == ""  # --json: quiet unless asked (a script reads the output)
    assert len(json.loads(listed.out)) == 6

    shutil.rmtree(tmp_path / CATALOG_FILE, ignore_errors=True)
    for path in tmp_path.glob(f"{CATALOG_FILE}*"):
        path.unlink()
    assert main(["ls", "--store", str(tmp_path), "--json", "--progress"]) == 0
    err = capsys.readouterr().err
    assert "] 1/6 sessions indexed (once)" in err  # then at most ten redraws a second
    assert "indexed 6 new or changed sessions in " in err and err.endswith("\n")

    files = len(context_files(tmp_path))
    assert main(["search", "--store", str(tmp_path), "alpha", "--progress"]) == 0
    err = capsys.readouterr().err
    assert f"indexed the text of {files} files for search in " in err
    assert main(["search", "--store", str(tmp_path), "alpha", "--progress"]) == 0
    assert capsys.readouterr().err == ""  # nothing left to fill: nothing said


def test_the_page_bar_appears_for_slow_work_only_and_goes_when_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    drawn: list[tuple[str, float, str]] = []

    class Bar:
        def progress(self, value: float, text: str) -> None:
            drawn.append(("progress", value, text))

        def empty(self) -> None:
            drawn.append(("empty", 1.0, ""))

    def new_bar(value: float, text: str) -> Bar:
        drawn.append(("new", value, text))
        return Bar()

    monkeypatch.setattr(indexing.st, "progress", new_bar)
    fast = indexing.PageProgress(clock=lambda: 0.0)
    for done in range(11):
        fast("sessions", done, 10)
    assert drawn == []  # ended within SHOWN_AFTER_S: no bar at all

    slow = indexing.PageProgress(clock=_Clock())
    for done in range(4):
        slow("sessions", done, 3)
    assert [kind for kind, _, _ in drawn] == ["new", "progress", "empty"]
    assert drawn[0][2] == "Indexing the store, once: 1 of 3 new or changed sessions"


def test_the_sessions_page_says_the_text_search_is_filling_in_and_a_search_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page starts the background fill; held back here, the search box says how much
    is left, and a search made meanwhile fills it in first and finds what a scan finds."""
    build_sessions_store(tmp_path, 8, seed=17)
    started: list[str] = []
    monkeypatch.setattr(indexing, "_FILLING", set())
    monkeypatch.setattr(
        indexing, "_start", lambda work, name: started.append(name.removeprefix("soapwb-text-"))
    )
    at = open_app_page(tmp_path, "sessions")
    assert not at.exception
    waiting = len(context_files(tmp_path))
    assert started == [str(tmp_path)]  # one fill per store and process, started by the page
    assert any(f"still indexing {waiting:,} files" in c.value for c in at.caption)
    at.text_input(key="search").set_value("alpha").run()
    assert not at.exception
    scan = search_store(Store(tmp_path, use_catalog=False), "alpha")
    assert scan and any(f"{len(scan)} messages contain 'alpha'" in t.value for t in at.text)
    assert not any("still indexing" in c.value for c in at.caption)


def test_the_search_boxs_note_goes_once_the_fill_is_done_without_a_rerun(tmp_path: Path) -> None:
    """In a real browser the note is counted again every couple of seconds while the
    fill runs behind the page (it bumps nothing a page reruns on), and is gone once the
    fill is done, without the user doing anything."""
    from tests.test_browser import CHROMIUM, FLAGS, streamlit_app

    if not Path(CHROMIUM).exists():
        pytest.skip(f"no chromium at {CHROMIUM}: the browser test cannot run")
    from playwright.sync_api import sync_playwright

    from soap_gen import generate_store

    root = tmp_path / "store"
    generate_store(root, sessions=1_000, messages=20, fork_rate=0.0, chain_depth=1, seed=8, call_log_limit=0)
    with streamlit_app(root, tmp_path / "server.log") as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{url}/?store={root}")
            note = page.get_by_text("Text search is still indexing")
            note.first.wait_for(state="visible", timeout=120_000)
            assert "file" in note.first.inner_text()
            note.first.wait_for(state="detached", timeout=120_000)  # no click, no rerun of the page
            # the token counts came first (the thread's first work): their note went with a
            # rerun of the page that drew the table with them, not as "0 files"
            assert page.get_by_text("Counting the tokens of").count() == 0
        finally:
            browser.close()
    catalog = Store(root).catalog()
    assert catalog is not None and catalog.text_waiting() == 0
