"""A save of a long context whose only change is a new ``children`` entry (a fork, a
replay, a compaction) writes the file as its rest dumped around the messages' bytes as
read (soap_core._spans.spliced_parts), and the catalog keeps the messages' rows and
moves their spans. The ground truth is the same change saved through a store without a
catalog, which dumps every file whole as peteos does: the bytes must be the same."""

from __future__ import annotations

import json
import shutil
import sqlite3
from array import array
from pathlib import Path

import pytest

from soap_core import Context, Store, _jsonio, _store, read_json
from soap_core._catalog import CATALOG_FILE
from soap_core._spans import SPANNED_FROM, message_spans
from tests.test_page_context_long import long_store, written_a_minute_ago

MESSAGES = SPANNED_FROM + 300


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("splice") / "store"
    long_store(root, MESSAGES)
    Store(root).sessions()  # the catalog indexes it: the long file gets its spans
    written_a_minute_ago(root)
    return root


def with_and_without_catalog(original: Path, tmp_path: Path) -> tuple[Path, Path]:
    """Two copies of the store ``original``: one with its catalog, one without."""
    with_catalog, without = tmp_path / "with", tmp_path / "without"
    shutil.copytree(original, with_catalog)
    shutil.copytree(original, without, ignore=shutil.ignore_patterns(f"{CATALOG_FILE}*"))
    return with_catalog, without


@pytest.fixture
def two_copies(original: Path, tmp_path: Path) -> tuple[Path, Path]:
    return with_and_without_catalog(original, tmp_path)


def forked_and_saved(store: Store, child_id: str, selected: range) -> tuple[Path, Context]:
    [summary] = store.sessions()
    session = store.load_session(summary.uuid)
    parent = session.active_context
    child = parent.fork(selected)
    child.id = parent.children[-1] = child_id
    session.add_context(child)
    store.save_session(session)
    assert session.directory is not None
    return session.directory / session.context_files[parent.id], parent


def test_a_fork_of_a_long_context_saves_the_same_bytes_as_a_whole_dump(two_copies: tuple[Path, Path]) -> None:
    with_catalog, without = two_copies
    spliced_store = Store(with_catalog)
    spliced_store.sessions()
    spliced, parent = forked_and_saved(spliced_store, "child-one", range(500))
    assert not parent.messages_built, "the parent was read from its spans and stayed so"
    whole, _ = forked_and_saved(Store(without, use_catalog=False), "child-one", range(500))
    assert spliced.read_bytes() == whole.read_bytes()
    assert spliced.read_bytes().decode() == json.dumps(read_json(spliced), indent=2)
    for name in sorted(p.name for p in spliced.parent.iterdir()):
        assert (spliced.parent / name).read_bytes() == (whole.parent / name).read_bytes(), name


def test_the_spliced_save_dumps_none_of_the_parents_messages(
    two_copies: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What is dumped is the child and the parent's rest: far less than the parent's
    file (a whole dump would be all of it again)."""
    with_catalog, _ = two_copies
    store = Store(with_catalog)
    store.sessions()
    dumped: list[int] = []
    real = _jsonio.dump_json

    def counted(value: object) -> str:
        text = real(value)
        dumped.append(len(text))
        return text

    monkeypatch.setattr(_store, "dump_json", counted)
    monkeypatch.setattr(_jsonio, "dump_json", counted)
    path, _ = forked_and_saved(store, "child-small", range(20))
    assert sum(dumped) < path.stat().st_size / 10


def test_the_catalog_keeps_the_parents_message_rows_and_moves_their_spans(
    two_copies: tuple[Path, Path],
) -> None:
    with_catalog, without = two_copies
    store = Store(with_catalog)
    store.sessions()
    database = with_catalog / CATALOG_FILE

    def rows_of(file: str) -> list[tuple[int, str]]:
        with sqlite3.connect(database) as db:
            return db.execute("SELECT rowid, id FROM messages WHERE file=? ORDER BY idx", (file,)).fetchall()

    [summary] = store.sessions()
    file = store.load_session(summary.uuid).context_files[store.load_active_context(summary).id]
    before = rows_of(file)
    path, _ = forked_and_saved(store, "child-two", range(300))
    assert rows_of(file) == before, "the parent's messages were indexed again"
    Store(with_catalog).sessions()  # a listing right after: the same bytes, nothing indexed again
    assert rows_of(file) == before, "a refresh indexed the saved file again"
    with sqlite3.connect(database) as db:
        (blob, children) = db.execute(
            "SELECT spans, children FROM context_files WHERE file=?", (file,)
        ).fetchone()
    moved = array("q")
    moved.frombytes(blob)
    assert moved == message_spans(path.read_bytes(), MESSAGES), "the spans frame the new file's messages"
    assert json.loads(children)[-1] == "child-two"
    written_a_minute_ago(with_catalog)  # trusted again once settled: read from the moved spans
    again = Store(with_catalog)
    [summary] = again.sessions()
    reread = again.load_active_context(summary)
    truth = Store(without, use_catalog=False)
    [plain] = truth.sessions()
    expected = [m.to_dict() for m in truth.load_active_context(plain).messages]
    assert [m.to_dict() for m in reread.messages] == expected


def test_two_forks_saved_from_two_loads_keep_both_children(two_copies: tuple[Path, Path]) -> None:
    """The second save finds the file changed by the first: it compares content
    (messages and all) and merges the children, as for any context."""
    with_catalog, _ = two_copies
    first, second = Store(with_catalog), Store(with_catalog)
    [summary] = first.sessions()
    one = first.load_session(summary.uuid)
    two = second.load_session(summary.uuid)
    for session, name in ((one, "fork-a"), (two, "fork-b")):
        parent = session.active_context
        child = parent.fork(range(50))
        child.id = parent.children[-1] = name
        session.add_context(child)
        (first if session is one else second).save_session(session)
    path = with_catalog / summary.path.relative_to(with_catalog) / one.context_files[one.active_context_id]
    on_disk = read_json(path)
    assert {"fork-a", "fork-b"} <= set(on_disk["children"])
    assert path.read_bytes().decode() == json.dumps(on_disk, indent=2)


def test_a_second_save_with_nothing_changed_writes_nothing(two_copies: tuple[Path, Path]) -> None:
    with_catalog, _ = two_copies
    store = Store(with_catalog)
    store.sessions()
    [summary] = store.sessions()
    session = store.load_session(summary.uuid)
    parent = session.active_context
    child = parent.fork(range(10))
    session.add_context(child)
    assert store.save_session(session)
    assert store.save_session(session) == []


def raw_hits(store: Store, query: str) -> list[tuple[str, int]]:
    catalog = store.catalog()
    assert catalog is not None
    catalog.refresh()
    return sorted((hit.context_id, hit.index) for hit in catalog.search(query))


def backlog(root: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(root / CATALOG_FILE) as db:
        return db.execute("SELECT dir, file FROM text_backlog").fetchall()


def test_a_long_forks_text_waits_for_the_next_search_which_finds_it(two_copies: tuple[Path, Path]) -> None:
    """The save leaves the fork's text to the search (trigram indexing is most of what
    indexing a message costs); the search fills it in first, and finds what a catalog
    built from scratch finds."""
    with_catalog, _ = two_copies
    store = Store(with_catalog)
    store.sessions()
    catalog = store.catalog()
    assert catalog is not None
    catalog.fill_text()  # the first listing's text, filled in behind it
    assert backlog(with_catalog) == []
    forked_and_saved(store, "long-fork", range(SPANNED_FROM + 10))
    assert [file for _, file in backlog(with_catalog)] == ["long-fork.json"]
    Store(with_catalog).sessions()  # a listing does not index it: it reads the same bytes
    assert [file for _, file in backlog(with_catalog)] == ["long-fork.json"]
    hits = raw_hits(store, "question 10")
    assert any(c == "long-fork" and i >= 1000 for c, i in hits), hits
    assert backlog(with_catalog) == []
    fresh = with_catalog.parent / "fresh"
    shutil.copytree(with_catalog, fresh, ignore=shutil.ignore_patterns(f"{CATALOG_FILE}*"))
    assert raw_hits(Store(fresh), "question 10") == hits


def test_a_fork_rewritten_before_the_search_is_indexed_again_not_from_the_backlog(
    two_copies: tuple[Path, Path],
) -> None:
    with_catalog, _ = two_copies
    store = Store(with_catalog)
    store.sessions()
    path, _ = forked_and_saved(store, "long-fork", range(SPANNED_FROM + 10))
    fork_file = path.parent / "long-fork.json"
    data = read_json(fork_file)
    at = max(i for i, m in enumerate(data["messages"]) if m["role"] == "user")
    before = data["messages"][at]["content"][0]["text"]
    data["messages"][at]["content"][0]["text"] = "rewritten by another writer"
    fork_file.write_text(json.dumps(data, indent=2))
    assert raw_hits(Store(with_catalog), "rewritten by another") == [("long-fork", at)]
    assert ("long-fork", at) not in raw_hits(Store(with_catalog), before)
    assert backlog(with_catalog) == []
