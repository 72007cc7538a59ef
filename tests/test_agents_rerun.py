"""Re-running an imported Agents SDK session with the app's code (issue 26): the SDK's own
``Runner`` from the message on, on a new in-memory ``SQLiteSession`` holding the items
before it; the tools recorded, live (the app's function) or injected, the handoffs run as
the SDK runs them, and the app's database never written. The model here is a scripted
endpoint that answers in the Chat Completions shape; the reproduction on the real local
model is in ``tests/test_agents_local_model.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from replay import ToolModes, diff_rerun, rerun
from soap_core import Session, Store
from soap_core.runtime import Completion
from tests.peers import agents_app
from tests.peers.openai_stub import completion
from tests.test_agents_import import APP, SCRIPT, drive, imported
from tests.test_framework_peers import Written

FIRST_ANSWER, HANDOFF = 1, 5


class ScriptedModel:
    """An endpoint that answers each request with the next scripted reply (the stub's
    reply shape, as a Chat Completions response) and keeps the requests."""

    base_url = "http://scripted.invalid/v1"
    model = "scripted"

    def __init__(self, *replies: dict[str, Any]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []

    def complete(self, request: dict[str, Any]) -> Completion:
        self.requests.append(request)
        return Completion(
            completion(self.replies.pop(0), str(request.get("model")), len(self.requests)), 0.01
        )


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    return drive(tmp_path_factory.mktemp("agents") / "s.db", SCRIPT)


def session_of(written: Written, tmp_path: Path) -> tuple[Store, Session]:
    _, session = imported(written, tmp_path / "store", agent=APP)
    return Store(tmp_path / "store"), session


def count(pattern: str, call_id: str = "call_9") -> dict[str, Any]:
    return {
        "tool_calls": [{"id": call_id, "name": "count_errors", "arguments": f'{{"pattern": "{pattern}"}}'}]
    }


def test_a_recorded_rerun_runs_the_sdks_runner_sends_the_original_body_and_never_writes_the_database(
    written: Written, tmp_path: Path
) -> None:
    store, session = session_of(written, tmp_path)
    database = written.db.read_bytes()
    model = ScriptedModel(count("ERROR"), {"content": "There are 3 errors."})
    live_before = list(agents_app.COUNTED)
    result = rerun(store, session, None, FIRST_ANSWER, model)
    assert result.ok, result.problem
    assert result.answer == "There are 3 errors."
    assert model.requests[0] == written.bodies[0]  # the SDK's own first request, tool_choice and all
    assert "tool_choice" not in model.requests[1]  # the reset rule, by the SDK itself
    assert model.requests[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_9", "content": "3"}
    assert [t["how"] for t in result.tools] == ["recorded"] and live_before == agents_app.COUNTED
    assert written.db.read_bytes() == database
    reloaded = store.load_session(session.uuid, require_active=False)
    fork = reloaded.contexts[result.fork_id]
    assert [m.role for m in fork.messages if not m.is_special] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
    ]
    records = {c.id: c for c in reloaded.calls()}
    assert [records[c].request for c in result.calls] == model.requests
    assert all(records[c].replay is not None for c in result.calls)
    diff = diff_rerun(reloaded, result)
    assert diff.pairs[0].status == diff.pairs[1].status == "equal"  # the same call, the same answer


def test_a_live_rerun_calls_the_apps_own_tool(written: Written, tmp_path: Path) -> None:
    store, session = session_of(written, tmp_path)
    model = ScriptedModel(count("FATAL"), {"content": "There are 3 fatal errors."})
    before = len(agents_app.COUNTED)
    result = rerun(store, session, None, FIRST_ANSWER, model, tools=ToolModes(default="live"))
    assert result.ok, result.problem
    assert agents_app.COUNTED[before:] == ["FATAL"]
    assert [t["how"] for t in result.tools] == ["live"]


def test_an_injected_result_is_what_the_model_reads_next(written: Written, tmp_path: Path) -> None:
    store, session = session_of(written, tmp_path)
    model = ScriptedModel(count("ERROR"), {"content": "There are no errors."})
    before = len(agents_app.COUNTED)
    result = rerun(store, session, None, FIRST_ANSWER, model, tools=ToolModes(injected={"count_errors": "0"}))
    assert result.ok, result.problem
    assert model.requests[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_9", "content": "0"}
    assert [t["how"] for t in result.tools] == ["injected"] and len(agents_app.COUNTED) == before


def test_a_call_the_record_cannot_serve_stops_the_rerun(written: Written, tmp_path: Path) -> None:
    store, session = session_of(written, tmp_path)
    model = ScriptedModel(count("WARN"), {"content": "unused"})
    result = rerun(store, session, None, FIRST_ANSWER, model)
    assert result.error is not None and result.error.startswith("RerunStopped:"), result.error
    assert len(model.requests) == 1


def test_a_rerun_from_the_handoff_hands_off_as_the_sdk_does_and_billing_answers(
    written: Written, tmp_path: Path
) -> None:
    store, session = session_of(written, tmp_path)
    transfer = {"tool_calls": [{"id": "call_8", "name": "transfer_to_billing", "arguments": "{}"}]}
    model = ScriptedModel(transfer, {"content": "It is paid."})
    result = rerun(store, session, None, HANDOFF, model)
    assert result.ok, result.problem
    assert model.requests[0] == written.bodies[2]  # triage, its tool_choice back in a new turn
    assert model.requests[1]["messages"][0] == {"content": "You answer billing questions.", "role": "system"}
    assert result.tools == []  # the handoff is the SDK's, not a tool the modes answer
    fork = store.load_session(session.uuid, require_active=False).contexts[result.fork_id]
    meta = [(m.metadata or {}).get("openai_agents", {}) for m in fork.messages]
    handoff = {"call_id": "call_8", "tool": "transfer_to_billing", "to": "Billing"}
    assert meta[-3]["handoff"] == meta[-2]["handoff"] == handoff  # the call and its result
    assert meta[-1]["agent"] == "Billing" and result.answer == "It is paid."


def test_an_edited_instruction_is_what_the_rerun_sends(written: Written, tmp_path: Path) -> None:
    from replay import Overrides, materialize

    store, session = session_of(written, tmp_path)
    found = materialize(session, None, FIRST_ANSWER)
    assert found.messages[0].message_type == "SystemPromptMessage"
    model = ScriptedModel(count("ERROR"), {"content": "3."})
    result = rerun(
        store, session, None, FIRST_ANSWER, model, overrides=Overrides(system_prompt="Answer tersely.")
    )
    assert result.ok, result.problem
    assert model.requests[0]["messages"][0] == {"content": "Answer tersely.", "role": "system"}


def test_a_changed_model_and_temperature_go_into_every_call_the_sdk_makes(
    written: Written, tmp_path: Path
) -> None:
    from replay import Overrides

    store, session = session_of(written, tmp_path)
    model = ScriptedModel(count("ERROR"), {"content": "3."})
    changed = Overrides(model="other-model", temperature=0.7)
    result = rerun(store, session, None, FIRST_ANSWER, model, overrides=changed)
    assert result.ok, result.problem
    assert [(r["model"], r["temperature"]) for r in model.requests] == [("other-model", 0.7)] * 2
    assert (
        model.requests[0]["tool_choice"] == written.bodies[0]["tool_choice"]
        and "tool_choice" not in model.requests[1]
    )


def test_soapwb_rerun_runs_the_code_the_import_remembered_against_a_server(
    written: Written, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from soapwb.cli import main
    from tests.peers.openai_stub import OpenAIStub

    store, session = session_of(written, tmp_path)
    with OpenAIStub([count("ERROR"), {"content": "There are 3 errors."}]) as stub:
        argv = ["rerun", session.uuid, "--at", str(FIRST_ANSWER), "--store", str(store.root)]
        code = main([*argv, "--base-url", stub.base_url, "--json"])
        bodies = stub.bodies
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    assert bodies[0] == written.bodies[0] and len(bodies) == 2
    assert (report["ok"], report["answer"]) == (True, "There are 3 errors.")
    assert [t["how"] for t in report["tools"]] == ["recorded"]
    assert [p["status"] for p in report["diff"]["pairs"][:2]] == ["equal", "equal"]  # the turn re-ran alike


def test_a_rerun_with_code_that_cannot_be_imported_ends_with_the_reason(
    written: Written, tmp_path: Path
) -> None:
    store, session = session_of(written, tmp_path)
    model = ScriptedModel()
    result = rerun(store, session, None, FIRST_ANSWER, model, code="tests.peers.agents_app:nowhere")
    assert result.error is not None and result.error.startswith("AgentCodeError: cannot import")
    assert model.requests == []


def test_without_the_apps_code_a_rerun_sends_the_file_alone_body_and_refuses_live_tools(
    written: Written, tmp_path: Path
) -> None:
    from replay import RerunError

    _, session = imported(written, tmp_path / "store")
    store = Store(tmp_path / "store")
    model = ScriptedModel({"content": "Probably 3."})
    result = rerun(store, session, None, 3, model)
    assert result.ok and result.answer == "Probably 3."
    assert model.requests == [{"model": "smollm2", "messages": written.bodies[1]["messages"][1:]}]
    with pytest.raises(RerunError, match="cannot run live"):
        rerun(store, session, None, 3, model, tools=ToolModes(default="live"))


@pytest.mark.parametrize("call", [0, 1, 2, 3])
def test_a_reruns_first_request_is_the_original_one_from_every_answer(
    written: Written, tmp_path: Path, call: int
) -> None:
    """From the first answer of a turn, after a tool (the reset rule), at a handoff and
    after it (billing answering): the SDK's first request of the re-run is the body the
    original call sent."""
    store, session = session_of(written, tmp_path)
    model = ScriptedModel({"content": "fine"})
    result = rerun(store, session, None, [1, 3, 5, 7][call], model)
    assert result.ok, result.problem
    assert model.requests[0] == written.bodies[call]
