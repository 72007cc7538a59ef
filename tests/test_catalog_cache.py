"""The catalog is only ever a cache (issue 22, defects 2 to 4).

* A file rewritten in place with its size and modification time restored (``cp -p``,
  ``rsync --inplace``) is read again: the change time is part of its signature. A big
  context whose stored message spans no longer frame its messages is read from the file
  and indexed again, never reported broken.
* A damaged catalog (bytes flipped, cut, garbage, a table dropped or reshaped, an old
  schema, text that is not UTF-8), found when a store opens it or while it is in use, is
  rebuilt or bypassed: every answer is the one the files give, no command exits 3.
* Two processes building a new catalog at once never delete the files the other has
  open: the first build and every rebuild happen under a lock beside the catalog.

The ground truth is always the same store read without a catalog.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import multiprocessing
import os
import random
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import soap_core._catalog as catalog_module
from soap_core import Context, Message, Session, Store, TextPart, search_store
from soap_core._catalog import CATALOG_FILE, is_catalog_file
from soap_core._spans import SPANNED_FROM, message_spans
from soap_core._store import _signature_of
from tests.conftest import SOAP_FIXTURE, snapshot
from tests.test_catalog import answers, build_agents_store, full_scan

BIG = SPANNED_FROM + 200


@pytest.fixture(autouse=True)
def own_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A catalog that cannot live beside its store goes to the user's cache: this test's."""
    monkeypatch.setenv("SOAPWB_CACHE_DIR", str(tmp_path / "user-cache"))


def _say(role: str, text: str) -> Message:
    return Message(role, [TextPart(text)])


def _trust_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The catalog does not trust a signature taken within two seconds of the file's last
    change (``RACY_NS``): it reads such a file again at every refresh, which would hide a
    signature that misses an edit. A store's files are normally older than that; a test's
    cannot be made older (the change time cannot be set back), so the window is closed."""
    monkeypatch.setattr(catalog_module, "RACY_NS", 0)


def _rewrite_in_place(path: Path, new: bytes) -> None:
    """Write ``new`` (same size) into the same inode and restore the modification time,
    as ``cp -p`` or ``rsync --inplace`` leave a file; only the change time moves."""
    before = path.stat()
    assert len(new) == before.st_size and new != path.read_bytes()
    time.sleep(0.01)  # past one tick of a coarse file system clock
    with path.open("r+b") as handle:
        handle.write(new)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        before.st_size,
        before.st_mtime_ns,
        before.st_ino,
    )
    assert after.st_ctime_ns != before.st_ctime_ns


def _context_file(root: Path, context_id: str) -> Path:
    [path] = root.rglob(f"{context_id}.json")
    return path


def _big_session(root: Path) -> Session:
    context = Context.create(Message.system_prompt("You keep long conversations."))
    for n in range(BIG // 2):
        context.append(_say("user", f"question {n:05d} about the ledger"))
        context.append(_say("assistant", f"answer {n:05d} from the ledger"))
    session = Session.create("Long", context)
    Store(root).save_session(session)
    return session


def _shift_spans(raw: bytes) -> bytes:
    """The same file with message 1 one byte longer and message 2 one byte shorter: the
    size is unchanged, every byte span after message 1's start has moved."""
    data = json.loads(raw)
    messages = data["messages"]
    messages[1]["content"][0]["text"] += "!"
    messages[2]["content"][0]["text"] = messages[2]["content"][0]["text"][:-1]
    new = json.dumps(data, indent=2).encode()
    assert len(new) == len(raw)
    return new


def _loaded(root: Path, uuid: str, *, catalog: bool) -> dict[str, Any]:
    session = Store(root, use_catalog=catalog).load_session(uuid)
    return {
        cid: (context.to_dict(), context.total_token_count())
        for cid, context in sorted(session.contexts.items())
    }


def _cli(argv: list[str], monkeypatch: pytest.MonkeyPatch, *, catalog: bool = True) -> tuple[int, str, str]:
    from soapwb.cli import main

    out, err = io.StringIO(), io.StringIO()
    with monkeypatch.context() as patch:
        if not catalog:
            patch.setenv("SOAPWB_NO_CATALOG", "1")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    return code, out.getvalue(), err.getvalue()


# -- defect 2: an in-place rewrite moves the change time --------------------------------------


def test_search_finds_the_new_text_of_a_file_copied_over_with_cp_p(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _trust_at_once(monkeypatch)
    root = tmp_path / "store"
    context = Context.create(Message.system_prompt("sys"))
    context.append(_say("user", "alpha words to find"))
    Store(root).save_session(Session.create("Editor", context))
    path = _context_file(root, context.id)
    store = Store(root)
    assert [h.snippet for h in search_store(store, "alpha")] == ["alpha words to find"]

    edited = tmp_path / "edited.json"
    edited.write_bytes(path.read_bytes().replace(b"alpha words", b"omega words"))
    info = path.stat()
    os.utime(edited, ns=(info.st_atime_ns, info.st_mtime_ns))
    time.sleep(0.01)
    subprocess.run(["cp", "-p", str(edited), str(path)], check=True)  # in place, mtime kept
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (info.st_size, info.st_mtime_ns, info.st_ino)

    for reader in (store, Store(root)):  # the catalog kept open, and a new process's
        assert search_store(reader, "alpha") == []
        assert [h.snippet for h in search_store(reader, "omega")] == ["omega words to find"]


def test_a_file_rewritten_in_place_long_after_it_was_indexed_is_read_again_without_any_patch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same edit as ``cp -p`` makes, through ``soapwb search`` and with the catalog's
    real racy window: the store is indexed once its files have settled, then edited."""
    root = tmp_path / "store"
    context = Context.create(Message.system_prompt("sys"))
    context.append(_say("user", "alpha words to find"))
    Store(root).save_session(Session.create("Editor", context))
    path = _context_file(root, context.id)
    time.sleep(catalog_module.RACY_NS / 1e9 + 0.2)  # every file older than the window
    code, out, _err = _cli(["search", "alpha", "--store", str(root), "--json"], monkeypatch)
    assert code == 0 and len(json.loads(out)) == 1
    _rewrite_in_place(path, path.read_bytes().replace(b"alpha words", b"omega words"))
    code, out, _err = _cli(["search", "omega", "--store", str(root), "--json"], monkeypatch)
    assert code == 0 and [h["snippet"] for h in json.loads(out)] == ["omega words to find"]
    code, out, _err = _cli(["search", "alpha", "--store", str(root), "--json"], monkeypatch)
    assert code == 0 and json.loads(out) == []


def test_a_big_context_rewritten_in_place_loads_and_shows_as_the_file_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1,000+ messages: the catalog keeps each message's byte span. An in-place rewrite
    that moves them must not reuse the old spans ("not valid JSON" on an intact file)."""
    _trust_at_once(monkeypatch)
    root = tmp_path / "store"
    session = _big_session(root)
    Store(root).sessions()  # indexed, spans kept
    path = _context_file(root, session.active_context_id)
    _rewrite_in_place(path, _shift_spans(path.read_bytes()))

    assert _loaded(root, session.uuid, catalog=True) == _loaded(root, session.uuid, catalog=False)
    for command in (["show", session.uuid], ["ls"], ["search", "answer 00000"]):
        argv = [*command, "--store", str(root), "--json"]
        assert _cli(argv, monkeypatch) == _cli(argv, monkeypatch, catalog=False), command


def test_spans_the_catalog_vouches_for_that_no_longer_frame_the_messages_fall_back_to_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signature that cannot tell (a clock set back, a file system without change
    times): the catalog holds the rewritten file's own signature with the old spans. The
    messages come from the file, and the file is indexed again."""
    _trust_at_once(monkeypatch)
    root = tmp_path / "store"
    session = _big_session(root)
    store = Store(root)
    store.sessions()
    path = _context_file(root, session.active_context_id)
    _rewrite_in_place(path, _shift_spans(path.read_bytes()))
    catalog = store.catalog()
    assert catalog is not None
    with catalog._lock:  # the collision: the catalog vouches for the file as it now is
        catalog._db.execute("UPDATE context_files SET sig=? WHERE file=?", (_signature_of(path), path.name))
    indexed = catalog.indexed(path.parent, path.name, _signature_of(path) or "")
    assert indexed is not None and indexed[1] is not None, "the stale spans are vouched for"

    truth = _loaded(root, session.uuid, catalog=False)
    assert _loaded(root, session.uuid, catalog=True) == truth
    code, out, err = _cli(["show", session.uuid, "--store", str(root), "--json"], monkeypatch)
    assert (code, err) == (0, "")
    assert json.loads(out) == json.loads(
        _cli(["show", session.uuid, "--store", str(root), "--json"], monkeypatch, catalog=False)[1]
    )
    again = Store(root)
    again.sessions()
    reindexed = again.catalog().indexed(path.parent, path.name, _signature_of(path) or "")  # type: ignore[union-attr]
    assert reindexed is None or list(reindexed[1] or []) == list(
        message_spans(path.read_bytes(), BIG + 1) or []
    )


# -- defect 3: a damaged catalog is rebuilt or bypassed ----------------------------------------

DAMAGE = [
    "flipped",
    "truncated",
    "garbage",
    "emptied",
    "dropped-messages",
    "dropped-sessions",
    "reshaped-sessions",
    "old-schema",
    "not-utf8",
]


def _damage(db: Path, kind: str, rng: random.Random) -> None:
    """What a disk, a hand or another program does to the catalog's database file. The
    catalog is closed (no -wal left): each damage is to the one file."""
    for extra in db.parent.glob(f"{db.name}-*"):
        extra.unlink()
    raw = bytearray(db.read_bytes())
    if kind == "flipped":  # 200 bytes, as the tester did
        for _ in range(200):
            at = rng.randrange(len(raw))
            raw[at] ^= 1 << rng.randrange(8)
        db.write_bytes(bytes(raw))
    elif kind == "truncated":
        db.write_bytes(bytes(raw[: rng.randrange(1, len(raw))]))
    elif kind == "garbage":
        db.write_bytes(rng.randbytes(len(raw)))
    elif kind == "emptied":
        db.write_bytes(b"")
    else:
        statements = {
            "dropped-messages": "DROP TABLE messages",
            "dropped-sessions": "DROP TABLE sessions",
            "reshaped-sessions": "DROP TABLE sessions; CREATE TABLE sessions(dir TEXT, x)",
            "old-schema": "UPDATE meta SET value = '1' WHERE key = 'schema'",
            "not-utf8": "UPDATE sessions SET role = CAST(X'C3FF28' AS TEXT)",
        }
        with contextlib.closing(sqlite3.connect(db)) as other:
            other.executescript(statements[kind])
            other.commit()


def _closed_catalog(root: Path) -> Path:
    gc.collect()  # no catalog of an earlier Store still open in this process
    store = Store(root)
    store.sessions()
    catalog = store.catalog()
    assert catalog is not None
    catalog.close()
    return catalog.path


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_damaged_catalog_answers_what_the_files_say(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "store"
    build_agents_store(root, 8, seed=22)
    truth = full_scan(root)
    before = snapshot(root)
    for seed in range(6 if kind in ("flipped", "truncated", "garbage") else 1):
        db = _closed_catalog(root)
        _damage(db, kind, random.Random(seed))
        assert answers(Store(root)) == truth, f"{kind}, seed {seed}"
        assert answers(Store(root)) == truth, f"{kind}, seed {seed}: the catalog as rebuilt"
    assert snapshot(root) == before, "nothing of the store was written"


@pytest.mark.parametrize("kind", DAMAGE)
def test_soapwb_on_a_damaged_catalog_prints_what_it_prints_without_one(
    store_copy: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    uuid = json.loads(next(store_copy.rglob("session.json")).read_text())["uuid"]
    commands = [["ls"], ["search", "hello"], ["show", uuid], ["tree", uuid]]
    expected = [
        _cli([*c, "--store", str(store_copy), "--json"], monkeypatch, catalog=False) for c in commands
    ]
    for command, want in zip(commands, expected, strict=True):
        _damage(_closed_catalog(store_copy), kind, random.Random(3))
        assert _cli([*command, "--store", str(store_copy), "--json"], monkeypatch) == want, command


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_catalog_damaged_while_a_store_has_it_open_answers_what_the_files_say(
    tmp_path: Path, kind: str
) -> None:
    """The damage lands between two questions of one open store (its catalog open): the
    next question, whichever it is, still gets the files' answer, and saving through the
    store still works and is seen."""
    root = tmp_path / "store"
    build_agents_store(root, 6, seed=23)
    store = Store(root)
    assert answers(store) == full_scan(root)
    catalog = store.catalog()
    assert catalog is not None
    _damage_open(catalog.path, kind)
    assert [str(r.dir) for r in catalog.session_rows()] == [str(s.path) for s in store.scan_sessions()]
    uuid = store.sessions()[0].uuid
    truth = _loaded(root, uuid, catalog=False)
    assert _loaded(root, uuid, catalog=True) == truth
    session = store.load_session(uuid)
    session.active_context.append(_say("user", "written after the damage"))
    store.save_session(session)
    assert [h.session for h in search_store(store, "written after the damage")] == [session.uuid]
    assert answers(store) == full_scan(root)


def _damage_open(db: Path, kind: str) -> None:
    """The damage of :func:`_damage`, done by another program while this process has the
    catalog open (its -wal and -shm stay: the bytes are changed in place)."""
    if kind in ("flipped", "truncated", "garbage", "emptied"):
        with contextlib.closing(sqlite3.connect(db)) as other:  # bring the -wal into the file first
            other.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        raw = bytearray(db.read_bytes())
        rng = random.Random(5)
        if kind == "flipped":
            for _ in range(200):
                raw[rng.randrange(len(raw))] ^= 0xFF
            new = bytes(raw)
        elif kind == "truncated":
            new = bytes(raw[: len(raw) // 2])
        else:
            new = rng.randbytes(len(raw)) if kind == "garbage" else b""
        with db.open("r+b") as handle:  # the same inode the open catalog reads
            handle.write(new)
            handle.truncate(len(new))
        return
    _damage_sql(db, kind)


def _damage_sql(db: Path, kind: str) -> None:
    statements = {
        "dropped-messages": "DROP TABLE messages",
        "dropped-sessions": "DROP TABLE sessions",
        "reshaped-sessions": "DROP TABLE sessions; CREATE TABLE sessions(dir TEXT, x)",
        "old-schema": "UPDATE meta SET value = '1' WHERE key = 'schema'",
        "not-utf8": "UPDATE sessions SET role = CAST(X'C3FF28' AS TEXT)",
    }
    with contextlib.closing(sqlite3.connect(db)) as other:
        other.executescript(statements[kind])
        other.commit()


def test_each_question_of_an_open_catalog_survives_a_table_dropped_under_it(tmp_path: Path) -> None:
    """Not only at open and not only in a refresh: a query that finds its table gone
    (``session_rows``, ``search``, ``indexed``, ``find_dirs``, ``note_saved``) answers
    from a rebuilt catalog."""
    root = tmp_path / "store"
    build_agents_store(root, 5, seed=24)
    store = Store(root)
    summaries = store.sessions()
    catalog = store.catalog()
    assert catalog is not None
    target = summaries[0]
    path = next(target.path.glob("*.json"))
    questions: dict[str, Any] = {
        "session_rows": lambda: [str(r.dir) for r in catalog.session_rows()],
        "search": lambda: len(list(catalog.search("alpha"))),
        "indexed": lambda: catalog.indexed(path.parent, path.name, _signature_of(path) or "") is not None,
        "find_dirs": lambda: catalog.find_dirs(target.uuid),
        "thread_sessions": lambda: catalog.thread_sessions("Planner", "thread-0", "x"),
        "state": lambda: bool(catalog.state),
    }
    healthy = {name: question() for name, question in questions.items()}
    for table in ("messages", "sessions", "context_files", "meta"):
        for name, question in questions.items():
            _drop(catalog.path, table)
            got = question()
            if name not in ("indexed", "state"):  # a rebuilt catalog may not have read it yet
                assert got == healthy[name], (table, name)
    session = store.load_session(target.uuid)
    session.active_context.append(_say("user", "noted after the drop"))
    _drop(catalog.path, "context_files")
    store.save_session(session)  # note_saved finds its table gone
    assert [h.session for h in search_store(store, "noted after the drop")] == [session.uuid]


def _drop(db: Path, table: str) -> None:
    with contextlib.closing(sqlite3.connect(db)) as other:
        other.execute(f"DROP TABLE IF EXISTS {table}")
        other.commit()


def test_a_damaged_catalog_that_cannot_be_rebuilt_where_it_lies_is_bypassed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Garbage in the catalog and a folder where nothing can be deleted or created: the
    store answers from the files (no file of it written), and says nothing is wrong."""
    from tests.test_catalog import unwritable

    root = tmp_path / "store"
    build_agents_store(root, 4, seed=25)
    truth = full_scan(root)
    db = _closed_catalog(root)
    _damage(db, "garbage", random.Random(1))
    monkeypatch.setenv("SOAPWB_CACHE_DIR", str(tmp_path / "no-cache" / "x"))
    (tmp_path / "no-cache").mkdir()
    with unwritable(root), unwritable(tmp_path / "no-cache"):
        assert answers(Store(root)) == truth
        code, _out, err = _cli(["ls", "--store", str(root), "--json"], monkeypatch)
        assert (code, err) == (0, "")


# -- defect 4: two processes build a new catalog at once ---------------------------------------


def _deleted_catalog_files_open(root: Path) -> list[str]:
    """Catalog files of the store at ``root`` this process has open that were deleted
    under it."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(f"{root}/{CATALOG_FILE}") and target.endswith("(deleted)"):
                found.append(target)
    return found


def _racer(root: Path, barrier: Any, results: Any, delay: float) -> None:
    try:
        barrier.wait()
        time.sleep(delay)
        store = Store(root)
        listing = [(s.role, s.uuid, s.error) for s in store.sessions()]
        hits = [h.as_dict() for h in search_store(store, "hello")]
        results.put(("ok", listing, hits, _deleted_catalog_files_open(root)))
    except BaseException as exc:  # reported to the test, which fails on it
        results.put(("error", f"{type(exc).__name__}: {exc}", None, None))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to see deleted files held open")
def test_two_processes_building_a_new_catalog_at_once_never_delete_each_others_files(tmp_path: Path) -> None:
    from soap_core._tokens import count_text

    count_text("load the encoding before forking")
    truth_store = Store(SOAP_FIXTURE, use_catalog=False)
    truth = (
        [(s.role, s.uuid, s.error) for s in truth_store.sessions()],
        [h.as_dict() for h in search_store(truth_store, "hello")],
    )
    fork = multiprocessing.get_context("fork")
    rng = random.Random(4)
    problems = []
    for round_ in range(20):
        root = tmp_path / f"round-{round_}"
        shutil.copytree(SOAP_FIXTURE, root, ignore=shutil.ignore_patterns(f"{CATALOG_FILE}*"))
        barrier, results = fork.Barrier(2), fork.Queue()
        racers = [
            fork.Process(target=_racer, args=(root, barrier, results, rng.random() * 0.002)) for _ in range(2)
        ]
        for racer in racers:
            racer.start()
        outcomes = [results.get(timeout=60) for _ in racers]
        for racer in racers:
            racer.join(timeout=60)
        for status, listing, hits, deleted in outcomes:
            if status != "ok" or (listing, hits) != truth or deleted:
                problems.append((round_, status, listing if status != "ok" else deleted))
        with contextlib.closing(sqlite3.connect(root / CATALOG_FILE)) as db:
            assert db.execute("PRAGMA quick_check").fetchone() == ("ok",), round_
        assert answers(Store(root)) == full_scan(root), round_
    assert problems == []


def test_the_catalogs_lock_file_is_never_followed_through_a_link(
    store_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link planted where the lock file goes is not written through (the catalog goes
    to the user's cache instead), like a link planted where the database goes."""
    outside = tmp_path / "outside"
    outside.write_bytes(b"precious")
    (store_copy / f"{CATALOG_FILE}.lock").symlink_to(outside)
    assert answers(Store(store_copy)) == full_scan(store_copy)
    assert outside.read_bytes() == b"precious"
    assert not [p for p in store_copy.iterdir() if is_catalog_file(p) and not p.is_symlink()]


# -- the fuzzer's contract covers the catalog ----------------------------------------------


@pytest.fixture(scope="module")
def corpus(workbench_store: Path) -> Any:
    from fuzz import build_corpus

    return build_corpus(workbench=workbench_store)


def test_the_fuzzer_damages_each_store_seeds_catalog_and_every_answer_is_the_files(
    corpus: Any, tmp_path: Path
) -> None:
    from fuzz._runner import run

    report = run(
        corpus,
        120,
        workers=1,
        seed=22,
        engine="random",
        out=tmp_path,
        in_process=True,
        kinds=frozenset({"catalog"}),
    )
    assert report.cases == 120
    assert not report.failures, "\n".join(report.lines())
    assert set(report.by_seed) == {s.name for s in corpus.seeds if s.kind == "store"}


@pytest.mark.parametrize("planted", ["answers one token off", "no recovery from damage"])
def test_the_fuzzer_reports_a_catalog_that_breaks_its_contract(
    corpus: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    """The catalog cases have teeth: a catalog whose answers differ from the files', or
    that lets a damaged database's error out, is reported and saved for replay."""
    from fuzz._corpus import Corpus
    from fuzz._runner import run
    from soap_core._catalog import Catalog, SessionRow

    if planted == "answers one token off":
        real_row = Catalog._row

        def off_by_one(self: Catalog, *row: Any) -> SessionRow:
            found = real_row(self, *row)
            tokens = None if found.tokens is None else found.tokens + 1
            return found._replace(tokens=tokens)

        monkeypatch.setattr(Catalog, "_row", off_by_one)
    else:
        monkeypatch.setattr(catalog_module, "_failure_kind", lambda exc: None)
    only = Corpus([corpus.named("hellopete")])
    cases = 40 if planted == "answers one token off" else 120  # needs a forged stamp, then an error in use
    report = run(
        only,
        cases,
        workers=1,
        seed=3,
        engine="random",
        out=tmp_path,
        in_process=True,
        kinds=frozenset({"catalog"}),
    )
    assert report.failures, f"{planted}: not found in {cases} catalog cases"
    saved = json.loads((Path(report.failures[0].saved) / "case.json").read_text())
    assert (
        saved["mode"].startswith("catalog-")
        and (Path(report.failures[0].saved) / "files" / saved["file"]).is_file()
    )
