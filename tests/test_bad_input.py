"""Broken files: each kind of damage gives a typed error naming the file (and, for bad
content, the JSON path), and the rest of the store still lists, loads and saves without
a byte of it being rewritten."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from soap_core import (
    SESSION_FILE,
    Context,
    ContextNotFoundError,
    FormatError,
    Store,
    StoreError,
    UnknownPart,
    session_overview,
)
from tests.conftest import CHILD_ID, PARENT_ID, SESSION_UUID, edit_json, session_dir, snapshot

ROLE = "HelloPete"
SECOND_UUID = "20250612-9d41c7e2-5b38-4f06-a1d7-3e8c6b2f0a95"
ACTIVE_FILE = f"{CHILD_ID}.json"
PARENT_FILE = f"{PARENT_ID}.json"


def set_at(keys: tuple[str | int, ...], value: Any) -> Callable[[Any], None]:
    def change(data: Any) -> None:
        for key in keys[:-1]:
            data = data[key]
        data[keys[-1]] = value

    return change


@pytest.fixture
def root(store_copy: Path) -> Path:
    """The sample store plus a second, healthy session (a copy under another uuid)."""
    second = session_dir(store_copy, SECOND_UUID)
    shutil.copytree(session_dir(store_copy), second)
    edit_json(second / SESSION_FILE, set_at(("uuid",), SECOND_UUID))
    return store_copy


def assert_rest_still_lists(root: Path, broken: Path, *, listing_marks_it: bool) -> None:
    """The broken session is marked, the healthy one has its figures, and neither listing
    nor loading and saving the healthy session rewrites anything."""
    before = snapshot(root)
    store = Store(root)
    summaries = {s.path.name: s for s in store.sessions()}
    assert set(summaries) == {SESSION_UUID, SECOND_UUID}
    first, second = summaries[SESSION_UUID], summaries[SECOND_UUID]
    assert first.broken is listing_marks_it
    if listing_marks_it:
        assert str(broken) in str(first.error)
    assert second.error is None
    assert second.active_context_id == CHILD_ID

    broken_row, healthy_row = session_overview(store, first), session_overview(store, second)
    assert broken_row.error is not None and str(broken) in broken_row.error
    assert broken_row.messages is None
    assert healthy_row.error is None
    assert (healthy_row.messages, healthy_row.tokens) == (6, 400)

    assert store.save_session(store.load_session(SECOND_UUID)) == []
    assert snapshot(root) == before, "listing, loading or saving rewrote a file"


# -- files that are not JSON -------------------------------------------------------------

DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "garbage": lambda raw: b"{this is not JSON at all ]]",
    "truncated": lambda raw: raw[: len(raw) // 2],
    "empty": lambda raw: b"",
    "whitespace-only": lambda raw: b" \n\n  ",
    "not-utf8": lambda raw: raw[:10] + b"\xe9\xff" + raw[10:],
}


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
@pytest.mark.parametrize("file_name", [SESSION_FILE, ACTIVE_FILE], ids=["session.json", "active-context"])
def test_unreadable_file_names_the_file_and_the_rest_still_lists(
    root: Path, file_name: str, damage: Callable[[bytes], bytes]
) -> None:
    broken = session_dir(root) / file_name
    broken.write_bytes(damage(broken.read_bytes()))

    with pytest.raises(FormatError) as caught:
        Store(root).load_session(SESSION_UUID)
    assert caught.value.path == broken
    assert caught.value.json_path == "$"
    assert str(broken) in str(caught.value)
    assert_rest_still_lists(root, broken, listing_marks_it=file_name == SESSION_FILE)


PARSER_LIMITS = {"deeply-nested": "[" * 100_000, "huge-integer": "1" * 5000}


@pytest.mark.parametrize("text", PARSER_LIMITS.values(), ids=PARSER_LIMITS.keys())
@pytest.mark.parametrize("file_name", [SESSION_FILE, ACTIVE_FILE], ids=["session.json", "active-context"])
def test_json_past_the_parser_limits_is_a_format_error_and_the_rest_still_lists(
    root: Path, file_name: str, text: str
) -> None:
    broken = session_dir(root) / file_name
    broken.write_text(text)
    with pytest.raises(FormatError) as caught:
        Store(root).load_session(SESSION_UUID)
    assert str(broken) in str(caught.value)
    assert_rest_still_lists(root, broken, listing_marks_it=file_name == SESSION_FILE)


# -- JSON of the wrong shape -------------------------------------------------------------

WRONG_SHAPES = [
    pytest.param(SESSION_FILE, ("is_active",), "no", "$.is_active", id="session-is_active-a-string"),
    pytest.param(SESSION_FILE, ("uuid",), 42, "$.uuid", id="session-uuid-a-number"),
    pytest.param(SESSION_FILE, ("state_data",), [], "$.state_data", id="session-state_data-a-list"),
    pytest.param(
        SESSION_FILE, ("auto_approve_tools",), "all", "$.auto_approve_tools", id="session-tools-a-str"
    ),
    pytest.param(ACTIVE_FILE, ("messages",), {"0": {}}, "$.messages", id="messages-an-object"),
    pytest.param(ACTIVE_FILE, ("messages", 2), "hi", "$.messages[2]", id="message-a-string"),
    pytest.param(ACTIVE_FILE, ("messages", 2, "content"), "hi", "$.messages[2].content", id="content-a-str"),
    pytest.param(
        ACTIVE_FILE,
        ("messages", 2, "content", 0, "text"),
        42,
        "$.messages[2].content[0].text",
        id="text-a-num",
    ),
    pytest.param(
        ACTIVE_FILE,
        ("messages", 2, "_sequence_number"),
        "6",
        "$.messages[2]._sequence_number",
        id="seq-a-str",
    ),
    pytest.param(
        ACTIVE_FILE, ("messages", 2, "token_count"), 2.5, "$.messages[2].token_count", id="count-float"
    ),
    pytest.param(
        ACTIVE_FILE, ("messages", 2, "_type"), "HologramMessage", "$.messages[2]._type", id="unknown-_type"
    ),
    pytest.param(ACTIVE_FILE, ("messages", 2, "id"), None, "$.messages[2]", id="message-id-null"),
    pytest.param(ACTIVE_FILE, ("messages", 2, "role"), None, "$.messages[2]", id="message-role-null"),
    pytest.param(
        ACTIVE_FILE,
        ("messages", 3, "content", 0, "arguments"),
        {"answer": 42},
        "$.messages[3].content[0].arguments",
        id="tool_use-arguments-an-object",
    ),
    pytest.param(
        ACTIVE_FILE,
        ("messages", 2, "content", 0),
        {"type": "image", "source": "https://example.com/x.png"},
        "$.messages[2].content[0].source",
        id="media-source-a-string",
    ),
    pytest.param(
        ACTIVE_FILE, ("anchor_points", 1), ["tools"], "$.anchor_points[1]", id="anchor-without-index"
    ),
    pytest.param(
        ACTIVE_FILE, ("anchor_points", 1), ["tools", "2"], "$.anchor_points[1]", id="anchor-index-a-str"
    ),
    pytest.param(ACTIVE_FILE, ("anchor_points",), {"messages": 6}, "$.anchor_points", id="anchors-an-object"),
    pytest.param(ACTIVE_FILE, ("children",), [7], "$.children", id="children-not-ids"),
    pytest.param(ACTIVE_FILE, ("id",), None, "$", id="context-id-null"),
]


@pytest.mark.parametrize(("file_name", "keys", "value", "json_path"), WRONG_SHAPES)
def test_wrong_type_names_the_file_and_json_path_and_the_rest_still_lists(
    root: Path, file_name: str, keys: tuple[str | int, ...], value: Any, json_path: str
) -> None:
    broken = session_dir(root) / file_name
    edit_json(broken, set_at(keys, value))

    with pytest.raises(FormatError) as caught:
        Store(root).load_session(SESSION_UUID)
    assert (caught.value.path, caught.value.json_path) == (broken, json_path)
    assert f"{broken}: at {json_path}: " in str(caught.value)
    assert_rest_still_lists(root, broken, listing_marks_it=file_name == SESSION_FILE)


def test_context_file_that_is_not_an_object_names_the_file(root: Path) -> None:
    broken = session_dir(root) / ACTIVE_FILE
    broken.write_text("[]")
    with pytest.raises(FormatError, match="must be an object") as caught:
        Store(root).load_session(SESSION_UUID)
    assert (caught.value.path, caught.value.json_path) == (broken, "$")
    assert_rest_still_lists(root, broken, listing_marks_it=False)


# -- missing files -----------------------------------------------------------------------


def test_missing_active_context_file_is_context_not_found_and_the_rest_still_lists(root: Path) -> None:
    missing = session_dir(root) / ACTIVE_FILE
    missing.unlink()
    with pytest.raises(ContextNotFoundError) as caught:
        Store(root).load_session(SESSION_UUID)
    assert caught.value.path == missing
    assert str(missing) in str(caught.value)
    assert Store(root).load_session(SESSION_UUID, require_active=False).contexts.keys() == {PARENT_ID}
    assert_rest_still_lists(root, missing, listing_marks_it=False)


def test_missing_session_json_is_a_store_error_and_the_rest_still_lists(root: Path) -> None:
    missing = session_dir(root) / SESSION_FILE
    missing.unlink()
    with pytest.raises(StoreError) as caught:
        Store(root).load_session(SESSION_UUID)
    assert not isinstance(caught.value, FormatError)
    assert caught.value.path == missing
    assert str(missing) in str(caught.value)
    assert_rest_still_lists(root, missing, listing_marks_it=True)


# -- a broken fork that is not the active context ----------------------------------------


def test_broken_non_active_context_lets_the_session_load_and_save_leaves_it_untouched(root: Path) -> None:
    broken = session_dir(root) / PARENT_FILE
    broken_bytes = broken.read_bytes()[:100]
    broken.write_bytes(broken_bytes)
    store = Store(root)

    session = store.load_session(SESSION_UUID)
    assert session.load_errors.keys() == {PARENT_FILE}
    error = session.load_errors[PARENT_FILE]
    assert isinstance(error, FormatError) and error.path == broken
    assert session.active_context.id == CHILD_ID
    assert session.contexts.keys() == {CHILD_ID}

    session.state_data["_oap_output_attempts"] = 2
    session.active_context.children.append("0d6f3a58-2c1e-4b7a-9f05-6e8d4c2b1a07")
    written = store.save_session(session)
    assert set(written) == {session_dir(root) / SESSION_FILE, session_dir(root) / ACTIVE_FILE}
    assert broken.read_bytes() == broken_bytes
    rows = [session_overview(store, s) for s in store.sessions()]
    assert [(r.uuid, r.error, r.messages) for r in rows] == [(SESSION_UUID, None, 6), (SECOND_UUID, None, 6)]


def test_save_refuses_to_overwrite_a_context_file_that_failed_to_load(root: Path) -> None:
    broken = session_dir(root) / PARENT_FILE
    broken.write_bytes(b"")
    store = Store(root)
    session = store.load_session(SESSION_UUID)
    session.add_context(Context(PARENT_ID))  # a context whose file would be the broken one

    with pytest.raises(StoreError, match="refusing to overwrite") as caught:
        store.save_session(session)
    assert caught.value.path == broken
    assert broken.read_bytes() == b""


# -- what a lenient reader must accept, and keep ------------------------------------------


def test_context_file_with_json5_comments_and_trailing_commas_loads_and_is_not_rewritten(root: Path) -> None:
    path = session_dir(root) / ACTIVE_FILE
    original = path.read_text()
    edits = [
        ('{\n  "messages"', '// edited by hand\n{\n  "messages"'),
        ('"children": [],', '"children": [],  /* none were kept */'),
        ('"messages",\n      6\n    ]\n  ],', '"messages",\n      6,\n    ],\n  ],'),
        ('-0e7c2f9a6b58"\n}', '-0e7c2f9a6b58",\n}'),
    ]
    text = original
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    path.write_text(text)
    store = Store(root)

    session = store.load_session(SESSION_UUID)
    assert session.load_errors == {}
    assert session.active_context.to_dict() == json.loads(original)
    assert store.save_session(session) == []
    assert path.read_text() == text


def test_unknown_part_types_and_unknown_keys_are_written_back_byte_identically(root: Path) -> None:
    directory = session_dir(root)
    hologram = {"type": "hologram", "x": 1}

    def add_unknowns(context: dict[str, Any]) -> None:
        context["messages"][2]["content"].append(hologram)
        message = context["messages"][3]
        context["messages"][3] = {"approval_status": "approved", **message, "pending": False}
        context["messages"][3]["content"][0]["approval_status"] = "approved"
        context["compaction"] = {"strategy": "rolling_token_window", "budget": 360}

    edit_json(directory / ACTIVE_FILE, add_unknowns)
    edit_json(directory / PARENT_FILE, set_at(("schema_note",), "kept"))
    edit_json(directory / SESSION_FILE, set_at(("owner",), {"host": "pete-01"}))
    original = snapshot(root)

    session = Store(root).load_session(SESSION_UUID)
    assert isinstance(session.active_context.messages[2].content[-1], UnknownPart)
    for path in directory.glob("*.json"):
        path.unlink()
    written = Store(root).save_session(session)
    assert len(written) == 3
    assert snapshot(root) == original


# -- a session.json that disagrees with its directory -------------------------------------


def test_saving_a_copied_session_never_writes_into_the_directory_it_was_copied_from(store_copy: Path) -> None:
    copy = session_dir(store_copy, SECOND_UUID)
    shutil.copytree(session_dir(store_copy), copy)  # session.json still says SESSION_UUID
    original = snapshot(session_dir(store_copy))
    store = Store(store_copy)

    session = store.load_session(SECOND_UUID)
    session.state_data["_oap_output_attempts"] = 2
    with contextlib.suppress(StoreError):  # refusing to save is fine too
        store.save_session(session)
    assert snapshot(session_dir(store_copy)) == original


def test_errors_survive_pickling_for_the_workbench_cache(tmp_path: Path) -> None:
    for error in (
        FormatError(tmp_path / "a.json", "$.messages[0]", "bad"),
        StoreError(tmp_path, "gone"),
        ContextNotFoundError(tmp_path / "c.json", "missing"),
    ):
        clone = pickle.loads(pickle.dumps(error))
        assert type(clone) is type(error) and str(clone) == str(error)


@pytest.mark.parametrize("use_catalog", [True, False], ids=["catalog", "scan"])
def test_an_unlistable_role_folder_is_a_store_error(
    store_copy: Path, monkeypatch: pytest.MonkeyPatch, use_catalog: bool
) -> None:
    real_iterdir, real_scandir = Path.iterdir, os.scandir

    def refuse(path: Any) -> None:
        if Path(path).name == "HelloPete":
            raise PermissionError(13, "Permission denied", str(path))

    def iterdir(self: Path) -> Any:
        refuse(self)
        return real_iterdir(self)

    def scandir(path: Any = ".") -> Any:
        refuse(path)
        return real_scandir(path)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(StoreError, match="cannot list: Permission denied"):
        Store(store_copy, use_catalog=use_catalog).sessions()
