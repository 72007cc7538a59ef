"""Reading OTLP files (issue 25, first part), against traces real instrumentations wrote:
OpenInference's (the whole request in ``input.value``) and the OpenTelemetry contrib
``openai-v2`` with the older GenAI conventions (the messages as log records).

Each trace is made in a side venv (``tests/peers/venvs.py``) by
``tests/peers/otel_driver.py``: the real ``openai`` client under the real instrumentor
calls the scripted server (``tests/peers/openai_stub.py``), which records the exact bodies
it receives, and the SDK's own OTLP encoders write the spans and logs as protobuf and as
OTLP/JSON. The ground truth is those bodies and the SDK's encoding, not our fixtures. A
venv that cannot be built skips with the reason, never passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from importers import ImporterError
from importers.otel import Span, read_otlp
from tests.peers.otel_traces import SCRIPT, Written
from tests.peers.phoenix import Phoenix


def by_kind(spans: tuple[Span, ...], kind: str) -> list[Span]:
    found = [s for s in spans if s.attributes.get("openinference.span.kind") == kind]
    return sorted(found, key=lambda s: s.start_ns)


def test_the_protobuf_and_the_json_file_read_alike(written: Written) -> None:
    from_protobuf = read_otlp(written.directory / "trace.pb")
    from_json = read_otlp(written.directory / "trace.jsonl")
    assert len(from_protobuf.spans) == written.span_count == 4  # the agent, two calls, the tool
    assert from_protobuf == from_json


@pytest.mark.parametrize("name", ["trace.pb", "trace.jsonl"])
def test_each_llm_span_holds_the_exact_body_the_server_received(written: Written, name: str) -> None:
    llm = by_kind(read_otlp(written.directory / name).spans, "LLM")
    assert len(written.bodies) == 2
    assert [json.loads(s.attributes["input.value"]) for s in llm] == written.bodies
    assert all(s.attributes["input.mime_type"] == "application/json" for s in llm)


@pytest.mark.parametrize("name", ["trace.pb", "trace.jsonl"])
def test_the_spans_nest_under_the_agent_in_one_trace_and_session(written: Written, name: str) -> None:
    spans = read_otlp(written.directory / name).spans
    [agent] = by_kind(spans, "AGENT")
    [tool] = by_kind(spans, "TOOL")
    llm = by_kind(spans, "LLM")
    assert agent.parent_id is None and agent.name == "Analyst"
    assert {s.trace_id for s in spans} == {agent.trace_id} and len(agent.trace_id) == 32
    assert all(s.parent_id == agent.span_id for s in [*llm, tool])
    assert llm[0].end_ns <= tool.start_ns <= tool.end_ns <= llm[1].start_ns
    # using_session reaches the spans OpenInference makes, not the plain SDK's: the
    # session's import must take session.id from any span of the trace, not the root's
    assert [s.attributes.get("session.id") for s in llm] == [written.session] * 2
    assert agent.resource["service.name"] == "otel-driver"
    assert tool.attributes["tool.name"] == "count_errors"


def test_genai_spans_and_logs_read_alike_from_protobuf_and_json(events: Written) -> None:
    spans = read_otlp(events.directory / "trace.pb").spans
    logs = read_otlp(events.directory / "logs.pb").logs
    from_json = read_otlp(events.directory / "trace.jsonl")
    assert (
        (len(spans), len(logs)) == (events.span_count, events.log_count) == (4, 8)
    )  # 3 events of the first call, 5 of the second
    assert from_json.spans == spans and from_json.logs == logs


def test_genai_message_events_hold_each_calls_messages_in_order(events: Written) -> None:
    telemetry = read_otlp(events.directory / "trace.jsonl")
    chats = sorted(
        (s for s in telemetry.spans if s.attributes.get("gen_ai.operation.name") == "chat"),
        key=lambda s: s.start_ns,
    )
    assert len(chats) == len(events.bodies) == 2
    for chat, body in zip(chats, events.bodies, strict=True):
        assert chat.attributes["gen_ai.request.model"] == body["model"]
        mine = [r for r in telemetry.logs if r.span_id == chat.span_id and r.trace_id == chat.trace_id]
        sent = [r for r in mine if r.event_name != "gen_ai.choice"]
        assert [r.event_name for r in sent] == [f"gen_ai.{m['role']}.message" for m in body["messages"]]
        for record, message in zip(sent, body["messages"], strict=True):
            if message["role"] != "assistant":  # the assistant's tool calls, below
                assert record.body["content"] == message["content"]
        [choice] = [r for r in mine if r.event_name == "gen_ai.choice"]
        assert choice.body["index"] == 0
    # the first answer's tool call, as the next call's input records it
    [assistant] = [m for m in events.bodies[1]["messages"] if m["role"] == "assistant"]
    recorded = next(
        r.body
        for r in telemetry.logs
        if r.event_name == "gen_ai.assistant.message" and r.span_id == chats[1].span_id
    )
    assert [c["id"] for c in recorded["tool_calls"]] == [c["id"] for c in assistant["tool_calls"]]
    [agent] = [s for s in telemetry.spans if s.attributes.get("gen_ai.operation.name") == "invoke_agent"]
    assert agent.attributes["gen_ai.conversation.id"] == events.session
    assert all(s.parent_id == agent.span_id for s in chats)


def test_genai_latest_spans_hold_each_calls_messages_as_json(latest: Written) -> None:
    telemetry = read_otlp(latest.directory / "trace.pb")
    assert telemetry == read_otlp(latest.directory / "trace.jsonl") and not telemetry.logs
    chats = sorted(
        (s for s in telemetry.spans if s.attributes.get("gen_ai.operation.name") == "chat"),
        key=lambda s: s.start_ns,
    )
    assert len(chats) == len(latest.bodies) == 2
    for chat, body in zip(chats, latest.bodies, strict=True):
        recorded = json.loads(chat.attributes["gen_ai.input.messages"])
        assert [m["role"] for m in recorded] == [m["role"] for m in body["messages"]]
        for message, sent in zip(recorded, body["messages"], strict=True):
            if sent["role"] == "tool":  # the result as the response of its call
                [part] = message["parts"]
                assert (part["type"], part["id"], part["response"]) == (
                    "tool_call_response",
                    sent["tool_call_id"],
                    sent["content"],
                )
            elif isinstance(sent.get("content"), str):
                assert [p["content"] for p in message["parts"] if p["type"] == "text"] == [sent["content"]]
    [answer] = json.loads(chats[0].attributes["gen_ai.output.messages"])
    [call] = [p for p in answer["parts"] if p["type"] == "tool_call"]
    assert call["id"] == SCRIPT[0]["tool_calls"][0]["id"] and call["name"] == "count_errors"


def test_what_phoenix_gives_back_reads_as_the_spans_it_was_sent(
    written: Written, phoenix: Phoenix, tmp_path: Path
) -> None:
    sent = read_otlp(written.directory / "trace.pb").spans
    assert phoenix.send_traces((written.directory / "trace.pb").read_bytes()) == 200
    answer = tmp_path / "phoenix-spans.json"
    answer.write_text(json.dumps(phoenix.spans({sent[0].trace_id}, wanted=len(sent))))
    back = {s.span_id: s for s in read_otlp(answer).spans if s.trace_id == sent[0].trace_id}
    assert sorted(back) == sorted(s.span_id for s in sent)
    for span in sent:
        kept = back[span.span_id]
        assert (kept.parent_id, kept.name, kept.kind, kept.status) == (
            span.parent_id,
            span.name,
            span.kind,
            span.status,
        )
        assert kept.attributes == span.attributes  # input.value, session.id, token counts: all of them
        # Phoenix keeps times to the microsecond
        assert abs(kept.start_ns - span.start_ns) < 1_000 and abs(kept.end_ns - span.end_ns) < 1_000


def test_a_file_that_is_neither_names_itself(tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"resourceSpans": []}\n{not json\n')
    with pytest.raises(ImporterError, match=r"broken\.jsonl: line 2: not JSON"):
        read_otlp(broken)
    binary = tmp_path / "noise.bin"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ImporterError, match=r"noise\.bin: neither OTLP/JSON nor an OTLP protobuf"):
        read_otlp(binary)
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text('{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "no ids"}]}]}]}\n')
    with pytest.raises(ImporterError, match=r"wrong\.jsonl: line 1: not an OTLP export request"):
        read_otlp(wrong)
