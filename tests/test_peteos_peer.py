"""Our store, codec and materialize against real peteos 0.5.8 and 0.6.13.

Every expectation here comes from peteos itself: ``tests/peers/`` builds a store with each
release in its own venv, driving real ``invoke_agent`` calls against a scripted OpenAI stub,
and writes ``ground_truth.json`` beside it: every session with its role and threads, per
context file and display index k the body ``OpenAIChatBot._build_body`` builds for the
first k messages, per message peteos' token counts, and every request the stub really
received, tagged with the context peteos built it from and the message its answer became.

Where a store cannot tell a value, a difference is accepted only if materialize says so
in ``.notes`` (see :func:`explained`): the model name (0.5 records none; 0.6 only in the
``origin`` of answer parts), the system prompt of a call made while an output schema was
set (peteos keeps the last materialization only). The request behind the first answer
after one of peteos' proactive reductions is the context peteos had *before* its
``before_send_to_chatbot`` hook forked (the answer goes to the fork): materialize must
say so in ``sent_from`` and give that body exactly.
"""

from __future__ import annotations

import difflib
import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deepdiff import DeepDiff

import soap_core
from local_model import LocalModelServer
from replay import Overrides, materialize, replay
from soap_core import SAVE_LOCKS_DIR, Session, Store, read_calls
from soap_core._catalog import is_catalog_file
from soap_core.runtime import LLMEndpoint
from tests.apptest import open_app_page
from tests.peers.fixtures import PeerStore, peteos05_store, peteos06_store, peteos_stub  # noqa: F401

PART_TYPES = {"text", "thinking", "tool_use", "tool_result", "image", "pdf", "audio", "video", "tool"}
MAX_REPORTED = 8


@pytest.fixture(params=["0.5", "0.6"], ids=["peteos-0.5.8", "peteos-0.6.13"])
def peer(request: pytest.FixtureRequest) -> PeerStore:
    store: PeerStore = request.getfixturevalue(
        "peteos05_store" if request.param == "0.5" else "peteos06_store"
    )
    return store


@pytest.fixture
def peer_copy(peer: PeerStore, tmp_path: Path) -> PeerStore:
    """A copy of the peer store that a test may change."""
    return peer.copy_to(tmp_path / "store")


def truth_sessions(peer: PeerStore) -> dict[str, dict[str, Any]]:
    return {s["uuid"]: s for s in peer.ground_truth["sessions"]}


def expected_role(peer: PeerStore, truth: dict[str, Any]) -> str:
    """0.6: the class of the instance whose thread_store claims the session; 0.5: its folder."""
    if peer.layout == "0.6":
        role: str = truth["role"] if truth["role"] is not None else soap_core.UNKNOWN_ROLE
        return role
    folder: str = truth["role_folder"]
    return folder


def snapshot(root: Path) -> dict[str, bytes]:
    """The store's files (not the workbench's catalog and save locks) with their bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not is_catalog_file(p) and SAVE_LOCKS_DIR not in p.parts
    }


def report(problems: list[str], what: str) -> str:
    shown = "\n\n".join(problems[:MAX_REPORTED])
    more = f"\n\n... and {len(problems) - MAX_REPORTED} more" if len(problems) > MAX_REPORTED else ""
    return f"{len(problems)} {what}:\n\n{shown}{more}"


def describe_difference(expected: Any, got: Any) -> str:
    """A deepdiff of the two values, or where their JSON texts part if only key order differs."""
    diff = DeepDiff(expected, got, verbose_level=2)
    if diff:
        text = diff.pretty() if hasattr(diff, "pretty") else str(diff)
        return text[:3000]
    want, have = json.dumps(expected), json.dumps(got)
    at = next(
        (i for i, (a, b) in enumerate(zip(want, have, strict=False)) if a != b), min(len(want), len(have))
    )
    return f"same content, other key order at character {at}:\n  peteos: ...{want[max(0, at - 80) : at + 80]}\n  ours:   ...{have[max(0, at - 80) : at + 80]}"


def explained(got: Any, expected: dict[str, Any]) -> str | None:
    """None if ``got`` (a Materialized) gives ``expected`` (peteos' body) exactly, key order
    included, up to what the files cannot tell and the notes say; else what is wrong."""
    request = dict(got.request)
    want = dict(expected)
    notes = " ".join(got.notes).lower()
    problems = []
    if request.get("model") != want.get("model"):
        if request.get("model") is None and "model" in notes:
            request.pop("model", None)
            want.pop("model", None)
        else:
            problems.append(f"model {request.get('model')!r}, peteos sent {want.get('model')!r} (no note)")
    ours_messages, their_messages = request.get("messages"), want.get("messages")
    if (
        isinstance(ours_messages, list)
        and isinstance(their_messages, list)
        and len(ours_messages) == len(their_messages)
        and ours_messages
        and ours_messages[1:] == their_messages[1:]
        and ours_messages[0] != their_messages[0]
        and their_messages[0].get("role") == "system"
        and "system prompt" in notes
    ):
        request["messages"] = their_messages
    if json.dumps(request) != json.dumps(want):
        problems.append(describe_difference(want, request))
    if problems:
        return "\n".join(problems) + (f"\n  notes: {got.notes}" if got.notes else "")
    return None


# -- the ground truth itself ---------------------------------------------------------------------


def test_peteos_wrote_every_part_type_and_every_kind_of_fork(peer: PeerStore) -> None:
    """Guards the harness: if peteos stopped producing a case, the tests below would
    silently cover less."""
    truth = peer.ground_truth
    sessions = truth["sessions"]
    contexts = [c for s in sessions for c in s["contexts"]]
    messages = [m for c in contexts for m in c["messages"]]
    parts = {t for m in messages for t in m["part_types"]}
    methods = {f["method"] for f in truth["forks"]}
    on_disk = {c["id"] for c in contexts}
    discarded = {child for c in contexts for child in c["children"] if child not in on_disk}
    orphans = [c["id"] for c in contexts if c["origin_context_id"] and c["origin_context_id"] not in on_disk]
    stale = [m for m in messages if m["cached"] is not None and m["cached"] != m["computed"]]
    kinds = {r["kind"] for r in truth["requests"]}
    sent_elsewhere = [
        r
        for r in truth["requests"]
        if r["produced"] and r["sent_context"]["context_id"] != r["produced"]["context_id"]
    ]
    print(
        f"\npeteos {truth['peteos_version']}: {len(sessions)} sessions, {len(contexts)} contexts, "
        f"{len(messages)} messages, {len(truth['requests'])} requests {sorted(kinds)}; parts {sorted(parts)}; "
        f"forks {sorted(methods)}; {len(discarded)} discarded children, {len(orphans)} contexts whose "
        f"parent has no file, {len(stale)} stale cached counts, {len(sent_elsewhere)} answers appended "
        f"to a fork of the context that was sent; built in {peer.build_seconds:.1f} s"
    )
    assert parts >= PART_TYPES
    assert {"strip_thinking", "rolling_token_window", "rolling_sequence_window"} <= methods
    assert discarded and orphans and stale and sent_elsewhere
    assert {"chat", "probe", "http_error"} <= kinds
    assert all(r["produced"] for r in truth["requests"] if r["kind"] == "chat")
    assert truth["stub"] == {"pending": 0, "exhausted": 0}
    assert not truth["unconsumed"]
    if peer.layout == "0.6":
        assert any(s["role"] is None for s in sessions), "the transient session should be unclaimed"


def test_peteos_reads_back_the_store_it_wrote(peer_copy: PeerStore) -> None:
    """Guards the harness: the driver's ``load`` works on an untouched store, and writes
    nothing (peteos saves a session when it is garbage-collected unless told not to)."""
    before = snapshot(peer_copy.path)
    loaded = peer_copy.peteos_load()
    assert loaded["errors"] == []
    assert {s["uuid"] for s in loaded["sessions"]} == set(truth_sessions(peer_copy))
    assert snapshot(peer_copy.path) == before


# -- listing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["peteos.json folder", "config dir", "sessions folder"])
def test_the_listing_shows_every_session_peteos_wrote_with_its_role(peer: PeerStore, where: str) -> None:
    path = {
        "peteos.json folder": peer.path,
        "config dir": peer.config_dir,
        "sessions folder": peer.sessions_dir,
    }[where]
    summaries = {s.uuid: s for s in Store(path).sessions()}
    want = truth_sessions(peer)
    assert sorted(summaries) == sorted(want)
    problems = []
    for session_uuid, truth in want.items():
        got = summaries[session_uuid]
        checks = {
            "error": (got.error, None),
            "role": (got.role, expected_role(peer, truth)),
            "active_context_id": (got.active_context_id, truth["active_context_id"]),
            "context_files": (got.context_files, len(truth["contexts"])),
            "is_active": (got.is_active, truth["is_active"]),
        }
        problems += [
            f"{session_uuid} {k}: ours {a!r}, peteos {b!r}" for k, (a, b) in checks.items() if a != b
        ]
        threads = {truth["state_thread_id"], *truth["thread_ids"]} - {None}
        if (got.thread_id or None) not in (threads or {None}):
            problems.append(f"{session_uuid} thread_id: ours {got.thread_id!r}, peteos {sorted(threads)}")
    assert not problems, report(problems, "differences from peteos")


def test_a_session_folder_no_instance_claims_is_listed_with_the_unknown_role(peer_copy: PeerStore) -> None:
    """0.6: only an instance's thread_store names a session's class, so a copied session
    folder belongs to nobody. 0.5: the folder it sits in is its role."""
    truth = next(s for s in peer_copy.ground_truth["sessions"] if s["role"] is not None)
    source = peer_copy.path / truth["dir"]
    new_uuid = f"20990101-{uuid.uuid4()}"
    target = source.parent / new_uuid
    shutil.copytree(source, target)
    data = json.loads((target / "session.json").read_text())
    data["uuid"] = new_uuid
    (target / "session.json").write_text(json.dumps(data, indent=2))

    summaries = {s.uuid: s for s in Store(peer_copy.path).sessions()}

    assert new_uuid in summaries
    unclaimed = soap_core.UNKNOWN_ROLE if peer_copy.layout == "0.6" else truth["role_folder"]
    assert summaries[new_uuid].role == unclaimed
    assert summaries[truth["uuid"]].role == expected_role(peer_copy, truth)


# -- loading ---------------------------------------------------------------------------------------


def test_every_context_loads_with_peteos_token_counts(peer: PeerStore) -> None:
    """``count_tokens()`` is the true count (peteos' ``_compute_token_count``); ``token_count``
    is the file's cached one, which peteos reuses without recounting (so it may be stale)."""
    store = Store(peer.path)
    problems = []
    for truth in peer.ground_truth["sessions"]:
        session = store.load_session(truth["uuid"])
        assert sorted(session.contexts) == sorted(c["id"] for c in truth["contexts"])
        for context_truth in truth["contexts"]:
            context = session.contexts[context_truth["id"]]
            assert [m.id for m in context.messages] == [m["id"] for m in context_truth["messages"]]
            for message, m in zip(context.messages, context_truth["messages"], strict=True):
                where = f"{context.id}[{m['index']}] ({m['role']}, {m['part_types']})"
                if message.count_tokens() != m["computed"]:
                    problems.append(f"{where}: count_tokens {message.count_tokens()}, peteos {m['computed']}")
                if message.token_count != m["cached"]:
                    problems.append(f"{where}: token_count {message.token_count}, file {m['cached']}")
                stale = m["cached"] is not None and m["cached"] != m["computed"]
                if message.token_count_is_stale != stale:
                    problems.append(
                        f"{where}: token_count_is_stale {message.token_count_is_stale}, peteos {stale}"
                    )
    assert not problems, report(problems, "token counts differ from peteos'")


def test_saving_every_loaded_session_rewrites_peteos_files_byte_for_byte(peer_copy: PeerStore) -> None:
    before = snapshot(peer_copy.path)
    untouched = {
        p: p.stat().st_mtime_ns
        for p in [*peer_copy.config_dir.glob("instances/*/*"), *peer_copy.config_dir.glob("roles/*/*")]
    }
    store = Store(peer_copy.path)
    for summary in store.sessions():
        session = store.load_session(summary.uuid)
        for path in summary.path.glob("*.json"):
            path.unlink()
        store.save_session(session)

    after = snapshot(peer_copy.path)

    assert sorted(after) == sorted(before)
    differing = [name for name in before if before[name] != after[name]]
    details = [
        f"{name}:\n"
        + "".join(
            list(
                difflib.unified_diff(
                    before[name].decode(errors="replace").splitlines(keepends=True),
                    after[name].decode(errors="replace").splitlines(keepends=True),
                    "peteos",
                    "ours",
                    n=2,
                )
            )[:40]
        )
        for name in differing
    ]
    assert not differing, report(details, "files differ from what peteos wrote")
    assert {p: p.stat().st_mtime_ns for p in untouched} == untouched


def test_peteos_loads_the_forks_we_write_into_its_store(peer_copy: PeerStore) -> None:
    store = Store(peer_copy.path)
    forks: dict[str, tuple[str, Path]] = {}
    for summary in store.sessions():
        session = store.load_session(summary.uuid)
        context = session.active_context
        child = context.rolling_token_window(max(1, context.total_token_count() // 2))
        if child is None:
            continue
        session.set_active_context(child)
        written = store.save_session(session)
        new_files = [p for p in written if p.name != "session.json"]
        assert len(new_files) >= 1
        forks[summary.uuid] = (child.id, new_files[0])
    assert len(forks) >= 3

    truth = truth_sessions(peer_copy)
    for session_uuid, (_, path) in forks.items():
        folder = peer_copy.path / truth[session_uuid]["dir"]
        assert path.parent.resolve() == folder.resolve(), f"{path} is not in peteos' folder {folder}"
    loaded = peer_copy.peteos_load()
    assert loaded["errors"] == []
    by_uuid = {s["uuid"]: s for s in loaded["sessions"]}
    for session_uuid, (child_id, path) in forks.items():
        entry = by_uuid[session_uuid]
        assert entry["active_context_id"] == child_id
        assert entry["active_context_loaded"] == child_id
        assert entry["contexts"][path.name] == json.loads(path.read_text()), (
            "peteos had to fill in defaults: our file lacks keys it writes"
        )
    if peer_copy.layout == "0.6":
        threads = {
            info["session"]: info["active_context_id"]
            for restored in loaded["restored"]
            if "threads" in restored
            for info in restored["threads"].values()
        }
        for session_uuid, (child_id, _) in forks.items():
            if session_uuid in threads:
                assert threads[session_uuid] == child_id


# -- materialize -----------------------------------------------------------------------------------


def _bodies(peer: PeerStore) -> dict[str, list[dict[str, Any]]]:
    return {c["id"]: c["bodies"] for s in peer.ground_truth["sessions"] for c in s["contexts"]}


def test_every_prefix_of_every_context_materializes_to_the_body_peteos_builds(peer: PeerStore) -> None:
    """For context C and display index k, materialize gives the request of the call that
    produced message k: C's first k messages, or, for a message a fork copied, its
    ancestor's prefix up to that message (which must be the same message), or, for the
    first answer in a compaction fork, the whole parent (``sent_from``; the test of the
    real requests below shows that this is what peteos sent). Either way it must be the
    body peteos' ``_build_body`` builds from those messages."""
    store = Store(peer.path)
    bodies = _bodies(peer)
    problems = []
    for truth in peer.ground_truth["sessions"]:
        session = store.load_session(truth["uuid"])
        for context_truth in truth["contexts"]:
            context = session.contexts[context_truth["id"]]
            for k in range(len(context_truth["bodies"])):
                label = f"{truth['role']}/{context.id} at {k}"
                try:
                    got = materialize(session, context, k)
                except Exception as exc:
                    problems.append(f"{label}: {type(exc).__name__}: {exc}")
                    continue
                if (got.context_id, got.index) != (context.id, k):
                    origin = session.contexts.get(got.context_id)
                    same = (
                        origin is not None
                        and k < len(context.messages)
                        and got.index < len(origin.messages)
                        and origin.messages[got.index].id == context.messages[k].id
                    )
                    if not same or got.context_id not in bodies:
                        problems.append(f"{label}: materialized from {got.context_id} at {got.index}")
                        continue
                # The first answer in a compaction fork was sent the unreduced parent.
                sent_id, sent_length = got.sent_from or (got.context_id, got.index)
                problem = explained(got, bodies[sent_id][sent_length])
                if problem:
                    problems.append(f"{label}:\n{problem}")
    assert not problems, report(problems, "materialized requests differ from peteos' _build_body")


def test_every_request_peteos_sent_materializes_from_the_message_it_produced(peer: PeerStore) -> None:
    store = Store(peer.path)
    sessions: dict[str, Session] = {}
    problems = []
    for request in peer.ground_truth["requests"]:
        produced = request["produced"]
        if request["kind"] != "chat" or produced is None:
            continue
        if produced["session"] not in sessions:
            sessions[produced["session"]] = store.load_session(produced["session"])
        session = sessions[produced["session"]]
        label = f"request {request['number']} ({request['tag']}) -> {produced['context_id']} at {produced['index']}"
        try:
            got = materialize(session, produced["context_id"], produced["index"])
        except Exception as exc:
            problems.append(f"{label}: {type(exc).__name__}: {exc}")
            continue
        sent = request["sent_context"]
        elsewhere = sent["context_id"] != produced["context_id"] or sent["length"] != produced["index"]
        # peteos sent another context than the one its answer went to: we must say which
        if elsewhere and got.sent_from != (sent["context_id"], sent["length"]):
            problems.append(f"{label}: peteos sent {sent}, materialize says {got.sent_from}")
        problem = explained(got, request["body"])
        if problem:
            problems.append(f"{label}:\n{problem}")
    assert not problems, report(problems, "requests differ from what peteos really sent")


# -- forks with peteos' semantics ------------------------------------------------------------------


def test_peteos_token_window_keeps_what_peteos_own_rolling_token_window_kept(peer: PeerStore) -> None:
    """Every ``rolling_token_window`` fork peteos made, redone from its parent file with
    ``Context.peteos_token_window`` (cached counts): the same messages with the same cached
    counts. 0.6.13 drops tool results while iterating a set, so there ours may keep more:
    only tool results whose calls are kept, which peteos dropped by mistake."""
    store = Store(peer.path)
    sessions = {s["uuid"]: store.load_session(s["uuid"]) for s in peer.ground_truth["sessions"]}
    contexts = {cid: (session, c) for session in sessions.values() for cid, c in session.contexts.items()}
    checked, problems = 0, []
    for fork in peer.ground_truth["forks"]:
        if fork["method"] != "rolling_token_window" or fork["parent"] not in contexts:
            continue
        if fork["child"] not in contexts:
            continue
        parent, child = contexts[fork["parent"]][1], contexts[fork["child"]][1]
        if len(parent.messages) != fork["parent_messages"]:
            continue  # the parent grew after the fork: not the context peteos windowed
        ours = parent.peteos_token_window(int(fork["args"][0]), strip_dangling_results=peer.layout == "0.6")
        assert ours is not None, f"{fork}: peteos forked, ours found nothing to drop"
        in_parent = {m.id for m in parent.messages}
        theirs = [m for m in child.messages if m.id in in_parent]
        ours_ids, their_ids = [m.id for m in ours.messages], [m.id for m in theirs]
        extra = [m for m in ours.messages if m.id not in set(their_ids)]
        kept_calls = {p.call_id for m in ours.messages for p in m.tool_uses()}
        wrongly_dropped = all(
            m.role == "tool_result" and {p.call_id for p in m.tool_results()} <= kept_calls for m in extra
        )
        if [i for i in ours_ids if i in set(their_ids)] != their_ids or (extra and not wrongly_dropped):
            problems.append(f"{fork['child']}: peteos kept {their_ids}, ours {ours_ids}")
        if peer.layout == "0.5" and extra:
            problems.append(f"{fork['child']}: 0.5 drops no results, ours kept more: {[m.id for m in extra]}")
        # None: a later fork of the child dropped that result as dangling and, as peteos
        # does, forgot its cached count in the child, which was saved after.
        counts = {m.id: m.token_count for m in theirs if m.token_count is not None}
        if any(m.token_count != counts[m.id] for m in ours.messages if m.id in counts):
            problems.append(f"{fork['child']}: cached counts differ from the ones peteos carried")
        checked += 1
    assert checked >= 3, "the peer store holds too few rolling_token_window forks to compare"
    assert not problems, report(problems, "windows differ from peteos' own")


# -- in the workbench ------------------------------------------------------------------------------


def test_the_sessions_page_lists_a_peteos_store_with_roles_and_instances(peer: PeerStore) -> None:
    at = open_app_page(peer.path, "sessions")
    frame = at.dataframe[0].value
    table = frame.astype(object).where(frame.notna(), None)
    truth = truth_sessions(peer)
    assert sorted(table["session"]) == sorted(truth)
    for row in table.to_dict("records"):
        assert row["role"] == expected_role(peer, truth[row["session"]])
    if peer.layout == "0.6":  # two instances of one class: the instance tells them apart
        claimed = {
            s["uuid"]: s["instances"][0] if s["instances"] else None for s in peer.ground_truth["sessions"]
        }
        assert {r["session"]: r["instance"] for r in table.to_dict("records")} == claimed
    else:
        assert "instance" not in table.columns


def test_the_context_and_replay_pages_open_every_peteos_session(peer: PeerStore) -> None:
    generation = "peteos-0.6" if peer.layout == "0.6" else "peteos-0.5"
    for session_uuid in truth_sessions(peer):
        context = open_app_page(peer.path, "context", session=session_uuid)
        assert not context.error, [e.value for e in context.error]
        replay_page = open_app_page(peer.path, "replay", session=session_uuid)
        assert not replay_page.error, [e.value for e in replay_page.error]
        if any("no assistant message" in i.value for i in replay_page.info):
            continue  # the bare Session.create() one: nothing to replay, and the page says so
        assert any(t.value.startswith(f"Built as {generation} sends it") for t in replay_page.text)


def _request_with(
    store: Store, wanted: Callable[[list[dict[str, Any]]], bool], what: str
) -> tuple[Session, Any]:
    """A materialized peteos request the local model's server can take and that ``wanted``
    accepts. The server's chat template needs every ``content`` a string: peteos sends
    multi-part text (and media) as ``content`` items, which it rejects, so only requests
    whose messages carry string contents, or none (a tool-only assistant turn), qualify.
    Sessions are tried in a fixed order, so which one is picked does not depend on the
    listing's order."""
    for summary in sorted(store.sessions(), key=lambda s: s.uuid):
        session = store.load_session(summary.uuid)
        for context_id in sorted(session.contexts):
            context = session.contexts[context_id]
            for k, message in enumerate(context.messages):
                if message.role != "assistant":
                    continue
                found = materialize(session, context, k)
                messages = found.request["messages"]
                servable = all(
                    isinstance(m.get("content"), str) or (m.get("role") == "assistant" and "content" not in m)
                    for m in messages
                )
                if servable and wanted(messages):
                    return session, found
    pytest.fail(f"no peteos request the local server takes with {what}")


def _all_plain(messages: list[dict[str, Any]]) -> bool:
    return all(isinstance(m.get("content"), str) for m in messages)


def _has_a_content_less_turn(messages: list[dict[str, Any]]) -> bool:
    return any(m.get("role") == "assistant" and "content" not in m for m in messages)


def _plain_request(store: Store) -> tuple[Session, Any]:
    return _request_with(store, _all_plain, "plain string contents")


def test_a_replay_of_a_peteos_session_sends_peteoss_body_to_the_local_model(
    peer_copy: PeerStore, llm_server: LocalModelServer
) -> None:
    """A replay re-sends the materialized body in peteos's shape (with the override), as a
    fork; the session's own files stay as peteos wrote them."""
    store = Store(peer_copy.path)
    before = snapshot(peer_copy.path)
    session, found = _plain_request(store)
    [run] = replay(store, session, found, LLMEndpoint(llm_server.base_url), Overrides(max_tokens=16))
    assert run.ok, run.error
    expected = {**found.request, "max_tokens": 16}
    expected.setdefault("model", LLMEndpoint(llm_server.base_url).model)
    assert json.dumps(run.request, sort_keys=True) == json.dumps(expected, sort_keys=True)
    assert list(run.request)[:3] == ["model", "stream", "max_tokens"]
    after = snapshot(peer_copy.path)
    assert {k: after[k] for k in before} == before
    [call] = [c for c in read_calls(session.directory or Path()) if c.id == run.call_id]
    assert call.request == run.request and call.response is not None
    rematerialized = materialize(store.load_session(session.uuid), run.fork_id, -1)
    assert rematerialized.request_hash == run.request_hash  # the fork's record gives it back


def test_a_peteos_body_with_a_tool_only_turn_replays_against_the_local_model(
    peer_copy: PeerStore, llm_server: LocalModelServer
) -> None:
    """peteos leaves ``content`` out of a tool-only assistant turn. The replay sends the
    body as peteos did (the recorded request keeps the turn without content), and the
    local server's chat format takes it; nothing already saved changes."""
    store = Store(peer_copy.path)
    session, found = _request_with(store, _has_a_content_less_turn, "a content-less assistant turn")
    before = snapshot(peer_copy.path)
    [run] = replay(
        store, session, found, LLMEndpoint(llm_server.base_url, max_retries=0), Overrides(max_tokens=8)
    )
    assert run.ok, run.error
    assert any(m.get("role") == "assistant" and "content" not in m for m in run.request["messages"])
    after = snapshot(peer_copy.path)
    assert {k: after[k] for k in before} == before


def test_a_broken_instance_file_is_reported_and_its_sessions_stay_listed(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Only 0.6 writes instance files."""
    peer: PeerStore = request.getfixturevalue("peteos06_store")
    peer_copy = peer.copy_to(tmp_path / "store")
    [instance_file, *_] = sorted((peer_copy.config_dir / "instances").glob("*/agentic_object.json"))
    claimed = set(json.loads(instance_file.read_text())["thread_store"].values())
    instance_file.write_text('{"class": {"qualname": "Ledger"}, "thread_store": ')  # cut short
    before = snapshot(peer_copy.path)
    store = Store(peer_copy.path)
    listed = {s.uuid: s.role for s in store.sessions()}
    assert set(truth_sessions(peer_copy)) == set(listed)
    assert all(listed[uuid] == soap_core.UNKNOWN_ROLE for uuid in claimed)
    [problem] = store.instance_problems()
    assert str(instance_file) in str(problem) and "not valid JSON" in str(problem)
    done = subprocess.run(
        [sys.executable, "-m", "soapwb.cli", "ls", "--store", str(peer_copy.path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and f"broken instance: {instance_file}" in done.stdout
    at = open_app_page(peer_copy.path, "sessions")
    relative = str(instance_file.relative_to(peer_copy.path))  # the page names it inside the store,
    shown = [w.value.replace("\\", "") for w in at.warning]  # after the problem (markdown-escaped)
    assert any(
        s.startswith("unreadable: ") and s.index("not valid JSON") < s.index(relative) for s in shown
    ), shown
    assert snapshot(peer_copy.path) == before


def test_a_peteos_session_reruns_over_http_with_its_recorded_tool_results(
    peer_copy: PeerStore,
) -> None:
    """The agent's loop again from a tool-calling answer of a real peteos store: the first
    request is the body peteos built there, the repeated tool call is served from the
    record, and nothing peteos wrote changes."""
    from replay import rerun
    from tests.peers.openai_stub import OpenAIStub

    store = Store(peer_copy.path)
    for summary in store.sessions():
        session = store.load_session(summary.uuid)
        context = session.active_context
        answered = {p.call_id for m in context.messages for p in m.tool_results()}
        k = next(
            (
                i
                for i, m in enumerate(context.messages)
                if m.role == "assistant"
                and m.tool_uses()
                and all(u.call_id in answered for u in m.tool_uses())
                and materialize(session, context, i).sent_from is None
            ),
            None,
        )
        if k is not None:
            break
    else:
        pytest.fail("no tool-calling answer in the peer store")
    found = materialize(session, context, k)
    uses = context.messages[k].tool_uses()
    script = [
        {
            "tool_calls": [
                {"id": f"r{n}", "name": u.name, "arguments": u.arguments} for n, u in enumerate(uses)
            ]
        },
        {"content": "done again"},
    ]
    before = snapshot(peer_copy.path)
    with OpenAIStub(script) as stub:
        result = rerun(store, session, context, k, LLMEndpoint(stub.base_url, max_retries=0))
        first = stub.bodies[0]
    assert result.ok, result.error
    assert [t["how"] for t in result.tools] == ["recorded"] * len(uses)
    assert json.dumps(first) == json.dumps(
        found.request if "model" in found.request else {"model": "local", **found.request}
    )
    after = snapshot(peer_copy.path)
    assert {k: after[k] for k in before} == before
