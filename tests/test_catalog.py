"""The catalog answers exactly what a full scan of the files answers: on stores of both
layouts with forks, broken files and odd names, after files change underneath it in
place (as peteos writes them), and after it is deleted or damaged. Warm loads take the
token counts it holds; a lookup by uuid reads that session's files only."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import soap_core._catalog as catalog_module
import soap_core._message as message_module
import soap_core._store as store_module
from soap_core import (
    Context,
    FormatError,
    Message,
    Session,
    Store,
    TextPart,
    search_store,
    session_overview,
    session_overviews,
)
from soap_core._catalog import CATALOG_FILE, Catalog, cache_catalog_path, is_catalog_file

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "the",
    "model",
    "reads",
    "every",
    "message",
    "Zürich",
    "東京",
    "emoji",
    "🙂",
    "tool",
    "result",
]
QUERIES = [
    "alpha",
    "GAMMA",
    "zürich",
    "東京",
    "🙂",
    "ta",
    "e",
    "no such words here",
    "tool result",
    '"quoted',
]


def _say(role: str, text: str) -> Message:
    return Message(role, [TextPart(text)])


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30)))


def _session(rng: random.Random, role: str, thread: str | None) -> Session:
    context = Context.create(Message.system_prompt(f"You are {role}."))
    for _ in range(rng.randint(0, 8)):
        context.append(_say("user", _text(rng)))
        context.append(_say("assistant", _text(rng)))
    session = Session.create(role, context, thread_id=thread)
    if rng.random() < 0.5 and len(context.messages) > 2:
        fork = context.fork(range(len(context.messages) - 1))
        session.add_context(fork)
        if rng.random() < 0.5:
            session.active_context_id = fork.id
    return session


def build_agents_store(root: Path, sessions: int, seed: int) -> None:
    rng = random.Random(seed)
    store = Store(root, use_catalog=False)
    for n in range(sessions):
        role = rng.choice(["Planner", "Coder", "Critic"])
        store.save_session(_session(rng, role, f"thread-{n % 4}"))


def build_sessions_store(root: Path, sessions: int, seed: int) -> None:
    """A peteos 0.6 layout: ``sessions/`` and instance files that name their roles."""
    rng = random.Random(seed)
    store = Store(root, use_catalog=False)
    claims: dict[str, dict[str, str]] = {"alice": {}, "bob": {}}
    for n in range(sessions):
        session = _session(rng, "Ignored", None)
        session.directory = root / "sessions" / session.uuid
        store.save_session(session)
        if n % 3:
            claims["alice" if n % 2 else "bob"][f"t{n}"] = session.uuid
    for name, store_map in claims.items():
        folder = root / "instances" / name
        folder.mkdir(parents=True)
        qualname = "mod.Alice" if name == "alice" else "Bob"
        data = {"class": {"qualname": qualname}, "thread_store": store_map}
        (folder / "agentic_object.json").write_text(json.dumps(data, indent=2))


def answers(store: Store) -> dict[str, Any]:
    """Everything the catalog serves, as plain data."""
    summaries = store.sessions()
    refs = [s.uuid for s in summaries] + [s.path.name[:12] for s in summaries[:3]] + ["2", "nope"]
    found: dict[str, Any] = {}
    for ref in refs:
        try:
            found[ref] = str(store.find(ref).path)
        except Exception as exc:
            found[ref] = f"{type(exc).__name__}: {exc}"
    return {
        "sessions": [(s.role, s.uuid, str(s.path), s.layout, s.instance, s.error) for s in summaries],
        "overviews": [session_overview(store, s).as_dict() for s in summaries],
        "listing": [o.as_dict() for o in session_overviews(store)],  # from the catalog's rows
        "search": {q: [h.as_dict() for h in search_store(store, q)] for q in QUERIES},
        "find": found,
    }


def full_scan(root: Path) -> dict[str, Any]:
    return answers(Store(root, use_catalog=False))


def assert_catalog_agrees(root: Path) -> None:
    expected = full_scan(root)
    assert answers(Store(root)) == expected, "the catalog, updated incrementally"
    for path in root.glob(f"{CATALOG_FILE}*"):
        path.unlink()
    assert answers(Store(root)) == expected, "the catalog, rebuilt from the files"


def _context_files(root: Path) -> list[Path]:
    return sorted(
        p
        for p in root.rglob("*.json")
        if p.name not in ("session.json", "agentic_object.json") and "instances" not in p.parts
    )


def mutate(root: Path, rng: random.Random) -> str:
    """One change of the kind a store sees: peteos appending in place, a hand edit, a
    crash leftover, a new or vanished session, a changed instance claim."""
    kind = rng.choice(["append", "edit", "truncate", "delete", "new", "remove", "active", "claims", "rename"])
    files = _context_files(root)
    sessions = sorted(p.parent for p in root.rglob("session.json"))
    if kind == "append" and files:
        path = rng.choice(files)
        try:
            data = json.loads(path.read_text())
            data["messages"].append(_say("user", _text(rng)).to_dict())
        except (ValueError, KeyError, AttributeError):
            return "append skipped (broken file)"
        path.write_text(json.dumps(data, indent=2))  # in place: the folder's mtime stays
    elif kind == "edit" and files:
        path = rng.choice(files)
        path.write_text(path.read_text().replace("alpha", "omega"))
    elif kind == "truncate" and files:
        path = rng.choice(files)
        path.write_bytes(path.read_bytes()[: rng.randint(0, 40)])
    elif kind == "delete" and files:
        rng.choice(files).unlink()
    elif kind == "new":
        store = Store(root, use_catalog=False)
        store.save_session(_session(rng, "Newcomer", "thread-new"))
    elif kind == "remove" and sessions:
        shutil.rmtree(rng.choice(sessions))
    elif kind == "active" and sessions:
        path = rng.choice(sessions) / "session.json"
        data = json.loads(path.read_text()) if path.read_text().strip().startswith("{") else {}
        data["active_context_id"] = rng.choice(["missing-id", None])
        path.write_text(json.dumps(data, indent=2))
    elif kind == "claims" and (root / "instances").is_dir():
        path = root / "instances" / "alice" / "agentic_object.json"
        data = json.loads(path.read_text())
        data["thread_store"] = {k: v for k, v in list(data["thread_store"].items())[1:]}
        path.write_text(json.dumps(data, indent=2))
    elif kind == "rename" and files:  # a context file keeps its id under a dated name
        path = rng.choice(files)
        path.rename(path.with_name(f"20250101-{path.name}"))
    return kind


@pytest.mark.parametrize("layout", ["agents", "sessions"])
def test_the_catalog_equals_a_full_scan_as_files_change_underneath(tmp_path: Path, layout: str) -> None:
    root = tmp_path / "store"
    (build_agents_store if layout == "agents" else build_sessions_store)(root, 12, seed=3)
    store = Store(root)
    assert answers(store) == full_scan(root)
    rng = random.Random(11)
    _age(root, only_recent=True)
    for step in range(16):
        kind = mutate(root, rng)
        if step % 2:  # half the steps go through signatures, half through the racy rule
            _age(root, only_recent=True)
        expected = full_scan(root)
        assert answers(store) == expected, f"step {step}: after {kind}, one catalog kept open"
        assert answers(Store(root)) == expected, f"step {step}: after {kind}, a new process"
        catalog_module._LISTINGS.clear()  # as a new process: the listing the catalog keeps
        assert answers(Store(root)) == expected, f"step {step}: after {kind}, the kept listing"
    assert_catalog_agrees(root)


def test_the_catalog_equals_a_full_scan_on_the_fixture_store(store_copy: Path) -> None:
    assert_catalog_agrees(store_copy)


def test_deleting_or_damaging_the_catalog_loses_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    build_agents_store(root, 6, seed=5)
    expected = full_scan(root)
    assert answers(Store(root)) == expected
    catalog = root / CATALOG_FILE
    assert catalog.is_file()
    for extra in root.glob(f"{CATALOG_FILE}-*"):
        extra.unlink()
    catalog.write_bytes(b"this is not a database" * 100)
    assert answers(Store(root)) == expected
    catalog.unlink()
    assert answers(Store(root)) == expected


def _age(root: Path, seconds: int = 60, *, only_recent: bool = False) -> None:
    """Date files back, as in a store written a while ago (a file written within the
    file system's clock tick is re-read until it is older: see ``RACY_NS``)."""
    now = time.time_ns()
    for path in root.rglob("*"):
        info = path.stat()
        if not only_recent or now - info.st_mtime_ns < 10 * 1_000_000_000:
            os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns - seconds * 1_000_000_000))


def _encodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = message_module.count_text

    def counting(text: str, encoding: str = "cl100k_base") -> int:
        seen.append(text)
        return real(text, encoding)

    monkeypatch.setattr(message_module, "count_text", counting)
    monkeypatch.setattr(catalog_module, "count_text", counting)
    return seen


def test_warm_token_counts_encode_nothing_and_an_edit_only_its_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    build_agents_store(root, 4, seed=8)
    _age(root)
    Store(root).sessions()  # cold: the catalog counts every message once
    encodes = _encodes(monkeypatch)
    fresh = Store(root)
    totals = {s.uuid: fresh.load_session(s.uuid, require_active=False) for s in fresh.sessions()}
    tokens = {u: [c.total_token_count() for c in s.contexts.values()] for u, s in totals.items()}
    assert encodes == [], "a warm listing and load encode nothing"
    assert tokens == {
        u: [c.total_token_count() for c in s.contexts.values()]
        for u, s in (
            (u, Store(root, use_catalog=False).load_session(u, require_active=False)) for u in totals
        )
    }
    encodes.clear()
    path = next(p for p in _context_files(root) if "alpha" in p.read_text())
    data = json.loads(path.read_text())
    target = next(m for m in data["messages"] if "alpha" in json.dumps(m))
    target["content"][0]["text"] += " and one more word"
    path.write_text(json.dumps(data, indent=2))
    Store(root).sessions()
    assert len(encodes) == 1 and "one more word" in encodes[0], "only the edited message is encoded again"


def test_a_lookup_by_uuid_reads_only_that_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "store"
    build_agents_store(root, 30, seed=2)
    store = Store(root)
    target = store.sessions()[17]
    read: list[Path] = []
    real_read_json = store_module.read_json

    def recording(path: Path) -> Any:
        read.append(path)
        return real_read_json(path)

    monkeypatch.setattr(store_module, "read_json", recording)
    monkeypatch.setattr(catalog_module, "read_json", recording)
    monkeypatch.setattr(Catalog, "refresh", lambda self: pytest.fail("a uuid lookup walked the store"))
    session = Store(root).load_session(target.uuid)
    assert session.uuid == target.uuid
    assert read and {p.parent for p in read} == {target.path}


def test_a_save_writes_and_indexes_only_what_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "store"
    store = Store(root)
    context = Context.create(Message.system_prompt("sys"))
    context.append(_say("user", "first"))
    session = Session.create("Saver", context)
    for n in range(5):
        session.add_context(context.fork(range(len(context.messages)))).append(_say("user", f"fork {n}"))
    store.save_session(session)
    loaded = Store(root).load_session(session.uuid)
    dumped: list[Any] = []
    real_dump = store_module.write_json_atomic

    def recording(path: Path, value: Any, before_write: Any = None) -> bool:
        dumped.append(path.name)
        return real_dump(path, value, before_write)

    monkeypatch.setattr(store_module, "write_json_atomic", recording)
    loaded.active_context.append(_say("user", "second"))
    written = Store(root).save_session(loaded)
    assert [p.name for p in written] == [f"{loaded.active_context_id}.json"]
    assert dumped == [f"{loaded.active_context_id}.json"], (
        "the five unchanged forks and the unchanged session.json are skipped"
    )
    assert [h.context_id for h in search_store(Store(root), "second")] == [loaded.active_context_id]


def test_a_checked_file_builds_its_messages_on_first_use_and_a_save_keeps_every_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A context file the catalog indexed at the same signature is not checked again at
    load: its messages are built when first used. What it is written as, and which
    changes a save sees, are the same as for a context built at load."""
    root = tmp_path / "store"
    context = Context.create(Message.system_prompt("sys"))
    context.append(Message.create("user", [TextPart("first")], metadata={"tag": "a"}))
    session = Session.create("Lazy", context)
    forks = [session.add_context(context.fork(range(len(context.messages)))) for _ in range(3)]
    Store(root).save_session(session)
    _age(root)
    Store(root).sessions()  # indexed, and settled: its signatures are trusted
    eager = Store(root, use_catalog=False).load_session(session.uuid)
    loaded = Store(root).load_session(session.uuid)
    assert not any(c.messages_built for c in loaded.contexts.values()), "checked files are not built at load"
    assert {i: c.to_dict() for i, c in loaded.contexts.items()} == {
        i: c.to_dict() for i, c in eager.contexts.items()
    }, "an unbuilt context is written as a built one"
    assert not any(c.messages_built for c in loaded.contexts.values()), "writing one out does not build it"
    written: list[str] = []
    real_write = store_module.write_json_atomic
    monkeypatch.setattr(
        store_module,
        "write_json_atomic",
        lambda path, value, before_write=None: (
            written.append(path.name) or real_write(path, value, before_write)
        ),
    )
    assert Store(root).save_session(loaded) == [] and written == [], "nothing changed: nothing dumped"

    loaded = Store(root).load_session(session.uuid)  # changed before its first save
    in_place, unbuilt = loaded.contexts[forks[0].id], loaded.contexts[context.id]
    in_place.messages[-1].metadata["tag"] = "changed in place"  # type: ignore[index]
    unbuilt.children.append("an-added-child")  # the root's list of forks; its messages never built
    assert not unbuilt.messages_built
    written.clear()
    Store(root).save_session(loaded)
    assert sorted(written) == sorted([f"{in_place.id}.json", f"{unbuilt.id}.json"])
    again = Store(root, use_catalog=False).load_session(session.uuid)
    assert again.contexts[in_place.id].messages[-1].metadata == {"tag": "changed in place"}
    assert again.contexts[unbuilt.id].children == [*(f.id for f in forks), "an-added-child"]
    assert again.contexts[forks[2].id].to_dict() == eager.contexts[forks[2].id].to_dict()


def test_a_file_changed_behind_a_trusted_signature_is_reported_with_its_name_when_built(
    tmp_path: Path,
) -> None:
    """Same size, same time, same inode, and a signature the catalog cannot tell apart
    (the change time moved, so the collision is made by hand, as a clock set back would
    make it): the messages are built on first use; the damage found then names the
    file, as a check at load does."""
    root = tmp_path / "store"
    context = Context.create(Message.system_prompt("sys"))
    context.append(_say("user", "first"))
    session = Session.create("Lazy", context)
    Store(root).save_session(session)
    _age(root)
    Store(root).sessions()
    [path] = [p for p in _context_files(root)]
    info = path.stat()
    raw = path.read_bytes()
    damaged = raw.replace(b'"role": "user"', b'"role": 123456')
    assert len(damaged) == len(raw) and damaged != raw
    with path.open("r+b") as handle:  # in place: the inode stays
        handle.write(damaged)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    catalog = Store(root).catalog()
    assert catalog is not None
    catalog._db.execute("UPDATE context_files SET sig = ?", (store_module._signature_of(path),))
    catalog.close()
    loaded = Store(root).load_session(session.uuid)
    with pytest.raises(FormatError) as raised:
        loaded.active_context.messages  # noqa: B018
    assert raised.value.path == path and "role" in raised.value.json_path


@contextlib.contextmanager
def unwritable(folder: Path) -> Iterator[None]:
    """No new file can be made in ``folder``: immutable for root (who ignores modes),
    read-only modes for anyone else."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    if shutil.which("chattr") is None:
        pytest.skip("running as root without chattr: cannot make a folder unwritable")
    made = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"chattr +i refused here ({made.stderr.strip()}): cannot make a folder unwritable")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def test_a_read_only_store_keeps_its_catalog_in_the_cache_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    build_agents_store(root, 3, seed=4)
    monkeypatch.setenv("SOAPWB_CACHE_DIR", str(tmp_path / "cache"))
    expected = full_scan(root)
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*")}
    with unwritable(root):
        store = Store(root)
        assert answers(store) == expected
        catalog = store.catalog()
        assert catalog is not None and catalog.path == cache_catalog_path(root)
        assert catalog.path.is_relative_to(tmp_path / "cache" / "catalogs")
        assert answers(Store(root)) == expected, "a second process finds the same cache"
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*")} == before
    assert not [p for p in root.rglob("*") if is_catalog_file(p)]


def test_a_file_rewritten_within_one_clock_tick_is_read_again(tmp_path: Path) -> None:
    """Same size, same mtime, same inode: only the racy rule tells the edit apart."""
    root = tmp_path / "store"
    context = Context.create(Message.system_prompt("sys"))
    context.append(_say("user", "alpha words"))
    Store(root).save_session(Session.create("Racer", context))
    path = next(iter(_context_files(root)))
    store = Store(root)
    assert [h.snippet for h in search_store(store, "alpha")] == ["alpha words"]
    info = path.stat()
    path.write_text(path.read_text().replace("alpha words", "omega words"))  # in place, same size
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))  # as if in the same tick
    assert path.stat().st_size == info.st_size and path.stat().st_ino == info.st_ino
    assert search_store(store, "alpha") == []
    assert [h.snippet for h in search_store(store, "omega")] == ["omega words"]


def test_ls_recount_rebuilds_counts_the_catalog_had_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    from soapwb.cli import main

    root = tmp_path / "store"
    build_agents_store(root, 3, seed=6)
    _age(root)
    truth = [
        o["tokens"]
        for o in (
            session_overview(Store(root, use_catalog=False), s).as_dict()
            for s in Store(root, use_catalog=False).sessions()
        )
    ]
    assert main(["ls", "--store", str(root), "--json"]) == 0
    capsys.readouterr()
    with sqlite3.connect(root / CATALOG_FILE) as db:  # a stale cache: a count off by 1,000
        db.execute("UPDATE context_files SET tokens = tokens + 1000")
        # moving the generation, as every writer of the catalog does (this process keeps
        # its last listing while the generation stands)
        db.execute("UPDATE meta SET value = CAST(value + 1 AS TEXT) WHERE key = 'generation'")
    assert main(["ls", "--store", str(root), "--json"]) == 0
    assert [r["tokens"] for r in json.loads(capsys.readouterr().out)] == [t + 1000 for t in truth]
    assert main(["ls", "--store", str(root), "--json", "--recount"]) == 0
    assert [r["tokens"] for r in json.loads(capsys.readouterr().out)] == truth


def test_the_state_holds_while_fresh_files_are_read_again_unchanged(tmp_path: Path) -> None:
    """Pages key their caches on the state: files younger than the racy window are read
    again on every refresh, and that must not look like a change."""
    root = tmp_path / "store"
    build_agents_store(root, 3, seed=9)  # just written: every file is racy
    catalog = Store(root).catalog()
    assert catalog is not None
    catalog.refresh()
    state = catalog.state
    catalog.refresh()
    assert Store(root).catalog().state == state  # type: ignore[union-attr]
    path = _context_files(root)[0]
    path.write_text(path.read_text().replace("alpha", "omega", 1))
    catalog.refresh()
    assert catalog.state != state


def test_the_listing_built_from_the_catalogs_rows_equals_the_overview_of_each_summary(tmp_path: Path) -> None:
    """``session_overviews`` builds each row straight from the catalog's (no summary):
    it must show what :func:`session_overview` shows, and what a scan of the files
    shows, for a healthy session, an unreadable ``session.json``, one without a uuid,
    a missing active context and a broken one."""
    root = tmp_path / "store"
    build_agents_store(root, 6, seed=8)
    sessions = sorted(p.parent for p in root.rglob("session.json"))
    (sessions[0] / "session.json").write_text("{not json")
    data = json.loads((sessions[1] / "session.json").read_text())
    del data["uuid"]
    (sessions[1] / "session.json").write_text(json.dumps(data))
    data = json.loads((sessions[2] / "session.json").read_text())
    data["active_context_id"] = "missing-id"
    (sessions[2] / "session.json").write_text(json.dumps(data))
    active = json.loads((sessions[3] / "session.json").read_text())["active_context_id"]
    (sessions[3] / f"{active}.json").write_text('{"messages": [')
    _age(root)
    store = Store(root)
    listed = [o.as_dict() for o in session_overviews(store)]
    assert listed == [session_overview(store, s).as_dict() for s in store.sessions()]
    scanned = Store(root, use_catalog=False)
    assert listed == [o.as_dict() for o in session_overviews(scanned)]
    errors = {o["uuid"]: o["error"] for o in listed}
    assert "not valid JSON" in errors[sessions[0].name], errors  # named by its folder
    assert "missing key 'uuid'" in errors[sessions[1].name], errors
    assert "has no file" in errors[sessions[2].name] and "not valid JSON" in errors[sessions[3].name], errors
    healthy = [o for o in listed if o["error"] is None]
    assert len(healthy) == 2 and all(o["messages"] and o["tokens"] for o in healthy), listed


def _rows_built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The folders whose listing row the catalog's query builds, from now on."""
    built: list[str] = []
    real_row = Catalog._row

    def row(self: Catalog, *values: Any) -> Any:
        built.append(values[0])
        return real_row(self, *values)

    monkeypatch.setattr(Catalog, "_row", row)
    return built


def _listing(root: Path) -> list[dict[str, Any]]:
    catalog_module._LISTINGS.clear()  # what this process kept: as a new process would
    return [o.as_dict() for o in session_overviews(Store(root))]


def test_a_new_process_lists_an_unchanged_store_from_the_kept_listing_and_a_changed_one_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    build_agents_store(root, 5, seed=9)
    _age(root)
    first = _listing(root)
    built = _rows_built(monkeypatch)
    assert _listing(root) == first and built == [], "the kept listing, no query"
    active = sorted(root.rglob("session.json"))[0]
    context = active.parent / f"{json.loads(active.read_text())['active_context_id']}.json"
    data = json.loads(context.read_text())
    data["messages"].append(_say("user", "one more").to_dict())
    context.write_text(json.dumps(data, indent=2))
    changed = _listing(root)
    assert len(built) == 5, "the generation moved: the rows are built again"
    assert changed == [o.as_dict() for o in session_overviews(Store(root, use_catalog=False))]
    assert [o["messages"] for o in changed] != [o["messages"] for o in first]
    built.clear()
    assert _listing(root) == changed and built == [], "and kept again"
    with sqlite3.connect(root / CATALOG_FILE) as db:
        db.execute("UPDATE listing SET rows = '[[1, 2]]'")  # nothing this code writes
    assert _listing(root) == changed and len(built) == 5, "a kept listing of the wrong shape is not used"


def test_a_listing_does_not_wait_for_another_writer_to_keep_its_rows(tmp_path: Path) -> None:
    """Keeping the rows is a write: while another process holds the catalog's write lock,
    the listing answers at once and leaves them unkept (its wait is 30 s otherwise)."""
    root = tmp_path / "store"
    build_agents_store(root, 3, seed=10)
    _age(root)
    expected = _listing(root)
    other = sqlite3.connect(root / CATALOG_FILE, isolation_level=None)
    other.execute("DELETE FROM listing")
    other.execute("BEGIN IMMEDIATE")
    answers: list[Any] = []
    worker = threading.Thread(target=lambda: answers.append(_listing(root)), daemon=True)
    worker.start()
    worker.join(10)
    other.execute("ROLLBACK")
    other.close()
    assert not worker.is_alive(), "the listing waited for the other writer"
    assert answers == [expected]


def test_a_full_disk_leaves_the_listing_unkept_and_the_catalog_where_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keeping the listing is the only write of a listing of an unchanged store: when the
    disk is full it is skipped, and the catalog stays on disk (a failure of a write it
    needs would move it to memory)."""
    root = tmp_path / "store"
    build_agents_store(root, 3, seed=12)
    _age(root)
    expected = _listing(root)
    with sqlite3.connect(root / CATALOG_FILE) as db:
        db.execute("DELETE FROM listing")
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = sqlite3.SQLITE_FULL  # type: ignore[attr-defined]
    real_write = Catalog._write

    @contextlib.contextmanager
    def no_room(self: Catalog, **options: Any) -> Iterator[sqlite3.Connection]:
        with real_write(self, **options) as db:
            yield db
            raise full

    monkeypatch.setattr(Catalog, "_write", no_room)
    store = Store(root)
    catalog_module._LISTINGS.clear()
    assert [o.as_dict() for o in session_overviews(store)] == expected
    catalog = store.catalog()
    assert catalog is not None and not catalog.in_memory
    with sqlite3.connect(root / CATALOG_FILE) as db:
        assert db.execute("SELECT count(*) FROM listing").fetchone() == (0,)


def test_a_long_running_process_lists_again_with_the_summaries_it_made_while_nothing_changed(
    tmp_path: Path,
) -> None:
    """The summaries and listing rows are kept with the catalog's rows while its
    generation stands (a workbench lists 10,000 sessions without making them again),
    and made anew, showing the change, once it moves."""
    root = tmp_path / "store"
    build_agents_store(root, 4, seed=13)
    _age(root)
    store = Store(root)
    first, rows = store.sessions(), session_overviews(store)
    again, rows_again = store.sessions(), session_overviews(store)
    assert all(a is b for a, b in zip(first, again, strict=True))
    assert all(a is b for a, b in zip(rows, rows_again, strict=True))
    context = sorted(root.rglob("session.json"))[0]
    active = context.parent / f"{json.loads(context.read_text())['active_context_id']}.json"
    data = json.loads(active.read_text())
    data["messages"].append(_say("user", "and one more").to_dict())
    active.write_text(json.dumps(data, indent=2))
    later = session_overviews(store)
    assert not any(a is b for a, b in zip(rows, later, strict=True))
    assert later == session_overviews(Store(root, use_catalog=False))
    assert [o.messages for o in later] != [o.messages for o in rows]


def test_keeping_the_listing_leaves_the_database_file_and_its_log_to_the_next_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kept listing is 3 MB at 10,000 sessions: a listing that keeps it does not copy
    the log back into the database (a checkpoint and its fsync, on a page's first open)."""
    root = tmp_path / "store"
    build_agents_store(root, 3, seed=14)
    _age(root)
    _listing(root)
    monkeypatch.setattr(catalog_module, "CHECKPOINT_BYTES", 0)  # any write would copy the log back
    store = Store(root)  # kept open: closing the catalog copies the log back, as it should
    store.sessions()
    with contextlib.closing(sqlite3.connect(root / CATALOG_FILE)) as db:
        db.execute("DELETE FROM listing")
        db.commit()
    catalog_module._LISTINGS.clear()
    database = (root / CATALOG_FILE).stat()
    log = Path(f"{root / CATALOG_FILE}-wal").stat().st_size
    session_overviews(store)
    after = (root / CATALOG_FILE).stat()
    with sqlite3.connect(root / CATALOG_FILE) as db:
        assert db.execute("SELECT count(*) FROM listing").fetchone() == (1,)
    assert (after.st_size, after.st_mtime_ns) == (database.st_size, database.st_mtime_ns)
    assert Path(f"{root / CATALOG_FILE}-wal").stat().st_size > log
