"""The OpenAI Agents SDK importer (issue 26), against databases the real SDK writes.

The driver (``tests/peers/agents_driver.py``) runs the app of ``tests/peers/agents_app.py``
(a triage agent with a forced tool and a handoff to a billing agent) with the real SDK
against the scripted server, which records the exact bodies the SDK sent: the ground
truth every rebuilt request is compared with."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from importers._errors import ImporterError
from importers.agents_sdk import ImportReport, import_agents_sdk
from replay import FRAMEWORK_CODE_KEY, materialize
from soap_core import Context, Session, Store, read_invocations
from tests.conftest import snapshot
from tests.peers.openai_stub import OpenAIStub
from tests.test_framework_peers import Written

PEERS = Path(__file__).resolve().parent / "peers"
APP = "tests.peers.agents_app:triage"
TOOL_CALL = {"tool_calls": [{"id": "call_1", "name": "count_errors", "arguments": '{"pattern": "ERROR"}'}]}
SCRIPT = [
    TOOL_CALL,
    {"content": "There are 3 errors."},
    {"tool_calls": [{"id": "call_2", "name": "transfer_to_billing", "arguments": "{}"}]},
    {"content": "Your invoice is paid."},
]
THIRD_TURN = [
    {"tool_calls": [{"id": "call_3", "name": "count_errors", "arguments": '{"pattern": "WARN"}'}]},
    {"content": "There are 3 warnings."},
]


def drive(db: Path, script: list[dict[str, Any]], *turns: str, agent: str = "triage") -> Written:
    """The driver's turns on ``db`` (a new database, or one that goes on) against the stub."""
    with OpenAIStub(script) as stub:
        done = subprocess.run(
            [sys.executable, str(PEERS / "agents_driver.py"), stub.base_url, str(db), *turns],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={**os.environ, "AGENTS_APP_AGENT": agent},
        )
        assert done.returncode == 0, f"the driver failed:\n{done.stdout}\n{done.stderr}"
        assert stub.snapshot()["exhausted"] == 0
        return Written(db, json.loads(done.stdout.strip().splitlines()[-1]), stub.bodies)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    return drive(tmp_path_factory.mktemp("agents") / "s.db", SCRIPT)


def imported(
    written: Written, store: Path, *, agent: str | None = None, db: Path | None = None
) -> tuple[ImportReport, Session]:
    report = import_agents_sdk(db or written.db, store, agent=agent)
    [session_report] = report.sessions
    return report, Store(store).load_session(session_report.uuid, require_active=False)


def answers(context: Context) -> list[int]:
    return [i for i, m in enumerate(context.messages) if m.role == "assistant"]


def test_every_calls_messages_and_model_rematerialize_exactly_from_the_file_alone(
    written: Written, tmp_path: Path
) -> None:
    report, session = imported(written, tmp_path / "store")
    context = session.active_context
    assert [m.role for m in context.messages] == ["user", "assistant", "tool_result", "assistant"] * 2
    assert len(answers(context)) == len(written.bodies) == 4
    for index, body in zip(answers(context), written.bodies, strict=True):
        found = materialize(session, context, index)
        assert found.source == "openai-agents" and found.call is not None
        assert found.request["messages"] == body["messages"][1:]  # all but the agent's instructions
        assert found.request["model"] == body["model"] == "smollm2"
        assert any("does not hold the agent's instructions" in note for note in found.notes)
    assert FRAMEWORK_CODE_KEY not in session.state_data
    assert report.sessions[0].calls_added == 4 and report.notices == []
    assert [c.message_index for c in session.calls()] == answers(context)  # the calls in the SDK's order
    turns = sorted(read_invocations(session.directory or Path()), key=lambda r: r.id)
    assert [(r.prompt, r.outcome, r.result) for r in turns] == [
        ("How many errors are in the log?", "ok", "There are 3 errors."),
        ("And is my invoice paid?", "ok", "Your invoice is paid."),
    ]
    assert [r.calls for r in turns] == [
        [c.id for c in session.calls()][:2],
        [c.id for c in session.calls()][2:],
    ]
    assert all(c.invocation_id == turns[n // 2].id for n, c in enumerate(session.calls()))


def test_the_file_alone_path_never_imports_the_sdk(written: Written, tmp_path: Path) -> None:
    """The SDK may not be installed where the workbench runs: the import and every
    materialize go without it (checked in a process of its own)."""
    script = f"""
import sys
from importers.agents_sdk import import_agents_sdk
from replay import materialize
from soap_core import Store
report = import_agents_sdk({str(written.db)!r}, {str(tmp_path / "store")!r})
session = Store({str(tmp_path / "store")!r}).load_session(report.sessions[0].uuid, require_active=False)
for index, message in enumerate(session.active_context.messages):
    if message.role == "assistant":
        materialize(session, None, index)
print(sorted(m for m in sys.modules if m == "agents" or m.startswith("agents.")))
"""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=root, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_with_the_apps_agent_the_whole_body_is_exact_handoffs_and_reset_rule_included(
    written: Written, tmp_path: Path
) -> None:
    # the facts this rests on: triage's forced tool_choice is dropped once it used the
    # tool (the SDK's reset rule), comes back in a new turn, and billing has neither
    assert [b.get("tool_choice") for b in written.bodies] == [
        {"type": "function", "function": {"name": "count_errors"}},
        None,
        {"type": "function", "function": {"name": "count_errors"}},
        None,
    ]
    _, session = imported(written, tmp_path / "store", agent=APP)
    assert session.state_data[FRAMEWORK_CODE_KEY] == APP and session.role == "Triage"
    context = session.active_context
    for index, body in zip(answers(context), written.bodies, strict=True):
        found = materialize(session, context, index)
        assert found.request == body
        assert found.call is not None and found.call.request == body  # the record holds it too
    last = materialize(session, context, answers(context)[-1])
    assert "answered by the agent 'Billing'" in last.notes
    assert (
        last.messages[0].message_type == "SystemPromptMessage" and last.messages[1].role == "user"
    )  # no tools
    first = materialize(session, context, answers(context)[0])
    assert [m.message_type for m in first.messages[:2]] == ["SystemPromptMessage", "ToolDefinitionsMessage"]
    assert [t.name for t in first.messages[1].tool_definitions()] == ["count_errors", "transfer_to_billing"]


def test_an_edited_message_is_sent_as_the_sdk_would_have_stored_it(written: Written, tmp_path: Path) -> None:
    from importers.agents_sdk._source import REQUEST_SOURCE
    from soap_core import TextPart

    _, session = imported(written, tmp_path / "store")
    messages = [m.copy() for m in session.active_context.messages[:5]]
    messages[3].content = [TextPart("Five errors were found.")]
    messages[0].content = [TextPart("How many warnings?")]
    body = REQUEST_SOURCE.build_request(messages, model="smollm2", parameters={"temperature": 0})
    expected = [*written.bodies[2]["messages"][1:6]]
    expected[0] = {"role": "user", "content": "How many warnings?"}
    expected[3] = {"role": "assistant", "content": "Five errors were found."}
    assert body == {"model": "smollm2", "messages": expected, "temperature": 0}


def test_a_handoff_is_marked_on_its_call_and_result_and_the_answer_after_it_names_its_agent(
    written: Written, tmp_path: Path
) -> None:
    report, session = imported(written, tmp_path / "store")
    messages = session.active_context.messages
    meta = [(m.metadata or {}).get("openai_agents", {}) for m in messages]
    handoff = {"call_id": "call_2", "tool": "transfer_to_billing", "to": "Billing"}
    assert meta[5]["handoff"] == handoff and meta[6]["handoff"] == handoff
    assert [m.get("agent") for m in meta if "agent" in m] == [None, None, None, "Billing"]
    assert "handoff" not in meta[1] and report.sessions[0].handoffs == 1
    assert messages[5].tool_uses()[0].arguments == "{}"  # the raw string the model wrote
    assert messages[1].tool_uses()[0].arguments == '{"pattern": "ERROR"}'


def test_importing_again_or_a_copy_of_the_database_writes_nothing(written: Written, tmp_path: Path) -> None:
    store = tmp_path / "store"
    imported(written, store, agent=APP)
    before = snapshot(store)
    again, _ = imported(written, store, agent=APP)
    copy = tmp_path / "elsewhere" / "copy.db"
    copy.parent.mkdir()
    shutil.copy(written.db, copy)
    copied, _ = imported(written, store, agent=APP, db=copy)
    assert not again.changed and not copied.changed
    assert [s.status for s in (*again.sessions, *copied.sessions)] == ["unchanged", "unchanged"]
    assert snapshot(store) == before


def test_a_grown_database_appends_its_new_items_and_calls_only(written: Written, tmp_path: Path) -> None:
    db = tmp_path / "grown.db"
    shutil.copy(written.db, db)
    store = tmp_path / "store"
    _, first = imported(written, store, db=db)
    calls_before = {c.id: c.as_dict() for c in first.calls()}
    grown = drive(db, THIRD_TURN, "And how many warnings?")
    report, session = imported(written, store, db=db)
    [row] = report.sessions
    assert (row.status, row.messages_added, row.calls_added, row.contexts) == ("updated", 4, 2, 1)
    context = session.active_context
    assert [m.id for m in context.messages[:8]] == [m.id for m in first.active_context.messages]
    after = {c.id: c.as_dict() for c in session.calls()}
    assert {k: after[k] for k in calls_before} == calls_before and len(after) == 6
    assert (row.turns, row.turns_written) == (3, 1)  # the third turn's record only
    for index, body in zip(answers(context)[4:], grown.bodies, strict=True):
        assert materialize(session, context, index).request["messages"] == body["messages"][1:]


def test_a_file_that_is_not_an_agents_sdk_database_is_refused_naming_it(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE checkpoints (thread_id TEXT)")
    with pytest.raises(ImporterError, match="not an OpenAI Agents SDK session database") as caught:
        import_agents_sdk(other, tmp_path / "store")
    assert caught.value.path == other
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(ImporterError, match="cannot be read as an SQLite database"):
        import_agents_sdk(text, tmp_path / "store")
    assert not (tmp_path / "store" / "agents").exists() or not any((tmp_path / "store" / "agents").iterdir())


def test_a_malformed_row_or_an_unknown_item_is_named_and_the_rest_imported(
    written: Written, tmp_path: Path
) -> None:
    db = tmp_path / "bad.db"
    shutil.copy(written.db, db)
    with sqlite3.connect(db) as connection:
        connection.execute("INSERT INTO agent_messages (session_id, message_data) VALUES ('s1', '{not json')")
        connection.execute(
            "INSERT INTO agent_messages (session_id, message_data) VALUES ('s1', ?)",
            (json.dumps({"type": "computer_call", "id": "cu_1", "call_id": "c9"}),),
        )
        audio = {
            "role": "user",
            "content": [{"type": "input_audio", "input_audio": {"format": "wav"}}],
        }
        connection.execute(
            "INSERT INTO agent_messages (session_id, message_data) VALUES ('s1', ?)", (json.dumps(audio),)
        )
    report, session = imported(written, tmp_path / "store", db=db)
    assert len(report.notices) == 3
    assert report.notices[0].startswith(f"{db}: row 9 (session 's1') skipped")
    assert f"{db}: row 10 " in report.notices[1] and "'computer_call'" in report.notices[1]
    assert f"{db}: row 11 " in report.notices[2] and "input_audio requires" in report.notices[2]
    assert len(session.active_context.messages) == 8 and report.sessions[0].calls == 4


def test_the_import_never_writes_the_database(written: Written, tmp_path: Path) -> None:
    before = written.db.read_bytes()
    imported(written, tmp_path / "store", agent=APP)
    assert written.db.read_bytes() == before


def test_soapwb_import_openai_agents_reports_and_refuses_an_agent_it_cannot_import(
    written: Written, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from soapwb.cli import main

    store = str(tmp_path / "store")
    assert main(["import", "openai-agents", str(written.db), "--store", store, "--agent", APP, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["agent"] == APP and report["sessions"][0]["calls_added"] == 4
    assert main(["import", "openai-agents", str(written.db), "--store", store]) == 0
    assert "nothing changed (already imported)" in capsys.readouterr().out
    assert (
        main(["import", "openai-agents", str(written.db), "--store", store, "--agent", "nowhere:agent"]) != 0
    )
    assert "cannot import nowhere:agent" in capsys.readouterr().err


def _output(text: str, response: str = "r1", model: str = "m") -> dict[str, Any]:
    content = [{"annotations": [], "text": text, "type": "output_text", "logprobs": []}]
    data = {"model": model, "response_id": response}
    return {
        "id": "__fake_id__",
        "content": content,
        "role": "assistant",
        "status": "completed",
        "type": "message",
    } | {"provider_data": data}


def _call(call_id: str, arguments: str, response: str = "r1") -> dict[str, Any]:
    data = {"model": "m", "response_id": response}
    return {
        "arguments": arguments,
        "call_id": call_id,
        "name": "t",
        "type": "function_call",
        "id": "__fake_id__",
    } | {"provider_data": data}


def _result(call_id: str, output: Any) -> dict[str, Any]:
    return {"call_id": call_id, "output": output, "type": "function_call_output"}


def _reasoning(data: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"type": "reasoning", "id": "__fake_id__", "summary": [], "provider_data": data, **fields}


USER = {"role": "user", "content": "hi"}
ITEM_SHAPES: dict[str, list[dict[str, Any]]] = {
    "text and two calls in one answer, an empty argument string": [
        USER,
        _output("let me look"),
        _call("a", '{"x": 1}'),
        _call("b", ""),
        _result("a", "1"),
        _result("b", "2"),
        _output("done", "r2"),
    ],
    "calls before the text (a streamed turn)": [
        USER,
        _call("a", "{}"),
        _output("looking"),
        _result("a", "1"),
    ],
    "a refusal": [
        USER,
        {
            "id": "x",
            "content": [{"type": "refusal", "refusal": "no"}],
            "role": "assistant",
            "type": "message",
        },
    ],
    "user parts, an image among them": [
        {
            "role": "user",
            "content": [{"type": "input_text", "text": "see"}, {"type": "input_image", "image_url": "u"}],
        }
    ],
    "system, developer and typed user items": [
        {"role": "system", "content": "s"},
        {"role": "developer", "content": "d"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "u"}]},
    ],
    "an easy assistant item": [USER, {"role": "assistant", "content": "b"}],
    "audio, file and video parts": [
        {
            "role": "user",
            "content": [
                {"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}},
                {"type": "input_file", "file_id": "file-1", "filename": "a.pdf"},
                {"type": "input_file", "file_data": "data:application/pdf;base64,AA"},
                {"type": "video_url", "video_url": {"url": "https://v"}},
            ],
        }
    ],
    "reasoning sent back as the model's own field": [
        USER,
        _reasoning(
            {"model": "m", "response_id": "r1", "_chat_completions_reasoning_field": "reasoning"},
            content=[{"type": "reasoning_text", "text": "think"}],
        ),
        _output("answer"),
    ],
    "reasoning of another model": [
        USER,
        _reasoning(
            {"model": "other", "response_id": "r1", "_chat_completions_reasoning_field": "reasoning"},
            content=[{"type": "reasoning_text", "text": "think"}],
        ),
        _output("answer"),
    ],
    "a tool output as parts": [USER, _call("a", "{}"), _result("a", [{"type": "input_text", "text": "r"}])],
}


@pytest.mark.parametrize("model", ["m", "deepseek-chat"])
@pytest.mark.parametrize("shape", list(ITEM_SHAPES))
def test_the_messages_rebuilt_from_imported_items_are_the_sdks_own_for_every_item_shape(
    shape: str, model: str
) -> None:
    """The port of ``Converter.items_to_messages`` against the SDK's, through the import's
    grouping into messages and back (a DeepSeek model: its ``reasoning_content`` rule)."""
    from agents.models.chatcmpl_converter import Converter

    from importers.agents_sdk._chat import chat_messages
    from importers.agents_sdk._items import Row, groups, message_of

    items = ITEM_SHAPES[shape]
    if model.startswith("deepseek"):
        items = [*items, _reasoning({}, summary=[{"type": "summary_text", "text": "s"}]), _output("x", "r9")]
    rows = [Row(n, "2026-12-04T00:00:00+00:00", item) for n, item in enumerate(items, start=1)]
    messages = [message_of(group, f"m{n}", None) for n, group in enumerate(groups(rows))]
    theirs = json.loads(json.dumps(Converter.items_to_messages(items, model=model)))
    assert chat_messages(messages, model) == theirs


def test_a_history_rewritten_by_pop_item_becomes_a_fork_at_the_last_shared_message(
    written: Written, tmp_path: Path
) -> None:
    """The SDK's way to retry: ``pop_item`` the last answer and run again. The rows it
    removed stay in the store's first context, the new ones are a fork beside them."""
    db = tmp_path / "popped.db"
    shutil.copy(written.db, db)
    store = tmp_path / "store"
    _, first = imported(written, store, db=db)
    root = first.active_context
    script = (
        "import asyncio, sys\n"
        "from agents import SQLiteSession\n"
        f"session = SQLiteSession('s1', {str(db)!r})\n"
        "for _ in range(4): asyncio.run(session.pop_item())\n"  # back to the first answer
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    again = drive(db, [{"content": "No errors today."}], "Any errors?")
    report, session = imported(written, store, db=db)
    assert report.sessions[0].contexts == 2 and report.sessions[0].calls_added == 1
    fork = session.active_context
    assert fork.origin_context_id == root.id and fork.id in session.contexts[root.id].children
    assert [m.id for m in fork.messages[:4]] == [m.id for m in root.messages[:4]]
    assert [m.text() for m in fork.messages[4:]] == ["Any errors?", "No errors today."]
    assert len(session.contexts[root.id].messages) == 8  # the first history, as it was
    found = materialize(session, fork, 5)
    assert found.request["messages"] == again.bodies[0]["messages"][1:]


def test_without_the_sdk_installed_agent_says_so_and_materialize_falls_back_to_the_file(
    written: Written, tmp_path: Path
) -> None:
    """Where ``agents`` cannot be imported (a process that blocks it), ``--agent`` is
    refused with a sentence naming the package, and a session imported with the app's
    code still materializes from the file alone, saying why."""
    store = tmp_path / "store"
    imported(written, store, agent=APP)
    script = f"""
import sys
sys.modules["agents"] = None  # as if openai-agents were not installed
from importers.agents_sdk import import_agents_sdk
from replay import materialize
from soap_core import Store
try:
    import_agents_sdk({str(written.db)!r}, {str(tmp_path / "other")!r}, agent={APP!r})
except ImportError as exc:
    print("refused:", exc)
store = Store({str(store)!r})
session = store.load_session(store.sessions()[0].uuid, require_active=False)
found = materialize(session, None, 1)
print(found.request["messages"][0]["role"], found.notes[0])
"""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=root, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    refused, fallback = done.stdout.strip().splitlines()
    assert refused.startswith("refused: --agent needs the OpenAI Agents SDK (openai-agents) installed")
    assert fallback.startswith("user the Agents SDK is not installed here")


def test_an_agent_whose_model_is_not_chat_completions_is_refused_before_anything_runs(
    written: Written, tmp_path: Path
) -> None:
    """A model given by name goes through the Responses API, which the workbench does
    not route: running it would reach the network. Refused, naming the agent."""
    from importers.agents_sdk import AgentCodeError

    with pytest.raises(AgentCodeError, match="'Named' asks its model through 'gpt-4o-mini'"):
        import_agents_sdk(written.db, tmp_path / "store", agent="tests.peers.agents_app:by_name")
    assert not (tmp_path / "store").exists()


def test_the_whole_body_is_built_from_inside_a_running_event_loop_too(
    written: Written, tmp_path: Path
) -> None:
    """A caller that runs an event loop (a notebook, an async server) materializes with
    the app's code as well: the SDK's run goes to a thread of its own, the route with it."""
    import asyncio

    _, session = imported(written, tmp_path / "store", agent=APP)

    async def inside() -> dict[str, Any]:
        return materialize(session, None, 1).request

    assert asyncio.run(inside()) == written.bodies[0]


def test_a_handoff_with_an_input_filter_leaves_no_trace_in_the_file_a_limit_the_rebuild_names(
    tmp_path: Path,
) -> None:
    """Measured: when a handoff has an input filter (``remove_all_tools``), the SDK saves
    the filtered items, so the handoff's call and result are not in the session file at
    all: four model calls, three answers. The last answer (billing's) is then rebuilt as
    the call the file can explain, triage's, which is the request that handed off."""
    filtered = drive(tmp_path / "f.db", SCRIPT, agent="filtered")
    assert len(filtered.bodies) == 4
    assert [m["role"] for m in filtered.bodies[3]["messages"]] == ["system", "user", "assistant", "user"]
    report = import_agents_sdk(filtered.db, tmp_path / "store", agent="tests.peers.agents_app:filtered")
    session = Store(tmp_path / "store").load_session(report.sessions[0].uuid, require_active=False)
    context = session.active_context
    assert [m.role for m in context.messages] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
        "user",
        "assistant",
    ]
    rebuilt = [materialize(session, context, i).request for i in answers(context)]
    assert rebuilt == [filtered.bodies[0], filtered.bodies[1], filtered.bodies[2]]
    assert report.sessions[0].handoffs == 0


def test_every_page_opens_on_an_agents_sdk_session(written: Written, tmp_path: Path) -> None:
    from tests.apptest import PAGES, open_app_page

    _, session = imported(written, tmp_path / "store", agent=APP)
    for page in PAGES:
        opened = open_app_page(tmp_path / "store", page, session=session.uuid, message="3")
        assert not opened.exception and not opened.error, (page, [e.value for e in opened.error])
