"""A new store's first listing for the workbench leaves the token counts to a fill behind
it (issue 28 point 2: counting is most of a first indexing): the listing comes without
them, the fill gives every row what a complete indexing gives, anything else that lists
gets complete figures, a load of a file still waiting counts it itself, and the Sessions
page says so and draws the table again once they are in."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

import soap_core._catalog as catalog_module
from soap_core import Message, Store, reporting_progress
from soap_core._catalog import CATALOG_FILE
from soapwb.cli import main
from tests.apptest import open_app_page
from tests.test_catalog import QUERIES, _age, build_sessions_store
from workbench import indexing

SESSIONS = 12

FILE_ROWS = (  # every column but the signature (another inode, other times)
    "SELECT dir, file, id, origin_context_id, children, messages, tokens, first_ts, last_ts, counts, error, "
    "digest, spans, facts FROM context_files ORDER BY dir, file"
)
MESSAGE_ROWS = "SELECT dir, file, idx, id, role, tokens, cached_tokens, created, chars FROM messages ORDER BY dir, file, idx"


def rows(root: Path, query: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(root / CATALOG_FILE) as db:
        return db.execute(query).fetchall()


def _copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: bool) -> tuple[Path, Path]:
    monkeypatch.setattr(catalog_module, "COUNTS_BEHIND_FROM", 5)
    monkeypatch.setattr(catalog_module, "WORKERS_FROM", 1 if workers else 10**9)
    monkeypatch.setattr(catalog_module.os, "cpu_count", lambda: 2)
    behind = tmp_path / "behind"
    build_sessions_store(behind, SESSIONS, seed=21)
    _age(behind)
    whole = tmp_path / "whole"
    shutil.copytree(behind, whole)
    return behind, whole


@pytest.fixture(params=["read here", "read by workers"])
def two_copies(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Path]:
    """The same store twice: one to index with counts behind, one to index whole; the
    first listing's context files read in this process, or by worker processes
    (soap_core._list_worker), as a big store's are."""
    return _copies(tmp_path, monkeypatch, request.param == "read by workers")


@pytest.fixture
def worker_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """:func:`two_copies`, read by workers."""
    return _copies(tmp_path, monkeypatch, True)


def complete(root: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """Every file's and message's row; an error names its file under ROOT."""
    files = [
        tuple(v.replace(str(root), "ROOT") if isinstance(v, str) else v for v in r)
        for r in rows(root, FILE_ROWS)
    ]
    return files, rows(root, MESSAGE_ROWS)


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


def _active_file(root: Path) -> Path:
    """One session's active context file (the listing shows its figures)."""
    summary = Store(root, use_catalog=False).sessions()[0]
    session = json.loads((summary.path / "session.json").read_text())
    return next(summary.path.glob(f"*{session['active_context_id']}.json"))


def test_the_first_listing_reads_no_message_and_lists_what_a_whole_indexing_lists(
    two_copies: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each file is listed from its file-level keys: no message is built and no row
    written until the fill, yet the listing's counts and times are the whole one's."""
    behind, whole = two_copies
    built: list[object] = []
    real = Message.from_dict.__func__  # type: ignore[attr-defined]

    def recording(cls: type[Message], data: object, path: str = "$") -> Message:
        built.append(path)
        return real(cls, data, path)  # type: ignore[no-any-return]

    monkeypatch.setattr(Message, "from_dict", classmethod(recording))
    listed = Store(behind, counts_behind=True).sessions()
    assert built == [], "the listing built a message"
    assert rows(behind, "SELECT count(*) FROM messages") == [(0,)]
    waiting = rows(behind, "SELECT count(*) FROM row_backlog")[0][0]
    assert waiting == len(rows(behind, FILE_ROWS))
    monkeypatch.setattr(Message, "from_dict", classmethod(real))
    full = Store(whole).sessions()
    without_tokens = [(s.uuid, s.figures and dataclasses.replace(s.figures, tokens=None)) for s in full]
    assert [(s.uuid, s.figures) for s in listed] == without_tokens
    catalog = Store(behind).catalog()
    assert catalog is not None and catalog.fill_counts() == waiting
    assert rows(behind, "SELECT count(*) FROM row_backlog") == [(0,)]
    assert complete(behind) == complete(whole)


def test_a_file_whose_messages_do_not_read_takes_its_error_once_filled(two_copies: tuple[Path, Path]) -> None:
    """Listed from its file-level keys, the file looks whole until the fill checks its
    messages; then the listing shows the error a whole indexing shows, and the store's
    other sessions are untouched."""
    behind, whole = two_copies
    for root in (behind, whole):
        target = _active_file(root)
        data = json.loads(target.read_text())
        data["messages"][-1]["role"] = 5
        target.write_text(json.dumps(data, indent=2))
        _age(root)
    broken = _active_file(behind).parent.name
    listed = {s.path.name: s for s in Store(behind, counts_behind=True).sessions()}
    assert listed[broken].figures is not None and listed[broken].figures.error is None  # not read yet
    full = {s.path.name: s for s in Store(whole).sessions()}
    error = full[broken].figures.error if full[broken].figures else None
    assert error is not None and "$.messages[" in error and "role" in error
    catalog = Store(behind).catalog()
    assert catalog is not None
    generation = catalog.generation
    catalog.fill_counts()
    assert catalog.generation > generation
    assert catalog.counts_waiting() == 0
    assert complete(behind) == complete(whole)
    again = {s.path.name: s for s in Store(behind, counts_behind=True).sessions()}
    assert [(n, s.figures) for n, s in sorted(again.items()) if n != broken] == [
        (n, s.figures) for n, s in sorted(full.items()) if n != broken
    ]
    shown = again[broken].figures
    assert shown is not None and shown.error == error.replace(str(whole), str(behind))


def test_a_search_right_after_the_first_listing_finds_every_message(two_copies: tuple[Path, Path]) -> None:
    """The text goes into the index by the messages' rows: a search fills those first."""
    behind, whole = two_copies
    Store(behind, counts_behind=True).sessions()
    ours, theirs = Store(behind).catalog(), Store(whole).catalog()
    assert ours is not None and theirs is not None
    theirs.refresh()
    assert ours.text_waiting() > 0
    for query in QUERIES:
        found = [(h.session_dir, h.context_id, h.index) for h in ours.search(query)]
        assert found == [(h.session_dir, h.context_id, h.index) for h in theirs.search(query)]
    assert any(ours.search(QUERIES[0]))
    assert ours.text_waiting() == 0 and ours.counts_waiting() == 0


def test_a_long_file_gets_its_spans_and_facts_from_the_fill(
    two_copies: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    behind, whole = two_copies
    monkeypatch.setattr(catalog_module, "SPANNED_FROM", 2)  # every file with two messages is "long"
    Store(behind, counts_behind=True).sessions()
    assert rows(behind, "SELECT count(*) FROM context_files WHERE spans IS NOT NULL") == [(0,)]
    Store(behind).sessions()  # fills what was left
    Store(whole).sessions()
    assert rows(whole, "SELECT count(*) FROM context_files WHERE spans IS NOT NULL")[0][0] > 0
    assert complete(behind) == complete(whole)


def test_a_save_before_the_fill_indexes_what_it_wrote(two_copies: tuple[Path, Path], tmp_path: Path) -> None:
    """A fork saved while its parent's rows are still waiting is indexed whole (there
    are no rows to copy), and the fill then leaves the catalog as a whole indexing of
    the same files leaves it."""
    behind, _whole = two_copies
    store = Store(behind, counts_behind=True)
    session = store.load_session(sorted(s.uuid for s in store.sessions())[0])
    assert rows(behind, "SELECT count(*) FROM row_backlog")[0][0] > 0
    parent = session.active_context
    child = session.add_context(parent.fork(range(len(parent.messages))))
    child.append(parent.messages[-1].copy())
    session.active_context_id = child.id
    store.save_session(session)
    _age(behind)
    Store(behind).sessions()
    assert rows(behind, "SELECT count(*) FROM row_backlog") == [(0,)]
    fresh = tmp_path / "fresh"
    shutil.copytree(behind, fresh, ignore=shutil.ignore_patterns(f"{CATALOG_FILE}*"))
    _age(fresh)
    Store(fresh).sessions()
    assert complete(behind) == complete(fresh)


def _link_outside(target: Path) -> None:
    outside = target.parents[3] / "outside.json"  # beside both copies: the same target for each
    outside.write_bytes(target.read_bytes())
    target.unlink()
    target.symlink_to(outside)


DAMAGES = {
    "a link leading outside the store": _link_outside,
    "JSON with a comment": lambda p: p.write_text("// peteos's json5 reader takes this\n" + p.read_text()),
    "a 25-digit integer": lambda p: p.write_text(
        p.read_text().replace('"messages"', '"big": 1234567890123456789012345, "messages"', 1)
    ),
    "a bad anchor": lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "anchor_points": "x"})),
    "an id that names no file": lambda p: p.write_text(
        json.dumps({**json.loads(p.read_text()), "id": "../x"})
    ),
    "a child that is no id": lambda p: p.write_text(
        json.dumps({**json.loads(p.read_text()), "children": [5]})
    ),
    "messages that are no list": lambda p: p.write_text(
        json.dumps({**json.loads(p.read_text()), "messages": {}})
    ),
    "truncated JSON": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
}


NAMED_AT_ONCE = {
    "a link leading outside the store",
    "an id that names no file",
    "a child that is no id",
    "messages that are no list",
    "truncated JSON",
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_an_odd_file_is_listed_as_a_whole_indexing_lists_it_once_filled(
    two_copies: tuple[Path, Path], damage: str
) -> None:
    """What the quick reading of file-level keys does not take plainly goes through the
    whole reader at once (its error, or its keys as the lenient reader reads them);
    what it takes is checked whole by the fill. Either way the catalog ends as a whole
    indexing leaves it."""
    behind, whole = two_copies
    for root in (behind, whole):
        DAMAGES[damage](_active_file(root))
        _age(root)
    Store(behind, counts_behind=True).sessions()
    Store(whole).sessions()
    name = _active_file(behind).name
    error = "SELECT error FROM context_files WHERE file = ?"
    listed, theirs = rows(behind, error.replace("?", repr(name))), rows(whole, error.replace("?", repr(name)))
    if damage in NAMED_AT_ONCE:  # never listed under keys that do not read (an id is a file name)
        assert theirs[0][0] and listed[0][0] == theirs[0][0].replace(str(whole), str(behind))
    else:
        assert listed == [(None,)]
    Store(behind).sessions()  # fills what was left
    assert complete(behind) == complete(whole)
    assert rows(behind, "SELECT count(*) FROM row_backlog") == [(0,)]


def test_the_workers_list_every_plain_file_and_the_rest_is_read_here(
    worker_copies: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With workers, no plain context file is read by the indexing process itself."""
    behind, _whole = worker_copies
    broken = _active_file(behind)
    broken.write_text("// a comment\n" + broken.read_text())  # only the lenient reader takes it
    _age(behind)
    read_here: list[str] = []
    real = catalog_module.Catalog._read_inside

    def recording(self: catalog_module.Catalog, path: str) -> tuple[bytes | None, bool]:
        read_here.append(path)
        return real(self, path)

    monkeypatch.setattr(catalog_module.Catalog, "_read_inside", recording)
    Store(behind, counts_behind=True).sessions()
    contexts = [p for p in read_here if not p.endswith("/session.json")]
    assert contexts == [str(broken)]
    assert rows(behind, "SELECT count(*) FROM row_backlog")[0][0] == len(rows(behind, FILE_ROWS))


@pytest.mark.parametrize(
    "worker",
    [
        "import sys; sys.exit(3)",
        "import sys; sys.stdin.buffer.read(); sys.stdout.write('null\\n[1, 2]\\n{not json')",
        "import sys; sys.stdin.buffer.read(); sys.stdout.write('[\"../x\", null, [], 9, null, null]\\n' * 99)",
    ],
    ids=["fails", "writes nonsense", "gives an id that names no file"],
)
def test_a_worker_that_fails_or_lies_about_a_name_changes_nothing(
    worker_copies: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, worker: str
) -> None:
    """Whatever a worker writes, the catalog ends as a whole indexing leaves it: what it
    does not list plainly is read here, and an id it gives is checked as a name. (A
    worker that lists a file with other plain values than the file holds is not
    guarded against: it is this project's own script, reading the same bytes.)"""
    behind, whole = worker_copies
    script = tmp_path / "worker.py"
    script.write_text(worker)
    monkeypatch.setattr(catalog_module, "_WORKER", str(script))
    Store(behind, counts_behind=True).sessions()
    Store(behind).sessions()
    Store(whole).sessions()
    assert complete(behind) == complete(whole)


def test_a_worker_neither_follows_a_link_nor_waits_on_a_fifo(tmp_path: Path) -> None:
    from soap_core import _list_worker

    plain = tmp_path / "plain.json"
    plain.write_text(
        json.dumps({"id": "a", "messages": [{"creation_timestamp": "2"}, {"creation_timestamp": "1"}]})
    )
    link = tmp_path / "link.json"
    link.symlink_to(plain)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert _list_worker.listed(bytes(plain)) == ("a", None, [], 2, "1", "2")
    assert _list_worker.listed(bytes(link)) is None
    assert _list_worker.listed(bytes(fifo)) is None
