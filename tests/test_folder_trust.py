"""A walk remembers each settled session folder's own signature with the names it listed,
and a later walk that finds the folder at that signature stats its files by name without
listing it (issue 28 point 3: the walk is most of a cold ``soapwb ls``). Creating,
removing or renaming an entry moves the folder's times, so nothing a listing shows may
be missed; a file rewritten in place (peteos's way) is still caught by its own stat."""

from __future__ import annotations

import os
import random
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import soap_core._catalog as catalog_module
from soap_core import Store
from soap_core._catalog import CATALOG_FILE
from soap_core._records import CallRecord, write_call
from tests.test_catalog import answers, build_agents_store, build_sessions_store, full_scan, mutate


def _settle() -> None:
    """Past the window in which a folder is not remembered (its change time cannot be
    set back, so a test waits)."""
    time.sleep(catalog_module.SETTLED_FOLDER_NS / 1e9 + 0.2)


def remembered(root: Path) -> dict[str, tuple[str, str]]:
    with sqlite3.connect(root / CATALOG_FILE) as db:
        return {d: (sig, names) for d, sig, names in db.execute("SELECT dir, sig, names FROM folders")}


@pytest.fixture
def listed_folders(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every folder ``os.scandir`` lists from here on."""
    seen: list[str] = []
    real_scandir = os.scandir

    def counting(path: str | os.PathLike[str] = ".") -> object:
        seen.append(os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", counting)
    yield seen


def session_folders(root: Path) -> set[str]:
    return {str(p.parent) for p in root.rglob("session.json")}


@pytest.mark.parametrize("layout", ["agents", "sessions"])
def test_a_settled_folder_is_stat_ed_by_name_and_lists_the_same(
    tmp_path: Path, layout: str, listed_folders: list[str]
) -> None:
    root = tmp_path / "store"
    (build_agents_store if layout == "agents" else build_sessions_store)(root, 8, seed=5)
    expected = full_scan(root)
    assert answers(Store(root)) == expected
    assert remembered(root) == {}, "just written: no folder is settled yet"
    _settle()
    assert answers(Store(root)) == expected  # this walk lists every folder and remembers it
    kept = remembered(root)
    assert len(kept) == 8
    assert all("session.json" in names.split("\n") for _sig, names in kept.values())
    folders = session_folders(root)
    listed_folders.clear()
    listing = Store(root).sessions()  # a new process's listing: every folder taken by its names
    assert not folders & set(listed_folders), "no session folder listed again"
    assert listing == Store(root, use_catalog=False).sessions()
    assert answers(Store(root)) == expected


@pytest.mark.parametrize("layout", ["agents", "sessions"])
def test_the_catalog_equals_a_full_scan_as_remembered_folders_change(tmp_path: Path, layout: str) -> None:
    """The catalog's own test of changes underneath (tests.test_catalog), run once every
    folder is remembered: a changed folder is listed again, the others by name."""
    root = tmp_path / "store"
    (build_agents_store if layout == "agents" else build_sessions_store)(root, 12, seed=3)
    _settle()
    store = Store(root)
    assert answers(store) == full_scan(root)
    assert len(remembered(root)) == 12
    rng = random.Random(17)
    kinds = set()
    for step in range(24):
        kind = mutate(root, rng)
        kinds.add(kind.split()[0])
        expected = full_scan(root)
        assert answers(store) == expected, f"step {step}: after {kind}, one catalog kept open"
        assert answers(Store(root)) == expected, f"step {step}: after {kind}, a new process"
    assert {"append", "delete", "new", "rename"} <= kinds


def test_a_link_whose_target_became_a_folder_is_listed_again(
    tmp_path: Path, listed_folders: list[str]
) -> None:
    """The one change under a remembered folder that does not move its times: an entry
    that is a link to a file elsewhere in the store, whose target is replaced."""
    root = tmp_path / "store"
    build_agents_store(root, 3, seed=8)
    folder = sorted(session_folders(root))[0]
    target = root / "agents" / "elsewhere.json"
    target.write_text((next(Path(folder).glob("2*.json"), None) or Path(folder, "session.json")).read_text())
    (Path(folder) / "linked.json").symlink_to(target)
    _settle()
    Store(root).sessions()
    assert "linked.json" in remembered(root)[os.path.relpath(folder, root)][1].split("\n")
    target.unlink()
    target.mkdir()
    listed_folders.clear()
    ours = answers(Store(root))
    assert folder in listed_folders
    for path in root.glob(f"{CATALOG_FILE}*"):
        path.unlink()
    assert ours == answers(Store(root)), "what a catalog built from the files says"
    files = [p for p in Path(folder).glob("*.json") if p.is_file() and p.name != "session.json"]
    assert next(s for s in Store(root).sessions() if str(s.path) == folder).context_files == len(files)


def test_a_file_added_to_a_remembered_folder_is_listed(tmp_path: Path, listed_folders: list[str]) -> None:
    """A fork or a new context file in a remembered folder: every remembered name still
    stats, so only the folder's own signature tells that there is one more."""
    root = tmp_path / "store"
    build_agents_store(root, 4, seed=12)
    _settle()
    Store(root).sessions()
    folder = Path(sorted(session_folders(root))[1])
    assert os.path.relpath(folder, root) in remembered(root)
    source = next(p for p in folder.glob("*.json") if p.name != "session.json")
    (folder / "added-copy.json").write_bytes(source.read_bytes())
    listed_folders.clear()
    listing = {s.path: s.context_files for s in Store(root).sessions()}
    assert str(folder) in listed_folders
    assert listing == {s.path: s.context_files for s in Store(root, use_catalog=False).sessions()}
    assert answers(Store(root)) == full_scan(root)


def test_a_record_written_under_a_remembered_folder_is_indexed(tmp_path: Path) -> None:
    """A walk that looks at records (a catalog's recovery) stats the remembered record
    folders by name: a new call record moves its folder, not the session's."""
    root = tmp_path / "store"
    build_agents_store(root, 2, seed=4)
    folder = Path(sorted(session_folders(root))[0])
    write_call(folder, _call("c1"))
    _settle()
    Store(root).sessions()
    assert "calls/" in remembered(root)[os.path.relpath(folder, root)][1].split("\n")
    before = folder.stat()
    write_call(folder, _call("c2"))
    assert folder.stat().st_ctime_ns == before.st_ctime_ns  # the session folder did not move
    catalog = Store(root).catalog()
    assert catalog is not None
    catalog._run(lambda: catalog._refresh_now(records=True))
    with sqlite3.connect(root / CATALOG_FILE) as db:
        ids = {
            row[0] for row in db.execute("SELECT id FROM calls WHERE dir=?", (os.path.relpath(folder, root),))
        }
    assert ids == {"c1", "c2"}


def _call(record_id: str) -> CallRecord:
    return CallRecord(
        id=record_id,
        session="s",
        role="r",
        context_id="x",
        message_index=0,
        request={"model": "m", "messages": []},
        request_hash="h",
    )
