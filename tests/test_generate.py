"""The store generator: deterministic, readable, and what our runtime and store write."""

from __future__ import annotations

import hashlib
import json
import random
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from replay import materialize, verify_store
from soap_core import (
    OBJECT_KEY,
    THREAD_ID_KEY,
    Context,
    InvocationRecord,
    MediaPart,
    Message,
    Session,
    Store,
    StoreError,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    read_calls,
    read_invocation,
    read_invocations,
    write_call,
    write_invocation,
)
from soap_gen._generate import (
    ERROR_KEY,
    GeneratedStore,
    append_message,
    append_tool_results,
    generate_store,
    record_text,
    tiny_png,
    turn_shape,
    write_call_record,
    write_invocation_record,
)
from soapwb.cli import main

SMALL = {"sessions": 40, "messages": 14, "fork_rate": 0.4, "chain_depth": 3, "seed": 11}


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under ``root`` by relative path, with the sha256 of its bytes (but the
    catalog, a cache that reading a store may create)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith(".soapwb-catalog")
    }


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GeneratedStore]:
    """One small generated store the read-only tests share (generated once)."""
    root = tmp_path_factory.mktemp("generated") / "store"
    return root, generate_store(root, **SMALL)


def loaded_sessions(root: Path) -> list[Session]:
    store = Store(root)
    return [store.load_session(s.path.name) for s in store.sessions()]


def all_invocations(sessions: list[Session]) -> dict[str, InvocationRecord]:
    found: dict[str, InvocationRecord] = {}
    for session in sessions:
        assert session.directory is not None
        for record in read_invocations(session.directory):
            found[record.id] = record
    return found


# -- determinism ----------------------------------------------------------------------------


def test_the_same_arguments_write_the_same_bytes(tmp_path: Path, small: tuple[Path, GeneratedStore]) -> None:
    again = generate_store(tmp_path / "again", **SMALL)
    assert tree_digest(tmp_path / "again") == tree_digest(small[0])
    assert {**again.as_dict(), "root": ""} == {**small[1].as_dict(), "root": ""}


def test_another_seed_writes_another_store(tmp_path: Path, small: tuple[Path, GeneratedStore]) -> None:
    generate_store(tmp_path / "other", **{**SMALL, "seed": 12})
    first, second = tree_digest(small[0]), tree_digest(tmp_path / "other")
    assert not set(first) & set(second)  # no session, context or record id in common
    assert sorted(first.values()) != sorted(second.values())


def test_sharing_the_sessions_out_over_processes_changes_no_byte(tmp_path: Path) -> None:
    shape = {"sessions": 70, "messages": 6, "fork_rate": 0.3, "chain_depth": 1, "seed": 5}
    generate_store(tmp_path / "one", **shape, processes=1)
    generate_store(tmp_path / "two", **shape, processes=2)
    assert tree_digest(tmp_path / "one") == tree_digest(tmp_path / "two")


# -- what is written ------------------------------------------------------------------------


def test_every_session_is_listed_and_loads_without_errors(small: tuple[Path, GeneratedStore]) -> None:
    root, summary = small
    listed = Store(root).sessions()
    assert len(listed) == summary.sessions == SMALL["sessions"]
    assert not any(s.broken for s in listed)
    sessions = loaded_sessions(root)
    assert all(not s.load_errors for s in sessions)
    assert sum(len(s.contexts) for s in sessions) == summary.contexts
    assert sum(len(s.active_context.messages) for s in sessions) == summary.active_messages


def test_sessions_look_like_our_runtimes(small: tuple[Path, GeneratedStore]) -> None:
    root, _ = small
    sessions = loaded_sessions(root)
    for session in sessions:
        assert session.directory == root / "agents" / session.role / session.uuid
        date, rest = session.uuid.split("-", 1)
        assert len(date) == 8 and date.isdigit() and len(rest) == 36
        assert session.state_data[OBJECT_KEY].startswith(f"{session.role}-")
        assert not session.is_active
        context = session.active_context
        assert context.system_prompt is not None and context.tool_definitions is not None
        assert [m.message_type for m in context.messages[:2]] == [
            "SystemPromptMessage",
            "ToolDefinitionsMessage",
        ]
        stamps = [m.creation_timestamp or "" for m in context.chronological()]
        assert stamps == sorted(stamps)
    threaded = [s for s in sessions if THREAD_ID_KEY in s.state_data]
    assert len(threaded) > len(sessions) * 0.7


def test_the_contexts_hold_every_kind_of_part(small: tuple[Path, GeneratedStore]) -> None:
    parts = [
        type(p)
        for s in loaded_sessions(small[0])
        for c in s.contexts.values()
        for m in c.messages
        for p in m.content
    ]
    kinds = {kind.__name__ for kind in parts}
    assert {"TextPart", "ThinkingPart", "ToolUsePart", "ToolResultPart", "ToolPart", "MediaPart"} <= kinds


def test_images_are_valid_pngs() -> None:
    png = tiny_png((10, 20, 30))
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    length, kind = struct.unpack(">I4s", png[8:16])
    assert (kind, length) == (b"IHDR", 13)
    width, height = struct.unpack(">II", png[16:24])
    idat = png.index(b"IDAT")
    (size,) = struct.unpack(">I", png[idat - 4 : idat])
    pixels = zlib.decompress(png[idat + 4 : idat + 4 + size])
    assert (width, height) == (4, 4) and pixels == (b"\x00" + bytes((10, 20, 30)) * 4) * 4


def test_text_lengths_are_skewed_with_some_long_ones(small: tuple[Path, GeneratedStore]) -> None:
    words = [
        len(p.text.split())
        for s in loaded_sessions(small[0])
        for m in s.active_context.messages
        for p in m.content
        if isinstance(p, TextPart) and not m.is_special
    ]
    words.sort()
    assert 20 <= words[len(words) // 2] <= 150
    assert words[-1] >= 300


def test_token_counts_are_the_true_counts(small: tuple[Path, GeneratedStore]) -> None:
    for session in loaded_sessions(small[0]):
        for context in session.contexts.values():
            for message in context.messages:
                assert message.token_count == message.count_tokens(), message


def test_without_token_counts_no_message_has_one(tmp_path: Path) -> None:
    generate_store(tmp_path / "s", **{**SMALL, "sessions": 6}, token_counts=False)
    messages = [m for s in loaded_sessions(tmp_path / "s") for c in s.contexts.values() for m in c.messages]
    assert messages and all(m.token_count is None for m in messages)


# -- forks, chains, calls -------------------------------------------------------------------


def test_forks_come_at_about_the_requested_rate_with_their_links(small: tuple[Path, GeneratedStore]) -> None:
    root, summary = small
    sessions = loaded_sessions(root)
    forked = [s for s in sessions if len(s.contexts) > 1]
    assert len(forked) == summary.forked_sessions
    assert 0.5 * SMALL["fork_rate"] <= len(forked) / len(sessions) <= 1.5 * SMALL["fork_rate"]
    for session in forked:
        for context in session.contexts.values():
            if context.origin_context_id is not None:
                parent = session.contexts[context.origin_context_id]
                assert context.id in parent.children
                order = [m.id for m in parent.messages]
                copied = [m.id for m in context.messages if m.id in order]
                assert len(copied) >= 3 and copied == sorted(copied, key=order.index)
                assert [m.id for m in context.messages[: len(copied)]] == copied  # then its own turns
    assert any(s.active_context.is_fork for s in forked)


def test_a_fork_rate_of_zero_makes_no_fork(tmp_path: Path) -> None:
    summary = generate_store(tmp_path / "s", **{**SMALL, "sessions": 10, "fork_rate": 0.0})
    assert summary.forked_sessions == 0 and summary.contexts == 10


def chain_depth(record: InvocationRecord, records: dict[str, InvocationRecord]) -> int:
    depth = 1
    while record.parent_invocation_id is not None:
        record = records[record.parent_invocation_id]
        depth += 1
    return depth


def test_invocation_chains_reach_the_requested_depth_and_every_link_resolves(
    small: tuple[Path, GeneratedStore],
) -> None:
    root, summary = small
    store = Store(root)
    sessions = loaded_sessions(root)
    records = all_invocations(sessions)
    assert len(records) == summary.invocations
    for record in records.values():
        if record.caller is None:
            assert record.parent_invocation_id is None
            continue
        assert record.caller.session is not None and record.callee.session is not None
        caller_dir = store.find(record.caller.session).path
        assert read_invocation(caller_dir, record.id) == record  # written into both sessions
        assert record.parent_invocation_id is not None
        parent = read_invocation(caller_dir, record.parent_invocation_id)
        assert parent is not None and parent.callee.session == record.caller.session
        assert record.id in {r.id for r in read_invocations(store.find(record.callee.session).path)}
        caller = store.load_session(record.caller.session)
        assert record.caller.context_id is not None and record.caller.message_index is not None
        message = caller.contexts[record.caller.context_id].messages[record.caller.message_index]
        assert message.id == record.caller.message_id
        assert next(u.name for u in message.tool_uses()) == "delegate"
    assert (
        max(chain_depth(r, records) for r in records.values())
        == SMALL["chain_depth"]
        == summary.max_chain_depth
    )


def test_a_chain_depth_of_one_makes_no_object_invoke_another(tmp_path: Path) -> None:
    generate_store(tmp_path / "s", **{**SMALL, "sessions": 8, "chain_depth": 1})
    records = all_invocations(loaded_sessions(tmp_path / "s"))
    assert records and all(r.caller is None for r in records.values())


def test_failed_invocations_are_recorded_as_the_runtime_records_them(
    small: tuple[Path, GeneratedStore],
) -> None:
    sessions = loaded_sessions(small[0])
    records = all_invocations(sessions)
    for session in sessions:
        assert session.directory is not None
        own = sorted(
            (r for r in read_invocations(session.directory) if r.callee.session == session.uuid),
            key=lambda r: r.started_at,
        )
        assert own and all(r.ended_at and r.outcome in ("ok", "error") for r in own)
        assert (ERROR_KEY in session.state_data) == (own[-1].outcome == "error")
    assert all((r.error is None) == (r.outcome == "ok") for r in records.values())


def test_verify_matches_every_recorded_call(small: tuple[Path, GeneratedStore]) -> None:
    root, summary = small
    results = verify_store(Store(root))
    answered = [
        c for s in loaded_sessions(root) if s.directory for c in read_calls(s.directory) if c.message_id
    ]
    assert len(results) == len(answered) > 0
    assert all(r.match for r in results), [r for r in results if not r.match][:2]
    assert summary.calls >= len(answered)


def test_a_recorded_call_is_what_materialize_rebuilds(small: tuple[Path, GeneratedStore]) -> None:
    session = next(s for s in loaded_sessions(small[0]) if len(s.contexts) > 1)
    assert session.directory is not None
    calls = read_calls(session.directory)
    for call in calls:
        if call.message_id is None:
            continue
        found = materialize(session, call.context_id, call.message_id, calls=calls)
        assert found.request == call.request and found.request_hash == call.request_hash
        assert found.call is not None and found.call.id == call.id


def test_the_long_session_is_exactly_as_long_as_asked_and_its_call_log_stops(tmp_path: Path) -> None:
    summary = generate_store(tmp_path / "s", **{**SMALL, "sessions": 3}, long_messages=401, call_log_limit=60)
    sessions = loaded_sessions(tmp_path / "s")
    long = [s for s in sessions if len(s.active_context.messages) == 401]
    assert len(long) == 1 and len(long[0].contexts) == 1 and summary.sessions == 3
    assert long[0].directory is not None
    calls = read_calls(long[0].directory)
    assert calls and max(c.message_index for c in calls) <= 60
    context = long[0].active_context
    assert sum(1 for name, _ in context.anchor_points if name.endswith(":tool_result")) > 20


# -- the pieces match the runtime and the store ---------------------------------------------


def random_steps(seed: int) -> list[tuple[str, list[Any]]]:
    rng = random.Random(seed)
    steps: list[tuple[str, list[Any]]] = []
    for i in range(60):
        if rng.random() < 0.5:
            steps.append(("message", [TextPart(f"m{i}")]))
        else:
            steps.append(("tools", [ToolUsePart(f"c{i}", "f", "{}")]))
        if rng.random() < 0.1:
            steps.append(("fork", []))
    return steps


def build(steps: list[tuple[str, list[Any]]], fast: bool) -> Context:
    tools = Message("tool", [], message_type="ToolDefinitionsMessage", id="t", creation_timestamp="t")
    context = Context.create(Message("system", [TextPart("s")], id="s", creation_timestamp="t"), tools)
    context.id = "root"
    n = 0
    for kind, parts in steps:
        n += 1
        if kind == "fork":
            child = context.rolling_sequence_window(4)
            if child is not None:
                child.id = f"fork{n}"
                context.children[-1] = child.id
                context = child
            continue
        message = Message(
            "assistant" if kind == "tools" else "user", parts, id=f"x{n}", creation_timestamp="t"
        )
        (append_message if fast else Context.append)(context, message)
        if kind == "tools":
            results = Message(
                "tool_result",
                [ToolResultPart(p.call_id, "r") for p in parts],
                id=f"r{n}",
                creation_timestamp="t",
            )
            if fast:
                append_tool_results(context, message, results)
            else:
                context.add_anchor(
                    message.id + ":tool_result", context.anchor_index("messages"), after_existing=False
                )
                context.append(results, message.id + ":tool_result")
    return context


@pytest.mark.parametrize("seed", range(5))
def test_the_generators_appends_are_context_appends(seed: int) -> None:
    steps = random_steps(seed)
    assert build(steps, fast=True).to_dict() == build(steps, fast=False).to_dict()


def test_record_files_are_what_write_call_and_write_invocation_write(
    tmp_path: Path, small: tuple[Path, GeneratedStore]
) -> None:
    for session in loaded_sessions(small[0]):
        assert session.directory is not None
        for call in read_calls(session.directory):
            write_call(tmp_path / "a", call)
            write_call_record(tmp_path / "b", call)
        for record in read_invocations(session.directory):
            write_invocation([tmp_path / "a"], record)
            write_invocation_record([tmp_path / "b"], record)
    assert len(tree_digest(tmp_path / "a")) > 100
    assert tree_digest(tmp_path / "a") == tree_digest(tmp_path / "b")


@pytest.mark.parametrize(
    "value", [{"f": 1e-05}, {"s": "caf\u00e9"}, {"s": "\x7f"}, {"a": [0.25, {"b": []}], "n": None}]
)
def test_record_text_is_dump_json(value: Any) -> None:
    assert record_text(value) == json.dumps(value, indent=2)


@pytest.mark.parametrize("schema", [False, True])
@pytest.mark.parametrize("after_prompt", range(0, 16))
def test_a_turns_shape_appends_exactly_its_messages(after_prompt: int, schema: bool) -> None:
    steps, ending = turn_shape(after_prompt, schema)
    size = {"answer": 1, "produce_output": 2, "produce_error": 1, "failure": 0}[ending]
    assert 2 * steps + size == after_prompt
    assert ending in (("produce_output", "produce_error", "failure") if schema else ("answer", "failure"))


def test_a_folder_that_is_not_empty_is_refused(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "keep.txt").write_text("mine")
    with pytest.raises(StoreError, match="not an empty folder"):
        generate_store(tmp_path / "s", **SMALL)


# -- the command ----------------------------------------------------------------------------


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_gen_store_json_prints_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("gen-store", "--sessions", "5", "--messages", "10", "--fork-rate", "0.5", "--chain-depth", "2")
    code, out, err = run_cli(capsys, *argv, "--seed", "3", "--store", str(tmp_path / "s"), "--json")
    assert (code, err) == (0, "")
    summary = json.loads(out)
    assert summary["sessions"] == 5 and summary["max_chain_depth"] == 2 and summary["seed"] == 3
    assert summary["files"] == len(tree_digest(tmp_path / "s")) and summary["seconds"] >= 0
    assert len(Store(tmp_path / "s").sessions()) == 5


def test_gen_store_prints_a_table_and_refuses_a_used_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def argv(*more: str) -> tuple[str, ...]:
        return ("gen-store", "--sessions", "2", "--store", str(tmp_path), *more)

    code, out, _ = run_cli(capsys, *argv())
    assert code == 0 and "sessions" in out and "wrote" in out
    code, out, err = run_cli(capsys, *argv())
    assert code == 1 and out == "" and err.startswith("soapwb: error: ") and "not an empty folder" in err


def test_gen_store_rejects_impossible_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "gen-store", "--chain-depth", "9", "--store", str(tmp_path / "s"))
    assert code == 2 and "--chain-depth" in err
    assert not (tmp_path / "s").exists()


def test_images_ride_in_prompts(small: tuple[Path, GeneratedStore]) -> None:
    prompts = [m for s in loaded_sessions(small[0]) for m in s.active_context.messages if m.role == "user"]
    with_images = [m for m in prompts if any(isinstance(p, MediaPart) for p in m.content)]
    assert with_images
    assert all(isinstance(m.content[0], TextPart) for m in with_images)
