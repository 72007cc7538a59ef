"""The two agent frameworks issue 26 imports, writing their SQLite stores for real: the
facts the importers will be built on, checked against the databases the real packages
write and the bodies the scripted server receives (the ground truth), not our fixtures.

``tests/peers/agents_driver.py`` runs the OpenAI Agents SDK (0.24.0: a triage agent with a
tool and a handoff, ``SQLiteSession``), ``tests/peers/langgraph_driver.py`` LangGraph (1.2.24
with ``SqliteSaver``: a tool loop, then a fork by ``update_state``), each in a process of its
own with the project's interpreter (the ``frameworks`` extra: their dependencies do not
clash with ours)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.peers.openai_stub import OpenAIStub

PEERS = Path(__file__).resolve().parent / "peers"
TOOL_CALL = {"tool_calls": [{"id": "call_1", "name": "count_errors", "arguments": '{"pattern": "ERROR"}'}]}


@dataclass(frozen=True)
class Written:
    db: Path
    summary: dict[str, Any]
    bodies: list[Any]


def write(driver: str, script: list[dict[str, Any]], db: Path) -> Written:
    with OpenAIStub(script) as stub:
        done = subprocess.run(
            [sys.executable, str(PEERS / driver), stub.base_url, str(db)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, f"the driver failed:\n{done.stdout}\n{done.stderr}"
        return Written(db, json.loads(done.stdout.strip().splitlines()[-1]), stub.bodies)


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Written:
    script = [
        TOOL_CALL,
        {"content": "There are 3 errors."},
        {"tool_calls": [{"id": "call_2", "name": "transfer_to_billing", "arguments": "{}"}]},
        {"content": "Your invoice is paid."},
    ]
    return write("agents_driver.py", script, tmp_path_factory.mktemp("agents") / "s.db")


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> Written:
    script = [TOOL_CALL, {"content": "There are 3 errors."}, {"content": "There are 2 warnings."}]
    return write("langgraph_driver.py", script, tmp_path_factory.mktemp("graph") / "c.db")


def rows(db: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as connection:
        return list(connection.execute(query))


def test_an_agents_sdk_session_holds_responses_items_and_not_the_instructions(agents: Written) -> None:
    assert {"agent_sessions", "agent_messages"} <= {
        r[0] for r in rows(agents.db, "SELECT name FROM sqlite_master")
    }
    items = [json.loads(r[0]) for r in rows(agents.db, "SELECT message_data FROM agent_messages ORDER BY id")]
    kinds = [item.get("type", item.get("role")) for item in items]
    assert kinds == ["user", "function_call", "function_call_output", "message"] * 2
    call = items[1]
    assert (call["arguments"], call["id"]) == ('{"pattern": "ERROR"}', "__fake_id__")  # the raw string
    assert call["provider_data"]["model"] == "smollm2"  # the request's model, in the item
    handoff = items[5]
    assert handoff["name"] == "transfer_to_billing" and json.loads(items[6]["output"]) == {
        "assistant": "Billing"
    }
    assert agents.summary["last_agent"] == "Billing"
    # not in the file: the instructions (each agent's, as the system message) and the tools
    text = json.dumps(items)
    assert len(agents.bodies) == 4
    assert [b["messages"][0] for b in agents.bodies] == [
        {"role": "system", "content": "You analyse logs."}
    ] * 3 + [{"role": "system", "content": "You answer billing questions."}]
    assert "You analyse logs." not in text and "count_errors" in text and "Count the lines" not in text
    assert [t["function"]["name"] for t in agents.bodies[0]["tools"]] == [
        "count_errors",
        "transfer_to_billing",
    ]
    assert "tools" not in agents.bodies[3]  # the billing agent has none
    # every message after the system message comes from the items, in order
    assert [m["role"] for m in agents.bodies[3]["messages"][1:]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
    ]


def test_a_langgraph_thread_keeps_every_checkpoint_and_its_fork(graph: Written) -> None:
    assert {"checkpoints", "writes"} <= {r[0] for r in rows(graph.db, "SELECT name FROM sqlite_master")}
    checkpoints = rows(
        graph.db,
        "SELECT checkpoint_id, parent_checkpoint_id, type, metadata FROM checkpoints ORDER BY checkpoint_id",
    )
    assert {c[2] for c in checkpoints} == {"msgpack"}
    sources = [json.loads(c[3])["source"] for c in checkpoints]
    assert sources.count("update") == 1 and sources[0] == "input"
    [update] = [c for c in checkpoints if json.loads(c[3])["source"] == "update"]
    parents = [c[1] for c in checkpoints]
    assert parents.count(update[1]) == 2  # the fork branches off the checkpoint the first run went on from
    # not in the file: the system prompt, added at call time, and the bound tools
    assert len(graph.bodies) == 3
    assert all(b["messages"][0] == {"role": "system", "content": "You analyse logs."} for b in graph.bodies)
    assert all([t["function"]["name"] for t in b["tools"]] == ["count_errors"] for b in graph.bodies)
    blobs = b"".join(r[0] for r in rows(graph.db, "SELECT checkpoint FROM checkpoints"))
    assert b"You analyse logs." not in blobs and b"How many warnings?" in blobs
    # ChatOpenAI sends the assistant's tool call with content null, its arguments re-serialized
    assistant = graph.bodies[1]["messages"][2]
    assert (
        assistant["content"] is None
        and assistant["tool_calls"][0]["function"]["arguments"] == '{"pattern": "ERROR"}'
    )
    assert graph.bodies[2]["messages"][1] == {"role": "user", "content": "How many warnings?"}
