"""The peers benchmark compares like with like: at a tiny scale (20 conversations, one of
about 50 turns), LangGraph's SqliteSaver and llm's logs database hold the conversations
of our store, message for message, and the rows written without their write paths read
back as the rows those paths write."""

from __future__ import annotations

import dataclasses
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.sqlite", reason="langgraph-checkpoint-sqlite is not installed")
pytest.importorskip("langgraph.channels.delta", reason="this langgraph has no DeltaChannel (before 1.1)")
pytest.importorskip("llm.logs", reason="llm is not installed (or too old to have its message store)")
pytest.importorskip("sqlite_utils", reason="sqlite-utils (llm's) is not installed")

from benchmarks import bench_peers as bp
from benchmarks._harness import Bench
from soap_core import Store

SNAPSHOTS = 8
"""A small snapshot frequency, so that reads cross several snapshots."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[bp.Setup]:
    built = bp.prepare(
        tmp_path_factory.mktemp("peers"), sessions=20, long_messages=250, snapshot_frequency=SNAPSHOTS
    )
    yield built
    built.close()


def _steps(turns: int) -> list[int]:
    return sorted({0, 1, SNAPSHOTS - 1, SNAPSHOTS, SNAPSHOTS + 1, turns // 2, turns - 1})


def test_the_store_has_the_asked_shape(setup: bp.Setup) -> None:
    assert len(setup.conversations) == 20
    assert len(Store(setup.root).sessions()) == 20
    assert len(setup.long.messages) >= 240  # 250 with the tool definitions, which peers keep apart
    assert setup.long.turns >= 30
    assert all(c.turns >= 1 and c.ends[-1] == len(c.messages) for c in setup.conversations)


def test_langgraph_holds_our_state_at_every_asked_step(setup: bp.Setup) -> None:
    peer = setup.langgraph
    assert peer is not None, setup.langgraph_error
    session = Store(setup.root).load_session(setup.long.uuid)
    messages = session.active_context.messages
    configs = peer.configs[setup.long.uuid]
    assert len(configs) == setup.long.turns
    for k in _steps(setup.long.turns):
        ours = bp.our_texts(messages[: setup.long.our_ends[k]])
        assert bp.langchain_texts(peer.state(configs[k])) == ours, f"step {k}"
        assert ours == bp.peer_texts(setup.long.messages[: setup.long.ends[k]])
    for conversation in setup.sample:
        latest = peer.state({"configurable": {"thread_id": conversation.uuid}})
        assert bp.langchain_texts(latest) == bp.peer_texts(conversation.messages)


def _rows(peer: bp.LangGraphPeer, thread: str) -> list[dict[str, Any]]:
    """Each checkpoint of a thread, oldest first, as the saver gives it back."""
    tuples = list(peer.saver.list({"configurable": {"thread_id": thread}}))[::-1]
    return [
        {
            "metadata": t.metadata,
            "snapshot": sorted(t.checkpoint["channel_values"]),
            "versions_seen": t.checkpoint["versions_seen"],
            "writes": [(channel, len(value)) for _task, channel, value in t.pending_writes or []],
            "state": bp.langchain_texts(peer.state(t.config)),
        }
        for t in tuples
    ]


def test_langgraph_rows_are_those_update_state_writes(setup: bp.Setup, tmp_path: Path) -> None:
    """The same turns written through ``graph.update_state``, one call a turn, give the
    same checkpoints: the same metadata, snapshots, writes and state at every step."""
    turns = [
        bp.langchain_messages(setup.long.turn(k)) for k in range(min(setup.long.turns, 2 * SNAPSHOTS + 3))
    ]
    direct = bp.open_langgraph(tmp_path / "direct.sqlite", SNAPSHOTS)
    public = bp.open_langgraph(tmp_path / "public.sqlite", SNAPSHOTS)
    try:
        bp.write_langgraph_thread(direct.saver, "t", turns, SNAPSHOTS)
        config: dict[str, Any] = {"configurable": {"thread_id": "t"}}
        for batch in turns:
            config = public.graph.update_state(config, {"messages": batch}, as_node="answer")
        expected = _rows(public, "t")
        assert len(expected) == len(turns)
        assert sum(1 for row in expected if row["snapshot"]) >= 3
        assert _rows(direct, "t") == expected
    finally:
        direct.close()
        public.close()


def test_a_langgraph_fork_holds_the_state_at_its_step(setup: bp.Setup) -> None:
    peer = setup.langgraph
    assert peer is not None
    configs = peer.configs[setup.long.uuid]
    k = SNAPSHOTS + 3
    forked = bp.langgraph_fork(peer, configs[k])
    assert forked["configurable"]["checkpoint_id"] != configs[k]["configurable"]["checkpoint_id"]
    assert bp.langchain_texts(peer.state(forked)) == bp.peer_texts(setup.long.messages[: setup.long.ends[k]])
    assert (
        peer.graph.get_state(forked).parent_config["configurable"]["checkpoint_id"]
        == (configs[k]["configurable"]["checkpoint_id"])
    )
    latest = peer.state({"configurable": {"thread_id": setup.long.uuid}})
    assert bp.langchain_texts(latest) == bp.peer_texts(setup.long.messages[: setup.long.ends[k]])


def test_llm_holds_our_conversations(setup: bp.Setup) -> None:
    assert setup.llm_path is not None, setup.llm_error
    log = bp.open_llm(setup.llm_path)
    store = Store(setup.root)
    for conversation in [setup.long, *setup.sample]:
        ours = bp.our_texts(store.load_session(conversation.uuid).active_context.messages)
        assert bp.llm_texts(bp.llm_conversation(log, conversation.uuid)) == ours
        calls = sum(1 for m in conversation.messages[1:] if m.role == "assistant")
        assert len(bp.llm_logs_rows(log, conversation.uuid)) == calls
    assert log.verify() == []


def test_llm_rows_are_those_its_log_store_writes(setup: bp.Setup, tmp_path: Path) -> None:
    """llm's own ``ensure_chain`` stores the long conversation at the same tip hash, with
    the same message and part rows."""
    ours = bp.open_llm(setup.llm_path)
    theirs = bp.open_llm(tmp_path / "theirs.db")
    tip = theirs.ensure_chain([bp.llm_message(m) for m in setup.long.messages])
    assert tip == ours.thread_tip(setup.long.uuid)

    def chain(log: Any) -> list[tuple[Any, ...]]:
        rows = []
        hash_: str | None = tip
        while hash_ is not None:
            message = next(iter(log.db.query("select * from messages where hash = ?", [hash_])))
            parts = log.db.execute(
                "select position, type, tool_name, text, payload from parts where message_hash = ? order by position",
                [hash_],
            ).fetchall()
            rows.append((message["hash"], message["role"], message["provider_metadata"], parts))
            hash_ = message["parent_hash"]
        return rows

    assert chain(ours) == chain(theirs)


def test_llm_search_rows_are_those_its_query_derives(setup: bp.Setup, tmp_path: Path) -> None:
    """The turn_search rows written directly are those TURN_SEARCH_INSERT_SQL (what
    ``LogStore.log`` runs for each turn) derives from the stored turns."""
    import sqlite_utils
    from llm.logs import TURN_SEARCH_INSERT_SQL

    copy = tmp_path / "copy.db"
    shutil.copy(setup.llm_path, copy)
    db = sqlite_utils.Database(copy)
    rows = "select turn_id, prompt, response from turn_search order by turn_id"
    ours = db.execute(rows).fetchall()
    assert len(ours) > 20
    db.execute("delete from turn_search")
    for (turn,) in db.execute("select id from turns").fetchall():
        db.execute(TURN_SEARCH_INSERT_SQL, {"turn_id": turn})
    assert db.execute(rows).fetchall() == ours
    found = db.execute("select count(*) from turn_search_fts where turn_search_fts match 'the'").fetchone()
    assert found[0] > 0


def test_every_party_lists_every_conversation(setup: bp.Setup) -> None:
    assert setup.langgraph is not None and setup.llm_path is not None
    uuids = {c.uuid for c in setup.conversations}
    assert {row[0] for row in bp.langgraph_threads(setup.langgraph)} == uuids
    assert {row["id"] for row in bp.llm_conversations(bp.open_llm(setup.llm_path))} == uuids
    assert {s.uuid for s in Store(setup.root).sessions()} == uuids


def test_langgraph_is_measured_durable(setup: bp.Setup) -> None:
    """Built without fsync, as our generator writes; measured (the fork writes) with
    SQLite's default durability, as our store's writers fsync."""
    assert setup.langgraph is not None
    assert setup.langgraph.conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    assert setup.langgraph.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_quick_run_records_every_comparison(tmp_path: Path) -> None:
    bench = Bench(tmp_path, quick=True)
    bench.group = "peers"
    bp.run(bench)
    ratios = {f.what: f for f in bench.figures if f.unit == "x"}
    assert len(ratios) == 11  # with the stores' sizes against each peer's
    held = {f.what: f.goal for f in bench.figures if f.goal}
    # the two forks, the followed listing, and issue 28's 1x for reading a conversation
    # (three peers' ways) and the state at step k
    assert sorted(held.values()) == ["≤ 1x"] * 5 + ["≤ 2x", "≤ 2x"], held
    assert held["state at step k of the long conversation: ours / LangGraph"] == "≤ 1x"
    assert all(f.met is not None for f in bench.figures if f.goal)
    assert all(math.isfinite(f.value) and f.value > 0 for f in ratios.values())
    assert not [f for f in bench.figures if "not measured" in f.what]


def test_a_peer_that_cannot_be_imported_is_recorded_not_passed(setup: bp.Setup) -> None:
    """Run last: it forks the long session once more."""
    bench = Bench(setup.root.parent, quick=True)
    without = dataclasses.replace(
        setup,
        langgraph=None,
        langgraph_error="ImportError: no langgraph",
        llm_path=None,
        llm_error="ImportError: no llm",
    )
    bp._measure(bench, without, 1)
    skipped = {f.what: f.note for f in bench.figures if "not measured" in f.what}
    assert skipped == {
        "LangGraph: not measured": "cannot import it here (ImportError: no langgraph)",
        "llm: not measured": "cannot import it here (ImportError: no llm)",
    }
    assert not [f for f in bench.figures if f.unit == "x"]


def test_the_runs_store_is_linked_and_left_as_it_was(tmp_path: Path) -> None:
    """Given the run's store, the comparison takes its conversations (linked, its catalog
    copied) and one long conversation beside them, and measuring (a fork and its save
    included) changes none of the run's files."""
    from benchmarks._stores import settle
    from soap_core._catalog import is_catalog_file
    from soap_gen import generate_store

    many = tmp_path / "many"
    generate_store(many, sessions=6, messages=12, fork_rate=0.5, chain_depth=2, seed=4)
    settle(many)
    listed = {s.uuid for s in Store(many).sessions()}
    before = {p: p.read_bytes() for p in many.rglob("*") if p.is_file() and not is_catalog_file(p)}
    work = tmp_path / "work"
    work.mkdir()
    setup = bp.prepare(work, sessions=0, long_messages=250, snapshot_frequency=SNAPSHOTS, many=many)
    try:
        assert {c.uuid for c in setup.conversations} == listed | {setup.long.uuid}
        assert setup.long.uuid not in listed and setup.long.turns >= 30
        bench = Bench(work, quick=True)
        bp._measure(bench, setup, 1)
        assert len([f for f in bench.figures if f.unit == "x"]) == 11  # the stores' sizes too
    finally:
        setup.close()
        setup.remove()
    assert {p: p.read_bytes() for p in many.rglob("*") if p.is_file() and not is_catalog_file(p)} == before
    assert {s.uuid for s in Store(many).sessions()} == listed
