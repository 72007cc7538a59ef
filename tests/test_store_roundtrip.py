"""The store writes exactly what peteos writes: byte-identical round trips, atomic writes."""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import soap_core._catalog
import soap_core._jsonio as jsonio
import soap_core._store
from soap_core import (
    Context,
    MediaPart,
    Message,
    Part,
    Session,
    Store,
    TextPart,
    ThinkingPart,
    ToolPart,
    ToolResultPart,
    ToolUsePart,
    UnknownPart,
    base64_source,
    part_from_dict,
)
from soap_core._store import SessionSummary
from tests.conftest import CHILD_ID, PARENT_ID, SESSION_UUID, snapshot


def test_loading_and_saving_the_fixture_gives_the_same_bytes(store_copy: Path) -> None:
    original = snapshot(store_copy)
    session = Store(store_copy).load_session(SESSION_UUID)
    for path in store_copy.rglob("*.json"):
        path.unlink()
    written = Store(store_copy).save_session(session)
    assert len(written) == 3
    assert snapshot(store_copy) == original


def test_saving_an_unchanged_session_touches_no_file(store_copy: Path) -> None:
    before = {p: p.stat().st_mtime_ns for p in store_copy.rglob("*.json")}
    store = Store(store_copy)
    assert store.save_session(store.load_session("3f0c")) == []
    assert {p: p.stat().st_mtime_ns for p in store_copy.rglob("*.json")} == before


def test_a_changed_context_is_the_only_file_rewritten(store_copy: Path) -> None:
    store = Store(store_copy)
    session = store.load_session("3f0c")
    session.active_context.append(Message.create("user", [TextPart("And now?")]))
    written = store.save_session(session)
    assert [p.name for p in written] == [f"{CHILD_ID}.json"]
    reloaded = Store(store_copy).load_session("3f0c").active_context
    assert reloaded.messages[-1].text() == "And now?"
    assert reloaded.anchor_points[-1] == ("messages", 7)


def test_context_files_with_a_date_prefix_are_keyed_by_the_id_inside(store_copy: Path) -> None:
    session_dir = store_copy / "agents" / "HelloPete" / SESSION_UUID
    (session_dir / f"{PARENT_ID}.json").rename(session_dir / f"20250611-{PARENT_ID}.json")
    store = Store(store_copy)
    session = store.load_session(SESSION_UUID)
    assert set(session.contexts) == {PARENT_ID, CHILD_ID}
    assert session.context_files[PARENT_ID] == f"20250611-{PARENT_ID}.json"
    before = snapshot(store_copy)
    session.contexts[PARENT_ID].extra["note"] = "x"
    store.save_session(session)
    after = snapshot(store_copy)
    assert set(after) == set(before)  # written back under its own name, no second file


def test_bare_uuid_sessions_and_an_agents_dir_given_directly_load(store_copy: Path) -> None:
    bare = str(uuid.uuid4())
    session_dir = store_copy / "agents" / "HelloPete" / SESSION_UUID
    session_file = session_dir / "session.json"
    data = json.loads(session_file.read_text())
    data["uuid"] = bare
    session_file.write_text(json.dumps(data, indent=2))
    session_dir.rename(session_dir.parent / bare)
    store = Store(store_copy / "agents")
    assert [s.uuid for s in store.sessions()] == [bare]
    assert store.load_session(bare[:6]).uuid == bare


def test_a_warm_listing_reads_no_store_file(store_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    Store(store_copy).sessions()  # the first listing indexes the files into the catalog

    def refuse(path: Path) -> object:
        raise AssertionError(f"listing read {path}")

    monkeypatch.setattr(soap_core._catalog, "read_json", refuse)
    monkeypatch.setattr(soap_core._store, "read_json", refuse)
    sessions = Store(store_copy).sessions()
    assert sessions == [
        SessionSummary(
            role="HelloPete",
            uuid=SESSION_UUID,
            path=store_copy / "agents" / "HelloPete" / SESSION_UUID,
            thread_id="pete-chat",
            is_active=False,
            active_context_id=CHILD_ID,
            context_files=2,
        )
    ]


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(
    store_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(store_copy)
    session = store.load_session("3f0c")
    session.active_context.append(Message.create("user", [TextPart("lost?")]))
    before = snapshot(store_copy)

    def crash(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(jsonio.os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        store.save_session(session)
    assert snapshot(store_copy) == before


def test_written_files_keep_their_permissions(store_copy: Path) -> None:
    target = store_copy / "agents" / "HelloPete" / SESSION_UUID / f"{CHILD_ID}.json"
    target.chmod(0o640)
    store = Store(store_copy)
    session = store.load_session("3f0c")
    session.active_context.append(Message.create("user", [TextPart("hi")]))
    store.save_session(session)
    assert target.stat().st_mode & 0o777 == 0o640


def test_new_session_is_written_in_the_peteos_layout(tmp_path: Path) -> None:
    context = Context.create("You are Pete.", [ToolPart("get_name", "Name.", {"type": "object"})])
    context.append(Message.create("user", [TextPart("héllo")]))
    session = Session.create("HelloPete", context, thread_id="t1")
    Store(tmp_path).save_session(session)
    folder = tmp_path / "agents" / "HelloPete" / session.uuid
    assert sorted(p.name for p in folder.iterdir()) == sorted(["session.json", f"{context.id}.json"])
    raw = (folder / f"{context.id}.json").read_text()
    assert raw == json.dumps(json.loads(raw), indent=2) and "\\u00e9" in raw
    assert list(json.loads((folder / "session.json").read_text())) == [
        "uuid",
        "active_context_id",
        "auto_approve_tools",
        "state_data",
        "is_active",
    ]
    assert list(json.loads(raw)) == [
        "messages",
        "id",
        "content_map",
        "anchor_points",
        "message_sequence",
        "_mutation_counter",
        "children",
        "system_prompt_message_id",
        "tool_definitions_message_id",
    ]


def test_legacy_tool_parts_without_type_are_written_back_without_type() -> None:
    raw = {"name": "get_name", "description": "d", "parameters": {"type": "object"}}
    part = part_from_dict(raw)
    assert isinstance(part, ToolPart)
    message = Message("tool", [part], message_type="ToolDefinitionsMessage")
    assert message.to_dict()["content"] == [raw]


# -- properties --------------------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
texts = st.text(max_size=60)


@st.composite
def parts(draw: st.DrawFn) -> Part:
    kind = draw(st.sampled_from(["text", "thinking", "media", "url", "tool_use", "unknown"]))
    if kind == "text":
        return TextPart(draw(texts))
    if kind == "thinking":
        return ThinkingPart(draw(texts))
    if kind == "media":
        media_kind = draw(st.sampled_from(["image", "video", "audio", "pdf"]))
        return MediaPart(media_kind, base64_source("image/png", draw(st.binary(max_size=40))))
    if kind == "url":
        return MediaPart("image", {"type": "url", "url": "https://example.invalid/" + draw(texts)})
    if kind == "tool_use":
        return ToolUsePart(draw(texts), draw(texts), json.dumps(draw(json_values)))
    return UnknownPart({"type": "hologram", "payload": draw(json_values)})


@st.composite
def sessions(draw: st.DrawFn) -> Session:
    tools = [ToolPart(draw(texts), draw(texts), {"type": "object"}) for _ in range(draw(st.integers(0, 2)))]
    context = Context.create(draw(st.none() | texts), tools or None)
    for _ in range(draw(st.integers(0, 6))):
        role = draw(st.sampled_from(["user", "assistant"]))
        metadata = draw(st.none() | st.dictionaries(st.text(max_size=5), json_values, max_size=2))
        message = context.append(Message.create(role, draw(st.lists(parts(), max_size=3)), metadata=metadata))
        if draw(st.booleans()):
            message.record_token_count()
        if message.tool_uses():
            results = [ToolResultPart(p.call_id, draw(texts)) for p in message.tool_uses()]
            context.append_tool_results(message, results)
    context.record_hook_output(draw(texts))
    session = Session.create(draw(st.sampled_from(["A", "Böb"])), context, thread_id=draw(st.none() | texts))
    fork = draw(st.sampled_from(["none", "window", "tokens", "strip"]))
    child = {
        "none": None,
        "window": context.rolling_sequence_window(draw(st.integers(0, 3))),
        "tokens": context.rolling_token_window(draw(st.integers(0, 400))),
        "strip": context.strip_thinking(),
    }[fork]
    if child is not None:
        session.set_active_context(child)
    return session


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions())
def test_any_session_built_through_the_api_survives_save_and_load(session: Session) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(tmp)
        store.save_session(session)
        loaded = store.load_session(session.uuid)
        assert loaded.to_dict() == session.to_dict()
        assert loaded.contexts.keys() == session.contexts.keys()
        for context_id, context in session.contexts.items():
            assert loaded.contexts[context_id].to_dict() == context.to_dict()
            assert json.dumps(loaded.contexts[context_id].to_dict()) == json.dumps(context.to_dict())
        assert store.save_session(loaded) == []


@settings(max_examples=60, deadline=None)
@given(sessions(), st.data())
def test_forks_never_change_the_parents_messages(session: Session, data: st.DataObject) -> None:
    root = next(c for c in session.contexts.values() if not c.is_fork)
    before = [m.to_dict() for m in root.messages]
    before_tokens = [m.count_tokens() for m in root.messages]
    picks = data.draw(st.lists(st.integers(0, max(len(root.messages) - 1, 0)), max_size=4))
    if root.messages:
        root.fork(picks)
    root.rolling_sequence_window(data.draw(st.integers(0, 4)))
    root.rolling_token_window(data.draw(st.integers(0, 300)))
    root.strip_thinking()
    for child_id in root.children:
        child = session.contexts.get(child_id)
        if child is not None:
            for message in child.messages:
                message.content = [TextPart("overwritten in a child")]
    assert [m.to_dict() for m in root.messages] == before
    assert [m.count_tokens() for m in root.messages] == before_tokens


def test_writes_fsync_the_file_and_its_folder_unless_generating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from soap_core import _jsonio

    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(_jsonio.os, "fsync", lambda fd: synced.append(fd) or real(fd))
    _jsonio.write_text_atomic(tmp_path / "a.json", "{}")
    assert len(synced) == 2, "the file, then its folder"
    with _jsonio.unsynced_writes():
        _jsonio.write_text_atomic(tmp_path / "b.json", "{}")
    assert len(synced) == 2 and (tmp_path / "b.json").read_text() == "{}"
    _jsonio.write_text_atomic(tmp_path / "c.json", "{}")
    assert len(synced) == 4, "fsync is back after the block"
