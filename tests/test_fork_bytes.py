"""A fork of a long context read from its spans is made without building a message:
its file is the parent's messages' bytes with each one's ``_sequence_number`` changed
(soap_core._spans.forked_messages), and the catalog copies the parent's rows for it.
The ground truth is the same fork made in a store without a catalog, whose messages are
built, copied and dumped whole as peteos does: every file must come out byte for byte
the same, and the fork's rows must be what a catalog built from scratch holds."""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from soap_core import Context, Message, Session, Store
from soap_core._catalog import CATALOG_FILE
from soap_core._parts import TextPart, ToolPart, ToolResultPart, ToolUsePart
from soap_core._spans import SPANNED_FROM
from tests.test_page_context_long import written_a_minute_ago
from tests.test_save_splice import with_and_without_catalog

MESSAGES = SPANNED_FROM + 400


def runner_context(messages: int, seed: int = 3) -> Context:
    """A long context as the sOAP runner lays one out: each tool result at an anchor of
    its own (``append_tool_results``), so a fork renumbers its messages (its sequence
    numbers are not the parent's)."""
    rng = random.Random(seed)
    tools = [ToolPart("lookup", "Look a thing up.", {"type": "object", "properties": {}})]
    context = Context.create("You answer questions, looking things up.", tools)
    while context.message_count < messages:
        i = context.message_count
        context.append(Message.create("user", [TextPart(f"question {i}: " + "word " * rng.randint(2, 9))]))
        if rng.random() < 0.6:
            call = Message.create("assistant", [ToolUsePart(f"call_{i}", "lookup", f'{{"q": {i}}}')])
            context.append(call)
            context.append_tool_results(call, [ToolResultPart(f"call_{i}", "found " * rng.randint(1, 5))])
        context.append(Message.create("assistant", [TextPart("answer é " * rng.randint(1, 6))]))
    return context


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fork-bytes") / "store"
    Store(root).save_session(Session.create("Runner", runner_context(MESSAGES)))
    written_a_minute_ago(root)
    Store(root).sessions()  # the catalog indexes it: the long file gets its spans
    written_a_minute_ago(root)
    return root


@pytest.fixture
def two_copies(original: Path, tmp_path: Path) -> tuple[Path, Path]:
    return with_and_without_catalog(original, tmp_path)


def fork_and_save(
    store: Store, selected: list[int], name: str = "the-fork", *, from_bytes: bool = True
) -> tuple[Session, Context]:
    """Fork the active context of the store's one session and save it; a store with its
    catalog makes the fork from the parent's bytes (asserted, unless not ``from_bytes``),
    one without builds it."""
    [summary] = store.sessions()
    session = store.load_session(summary.uuid)
    parent = session.active_context
    child = parent.fork(selected)
    made_from_bytes = not child.messages_built and child.fork_source is not None
    assert made_from_bytes == (from_bytes and not parent.messages_built), (
        f"made from bytes: {made_from_bytes}"
    )
    child.id = parent.children[-1] = name
    session.add_context(child)
    session.set_active_context(child)
    store.save_session(session)
    return session, child


def assert_same_files(one: Session, other: Session) -> None:
    assert one.directory is not None and other.directory is not None
    names = sorted(p.name for p in other.directory.iterdir() if p.is_file())
    assert names == sorted(p.name for p in one.directory.iterdir() if p.is_file())
    for name in names:
        assert (one.directory / name).read_bytes() == (other.directory / name).read_bytes(), name


SELECTIONS = {
    "a prefix": list(range(700)),
    "all of it": list(range(MESSAGES)),
    "without the system prompt": list(range(5, 900)),
    "first and last": [0, 1, *range(MESSAGES - 300, MESSAGES)],
    "one message": [700],
}


@pytest.mark.parametrize("what", list(SELECTIONS))
def test_the_fork_is_written_from_the_parents_bytes_as_a_whole_dump_writes_it(
    what: str, two_copies: tuple[Path, Path]
) -> None:
    with_catalog, without = two_copies
    selected = SELECTIONS[what]
    ours, child = fork_and_save(Store(with_catalog), selected)
    truth, built = fork_and_save(Store(without, use_catalog=False), selected)
    assert built.fork_source is None
    assert_same_files(ours, truth)
    assert (child.system_prompt_message_id, child.tool_definitions_message_id) == (
        built.system_prompt_message_id,
        built.tool_definitions_message_id,
    )
    renumbered = [m.sequence_number for m in built.messages]
    parents = [truth.contexts[built.origin_context_id or ""].messages[i].sequence_number for i in selected]
    if len(selected) > 1:
        assert renumbered != parents, "the fork kept every number: the test shows nothing"
    assert [child.message_at(i).to_dict() for i in range(len(selected))] == [
        m.to_dict() for m in built.messages
    ]


def catalog_rows(root: Path, file: str) -> tuple[list[tuple[object, ...]], tuple[object, ...]]:
    with sqlite3.connect(root / CATALOG_FILE) as db:
        messages = db.execute(
            "SELECT idx, id, role, tokens, cached_tokens, created, chars FROM messages WHERE file=? ORDER BY idx",
            (file,),
        ).fetchall()
        row = db.execute(
            "SELECT id, origin_context_id, children, messages, tokens, first_ts, last_ts, counts, error, digest, spans, "
            "facts FROM context_files WHERE file=?",
            (file,),
        ).fetchone()
    return messages, row


@pytest.mark.parametrize("count", [700, SPANNED_FROM + 100, MESSAGES])
def test_the_forks_rows_are_copied_from_the_parents_as_a_fresh_index_has_them(
    count: int, two_copies: tuple[Path, Path], tmp_path: Path
) -> None:
    with_catalog, _ = two_copies
    store = Store(with_catalog)
    _session, child = fork_and_save(store, list(range(count)))
    assert not child.messages_built, "the catalog built the fork's messages to index them"
    copied = catalog_rows(with_catalog, "the-fork.json")
    assert len(copied[0]) == count
    fresh = tmp_path / "fresh"
    shutil.copytree(with_catalog, fresh, ignore=shutil.ignore_patterns(f"{CATALOG_FILE}*"))
    Store(fresh).sessions()
    assert catalog_rows(fresh, "the-fork.json") == copied, "the copied rows differ from a fresh index's"
    assert (copied[1][10] is not None) == (count >= SPANNED_FROM), "spans as a refresh keeps them"


def test_a_listing_after_the_save_indexes_nothing_again(two_copies: tuple[Path, Path]) -> None:
    """The files a save wrote are read once more by the next listing (their signatures
    are too recent to trust) and found to be the bytes whose digest the save noted."""
    with_catalog, _ = two_copies
    fork_and_save(Store(with_catalog), list(range(SPANNED_FROM + 50)))
    with sqlite3.connect(with_catalog / CATALOG_FILE) as db:
        before = db.execute("SELECT rowid, file, idx FROM messages ORDER BY rowid").fetchall()
    for path in with_catalog.rglob("*.json"):  # settled: old enough to trust (the catalog's files untouched)
        os.utime(path, (time.time() - 60, time.time() - 60))
    Store(with_catalog).sessions()
    with sqlite3.connect(with_catalog / CATALOG_FILE) as db:
        assert db.execute("SELECT rowid, file, idx FROM messages ORDER BY rowid").fetchall() == before
        assert not db.execute("SELECT 1 FROM context_files WHERE sig LIKE 'racy:%'").fetchall()


def test_a_fork_of_the_fork_is_made_from_bytes_too(two_copies: tuple[Path, Path]) -> None:
    with_catalog, without = two_copies
    results = []
    for root, catalog in ((with_catalog, True), (without, False)):
        store = Store(root, use_catalog=catalog)
        session, child = fork_and_save(store, list(range(MESSAGES - 10)))
        grandchild = child.fork(range(3, SPANNED_FROM + 20))
        grandchild.id = child.children[-1] = "grandchild"
        session.add_context(grandchild)
        store.save_session(session)
        results.append((session, grandchild))
    (ours, fast), (truth, _) = results
    assert fast.fork_source is not None, "the fork of the fork was built from its messages"
    assert_same_files(ours, truth)


def test_a_message_changed_before_the_fork_is_carried_into_it(two_copies: tuple[Path, Path]) -> None:
    """A message handed out and changed (message_at) is copied as changed, as a built
    context would copy it: the fork is then built, not made from the file's bytes."""
    with_catalog, without = two_copies
    results = []
    for root, catalog in ((with_catalog, True), (without, False)):
        store = Store(root, use_catalog=catalog)
        [summary] = store.sessions()
        session = store.load_session(summary.uuid)
        parent = session.active_context
        parent.message_at(10).content = [TextPart("changed before the fork")]
        child = parent.fork(range(800))
        child.id = parent.children[-1] = "the-fork"
        session.add_context(child)
        store.save_session(session)
        results.append((session, child))
    (ours, child), (truth, _) = results
    assert child.fork_source is None, "a changed message was not seen: the fork was made from the bytes"
    assert "changed before the fork" in json.dumps(child.message_at(10).to_dict())
    assert_same_files(ours, truth)


def test_a_message_without_a_sequence_number_builds_the_fork(two_copies: tuple[Path, Path]) -> None:
    """Its copy gets the key where a new peteos message has it, not where the file had
    none: the bytes cannot say that, so the fork is built and dumped."""
    with_catalog, without = two_copies
    for root in (with_catalog, without):
        [file] = [p for p in root.rglob("*.json") if p.stat().st_size > 100_000]
        data = json.loads(file.read_bytes())
        del data["messages"][20]["_sequence_number"]
        file.write_text(json.dumps(data, indent=2))
    written_a_minute_ago(with_catalog)
    written_a_minute_ago(without)
    Store(with_catalog).sessions()
    written_a_minute_ago(with_catalog)
    ours, _ = fork_and_save(Store(with_catalog), list(range(400)), from_bytes=False)
    truth, _ = fork_and_save(Store(without, use_catalog=False), list(range(400)))
    assert_same_files(ours, truth)
