"""A new store's first listing for the workbench leaves the token counts to a fill behind
it (issue 28 point 2: counting is most of a first indexing): the listing comes without
them, the fill gives every row what a complete indexing gives, anything else that lists
gets complete figures, a load of a file still waiting counts it itself, and the Sessions
page says so and draws the table again once they are in."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

import soap_core._catalog as catalog_module
from soap_core import Store, reporting_progress
from soap_core._catalog import CATALOG_FILE
from soapwb.cli import main
from tests.apptest import open_app_page
from tests.test_catalog import _age, build_sessions_store
from workbench import indexing

SESSIONS = 12

FILE_ROWS = "SELECT dir, file, messages, tokens, counts FROM context_files ORDER BY dir, file"
MESSAGE_ROWS = "SELECT dir, file, idx, id, role, tokens, cached_tokens, created, chars FROM messages ORDER BY dir, file, idx"


def rows(root: Path, query: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(root / CATALOG_FILE) as db:
        return db.execute(query).fetchall()


@pytest.fixture
def two_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """The same store twice: one to index with counts behind, one to index whole."""
    monkeypatch.setattr(catalog_module, "COUNTS_BEHIND_FROM", 5)
    behind = tmp_path / "behind"
    build_sessions_store(behind, SESSIONS, seed=21)
    _age(behind)
    whole = tmp_path / "whole"
    shutil.copytree(behind, whole)
    return behind, whole


def complete(root: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    return rows(root, FILE_ROWS), rows(root, MESSAGE_ROWS)


def test_the_first_listing_leaves_the_counts_and_the_fill_gives_what_a_whole_indexing_gives(
    two_copies: tuple[Path, Path],
) -> None:
    behind, whole = two_copies
    listed = Store(behind, counts_behind=True).sessions()
    files = len(rows(behind, FILE_ROWS))
    assert len(listed) == SESSIONS and all(s.figures is not None for s in listed)
    assert {s.figures.tokens for s in listed if s.figures} == {None}  # listed, not counted yet
    assert all(s.figures.messages for s in listed if s.figures)
    catalog = Store(behind).catalog()
    assert catalog is not None and catalog.counts_waiting() == files
    generation = catalog.generation
    reports: list[tuple[str, int, int]] = []
    with reporting_progress(lambda *r: reports.append(r)):
        assert catalog.fill_counts() == files
    assert reports[0] == ("tokens", 0, files) and reports[-1] == ("tokens", files, files)
    assert catalog.generation > generation  # a listing kept by generation shows the counts
    assert catalog.counts_waiting() == 0

    Store(whole).sessions()
    assert complete(behind) == complete(whole)
    shown = {s.uuid: s.figures for s in Store(behind, counts_behind=True).sessions()}
    assert shown == {s.uuid: s.figures for s in Store(whole).sessions()}
    assert all(f is not None and f.tokens for f in shown.values())


def test_below_the_threshold_the_counts_are_taken_at_once(two_copies: tuple[Path, Path]) -> None:
    behind, whole = two_copies
    catalog_module.COUNTS_BEHIND_FROM = SESSIONS + 1  # monkeypatched: undone after the test
    Store(behind, counts_behind=True).sessions()
    catalog = Store(behind).catalog()
    assert catalog is not None and catalog.counts_waiting() == 0
    Store(whole).sessions()
    assert complete(behind) == complete(whole)


def test_any_other_listing_fills_in_what_was_left_first(two_copies: tuple[Path, Path]) -> None:
    behind, whole = two_copies
    Store(behind, counts_behind=True).sessions()
    listed = Store(behind).sessions()  # the CLI's, an API user's: complete figures
    assert all(s.figures is not None and s.figures.tokens for s in listed)
    Store(whole).sessions()
    assert complete(behind) == complete(whole)


def test_soapwb_ls_after_the_workbench_listed_the_store_shows_every_count(
    two_copies: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    behind, whole = two_copies
    Store(behind, counts_behind=True).sessions()
    assert main(["ls", "--store", str(behind), "--json"]) == 0
    ours = json.loads(capsys.readouterr().out)
    assert main(["ls", "--store", str(whole), "--json"]) == 0
    theirs = json.loads(capsys.readouterr().out)
    assert all(row["tokens"] for row in ours)
    assert [{k: v for k, v in r.items() if k != "path"} for r in ours] == [
        {k: v for k, v in r.items() if k != "path"} for r in theirs
    ]


def test_a_context_still_waiting_is_loaded_with_its_true_counts(two_copies: tuple[Path, Path]) -> None:
    behind, whole = two_copies
    store = Store(behind, counts_behind=True)
    summary = store.sessions()[0]
    loaded = store.load_session(summary.uuid)
    plain = Store(whole, use_catalog=False).load_session(summary.uuid)
    assert {cid: [m.count_tokens() for m in c.messages] for cid, c in loaded.contexts.items()} == {
        cid: [m.count_tokens() for m in c.messages] for cid, c in plain.contexts.items()
    }


def test_a_file_changed_before_its_counts_are_taken_is_counted_as_it_is_now(
    two_copies: tuple[Path, Path],
) -> None:
    behind, whole = two_copies
    Store(behind, counts_behind=True).sessions()
    path = sorted(behind.glob("sessions/*/*.json"), key=lambda p: p.name == "session.json")[0]
    for root in (behind, whole):
        target = root / path.relative_to(behind)
        data = json.loads(target.read_text())
        data["messages"][0]["content"][0]["text"] = "a longer sentence than the one it replaces, " * 20
        target.write_text(json.dumps(data, indent=2))
        os.utime(target, ns=(0, target.stat().st_mtime_ns - 60 * 1_000_000_000))
    catalog = Store(behind).catalog()
    assert catalog is not None
    waiting = catalog.counts_waiting()
    assert catalog.fill_counts() == waiting - 1  # not from bytes other than the indexed ones
    Store(behind).sessions()  # indexes the changed file again, counted at once
    Store(whole).sessions()
    assert catalog.counts_waiting() == 0
    assert complete(behind) == complete(whole)


def test_the_sessions_page_says_the_counts_are_coming_and_shows_them_once_in(
    two_copies: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page starts the fill behind it; held back here, the table has no tokens and
    a note says how many files wait. Once filled, the page's next run shows them."""
    behind, _whole = two_copies
    fills: list[object] = []
    monkeypatch.setattr(indexing, "_FILLING", set())
    monkeypatch.setattr(indexing, "_start", lambda work, name: fills.append(work))
    at = open_app_page(behind, "sessions")
    assert not at.exception
    files = len(rows(behind, FILE_ROWS))
    assert len(fills) == 1
    assert any(f"Counting the tokens of {files:,} files" in c.value for c in at.caption)
    table = at.dataframe[0].value
    assert table["tokens"].isna().all()
    fills[0]()  # the background thread's work: counts, then text
    at.run()
    assert not at.exception
    assert not any("Counting the tokens" in c.value for c in at.caption)
    table = at.dataframe[0].value
    assert table["tokens"].notna().all() and (table["tokens"] > 0).all()
