"""A store's three folders are resolved once and kept while each still leads to the same
folder (soap_core._paths.real_folders): a cold load confines every file it opens, and
resolving them every time was a third of it. Whatever the user re-points in between is
seen at the next call."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from soap_core import Store
from soap_core._paths import OutsideStoreError, real, real_folders


def test_each_folder_resolves_as_realpath_does(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    names = [
        tmp_path / "a",
        tmp_path / "b",
        tmp_path / "missing",
        tmp_path / "dangling",
        tmp_path / "b" / "missing",
    ]
    for _ in range(2):  # resolved, then kept
        assert real_folders(names) == [real(p) for p in names]


def test_a_re_pointed_link_is_resolved_again(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    link = tmp_path / "agents"
    link.symlink_to(first)
    assert real_folders([link]) == [str(first)]
    link.unlink()
    link.symlink_to(second)
    assert real_folders([link]) == [str(second)]
    link.unlink()
    assert real_folders([link]) == [str(link)]  # gone: where it would be
    link.symlink_to(first)  # a missing folder that appears as a link
    assert real_folders([link]) == [str(first)]
    missing_in_linked = tmp_path / "via" / "sessions"
    (tmp_path / "via").symlink_to(first)
    assert real_folders([missing_in_linked]) == [str(first / "sessions")]
    (tmp_path / "via").unlink()
    (tmp_path / "via").symlink_to(second)  # the parent of a missing folder re-pointed
    assert real_folders([missing_in_linked]) == [str(second / "sessions")]


def test_a_store_whose_agents_folder_is_re_pointed_confines_to_the_new_one(tmp_path: Path) -> None:
    inside, outside = tmp_path / "store-agents", tmp_path / "other-agents"
    inside.mkdir()
    outside.mkdir()
    root = tmp_path / "store"
    root.mkdir()
    (root / "agents").symlink_to(inside)
    store = Store(root, use_catalog=False)
    assert store.confine(root / "agents" / "x.json") == root / "agents" / "x.json"
    escape = inside / "escape.json"
    escape.symlink_to(outside / "secret.json")
    with pytest.raises(OutsideStoreError):
        store.confine(escape)
    os.unlink(root / "agents")
    (root / "agents").symlink_to(outside)  # the user moved the store's agents folder
    assert store.real_roots()[1] == str(outside)
    assert store.confine(root / "agents" / "y.json") == root / "agents" / "y.json"
    with pytest.raises(OutsideStoreError):
        store.confine(inside / "old.json")  # the old place is outside now


def test_an_entry_resolves_as_realpath_does_and_follows_a_re_pointed_folder(tmp_path: Path) -> None:
    """``inside_any`` resolves a file through its folder's kept resolution and one
    ``lstat`` of the file: the same as ``realpath`` for files, links, missing names and
    names that are not plain, and again after the folder's link is re-pointed."""
    from soap_core._paths import real_entry

    inner, other = tmp_path / "inner", tmp_path / "other"
    inner.mkdir()
    other.mkdir()
    (inner / "f.json").write_text("{}")
    (other / "f.json").write_text("{}")
    (inner / "out.json").symlink_to(other / "f.json")
    (inner / "dir").mkdir()
    via = tmp_path / "via"
    via.symlink_to(inner)
    names = [
        inner / "f.json",
        via / "f.json",
        via / "out.json",
        via / "missing.json",
        via / "dir",
        f"{via}/dir/",
        f"{via}/dir/..",
        f"{via}/./f.json",
        "relative.json",
    ]
    for _ in range(2):
        assert [real_entry(n) for n in names] == [real(n) for n in names]
    via.unlink()
    via.symlink_to(other)
    assert real_entry(via / "f.json") == str(other / "f.json")
    assert [real_entry(n) for n in names] == [real(n) for n in names]


def test_two_ways_to_one_session_folder_name_one_save_lock(tmp_path: Path) -> None:
    """The save lock is named by the folder's real path: a store reached through a link
    and the same store by its own path share it (and a re-pointed link does not)."""
    import hashlib

    from soap_core._saves import save_lock_path

    folder = tmp_path / "store" / "agents" / "Role" / "s1"
    folder.mkdir(parents=True)
    other = tmp_path / "other" / "agents" / "Role" / "s1"
    other.mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "store")
    config = tmp_path / "store"
    via_link = save_lock_path(config, link / "agents" / "Role" / "s1")
    direct = save_lock_path(config, folder)
    key = os.path.realpath(folder).encode("utf-8", "surrogatepass")
    assert via_link == direct and direct.name == f"{hashlib.sha256(key).hexdigest()[:32]}.lock"
    link.unlink()
    link.symlink_to(tmp_path / "other")
    assert save_lock_path(config, link / "agents" / "Role" / "s1") != direct


def test_a_load_resolves_the_stores_folders_once_and_the_next_call_sees_them_re_pointed(
    store_copy: Path, tmp_path: Path
) -> None:
    """A load confines its folder and each file with one resolution of the store's
    folders; what the user re-points after it is seen by the next call."""
    import shutil

    from tests.conftest import SESSION_UUID

    inside, outside = tmp_path / "agents-a", tmp_path / "agents-b"
    shutil.move(store_copy / "agents", inside)
    shutil.copytree(inside, outside)
    (store_copy / "agents").symlink_to(inside)
    store = Store(store_copy, use_catalog=False)
    assert store.load_session(SESSION_UUID).directory is not None
    os.unlink(store_copy / "agents")
    (store_copy / "agents").symlink_to(outside)
    with pytest.raises(OutsideStoreError):
        store.confine(inside / "old.json")
    loaded = store.load_session(SESSION_UUID)
    assert loaded.directory is not None and real(loaded.directory).startswith(str(outside))
