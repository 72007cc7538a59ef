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
