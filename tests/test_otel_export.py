"""``soapwb export otel`` (issue 25, point 3): the demo store (our runtime's sessions, run
against the local model) as OpenTelemetry traces, read back from the file we write, from a
real Phoenix (its span API), and imported again: the same tree, the same requests."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from importers.otel import Span, export_sessions, import_otel, read_otlp
from replay import materialize
from soap_core import CallRecord, InvocationRecord, Session, Store, read_invocations
from soapwb.cli import main
from tests.peers.phoenix import Phoenix


def demo_sessions(store: Path) -> list[Session]:
    opened = Store(store)
    return [opened.load_session(s.ref, require_active=False) for s in opened.sessions()]


def recorded(sessions: list[Session]) -> tuple[list[CallRecord], list[InvocationRecord]]:
    """The agents' own calls and invocations (the workbench's runs are not exported)."""
    calls = [c for s in sessions for c in s.calls() if c.replay is None]
    invocations = [
        r
        for s in sessions
        for r in read_invocations(s.directory)  # type: ignore[arg-type]
        if r.callee.session == s.uuid and r.rerun is None
    ]
    return calls, invocations


def ns(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp).timestamp() * 1e9)


def kind(span: Span) -> str:
    return str(span.attributes.get("openinference.span.kind"))


@pytest.fixture(scope="module")
def exported(demo_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export") / "demo.jsonl"
    assert main(["export", "otel", "--store", str(demo_store), "--file", str(path)]) == 0
    return path


def test_every_call_and_invocation_is_a_span_nested_as_the_chain_nests(
    demo_store: Path, exported: Path
) -> None:
    sessions = demo_sessions(demo_store)
    calls, invocations = recorded(sessions)
    spans = read_otlp(exported).spans
    agents = {s.attributes["gen_ai.agent.id"]: s for s in spans if kind(s) == "AGENT"}
    llm = [s for s in spans if kind(s) == "LLM"]
    assert (
        len(calls) >= 20
        and len(llm) == len(calls)
        and len([s for s in spans if kind(s) == "AGENT"]) == len(invocations)
    )
    by_id = {(s.trace_id, s.span_id): s for s in spans}
    assert {a.attributes["session.id"] for a in agents.values()} <= {s.uuid for s in sessions}
    bodies = {json.dumps(c.request, sort_keys=True) for c in calls}
    for span in llm:
        assert json.dumps(json.loads(span.attributes["input.value"]), sort_keys=True) in bodies
        assert span.attributes["gen_ai.operation.name"] == "chat"
        request = json.loads(span.attributes["input.value"])
        genai = json.loads(span.attributes["gen_ai.input.messages"])
        assert [m["role"] for m in genai] == [m["role"] for m in request["messages"]]
        assert span.attributes["gen_ai.request.model"] == request["model"]
        parent = by_id.get((span.trace_id, span.parent_id or ""))
        assert parent is not None and kind(parent) == "AGENT"  # every demo call is inside its agent
        assert parent.attributes["session.id"] == span.attributes["session.id"]

    # each invocation is a span, a nested one the child of its caller's, in the caller's trace
    def key(record: InvocationRecord) -> tuple[str, str, int]:
        return (record.callee.object_id, record.callee.session or "", ns(record.started_at))

    span_of = {
        (str(s.attributes["gen_ai.agent.id"]), str(s.attributes["session.id"]), s.start_ns): s
        for s in spans
        if kind(s) == "AGENT"
    }
    assert sorted(span_of) == sorted(key(r) for r in invocations)
    by_record = {r.id: r for r in invocations}
    nested = [r for r in invocations if r.parent_invocation_id in by_record]
    assert nested
    for record in nested:
        child, parent = span_of[key(record)], span_of[key(by_record[record.parent_invocation_id])]  # type: ignore[index]
        assert (child.trace_id, child.parent_id) == (parent.trace_id, parent.span_id)
    tools = [s for s in spans if kind(s) == "TOOL"]
    assert tools and all(s.attributes["gen_ai.tool.name"] == s.attributes["tool.name"] for s in tools)
    assert all(s.start_ns <= s.end_ns for s in spans)


def test_export_then_import_gives_back_the_same_requests(
    demo_store: Path, exported: Path, tmp_path: Path
) -> None:
    calls, _ = recorded(demo_sessions(demo_store))
    report = import_otel([exported], tmp_path / "store")
    assert report.calls == len(calls)
    store = Store(tmp_path / "store")
    rebuilt: list[dict[str, Any]] = []
    for made in report.sessions:
        session = store.load_session(made.uuid, require_active=False)
        rebuilt += [materialize(session, c.context_id, c.message_index).request for c in session.calls()]
    assert sorted(json.dumps(r, sort_keys=True) for r in rebuilt) == sorted(
        json.dumps(c.request, sort_keys=True) for c in calls
    )
    # the chains come back too: a nested invocation's record names its caller's
    nested = [
        r
        for made in report.sessions
        for r in read_invocations(store.load_session(made.uuid, require_active=False).directory)  # type: ignore[arg-type]
        if r.parent_invocation_id is not None
    ]
    assert nested and all(r.caller is not None and r.caller.session != r.callee.session for r in nested)


def test_exporting_twice_sends_the_same_spans(demo_store: Path) -> None:
    sessions = demo_sessions(demo_store)
    first, second = export_sessions(sessions), export_sessions(sessions)
    assert first.request.SerializeToString() == second.request.SerializeToString()


def test_the_demo_store_sent_to_a_real_phoenix_reads_back_with_its_tree(
    demo_store: Path, exported: Path, phoenix: Phoenix, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sent = read_otlp(exported).spans
    argv = ["export", "otel", "--store", str(demo_store), "--endpoint", phoenix.url, "--json"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["spans"] == len(sent) and summary["to"] == f"{phoenix.url}/v1/traces"
    traces = {s.trace_id for s in sent}
    answer = tmp_path / "phoenix.json"
    document = phoenix.spans(wanted=len(sent))
    document["data"] = [s for s in document["data"] if s["trace_id"] in traces]  # other tests' traces too
    answer.write_text(json.dumps(document))
    kept = {s.span_id: s for s in read_otlp(answer).spans}
    assert sorted(kept) == sorted(s.span_id for s in sent), f"{len(kept)} of {len(sent)} spans came back"
    for span in sent:
        there = kept[span.span_id]
        assert (there.trace_id, there.parent_id, there.name) == (span.trace_id, span.parent_id, span.name)
        assert there.attributes["openinference.span.kind"] == span.attributes["openinference.span.kind"]
        assert there.attributes["session.id"] == span.attributes["session.id"]
        if kind(span) == "LLM":
            assert there.attributes["input.value"] == span.attributes["input.value"]  # the whole request
            assert there.attributes.get("llm.output_messages.0.message.content") == span.attributes.get(
                "llm.output_messages.0.message.content"
            )
        if kind(span) == "AGENT":
            assert there.attributes["gen_ai.agent.name"] == span.attributes["gen_ai.agent.name"]


def test_the_command_fails_in_one_line(
    demo_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(demo_store)
    assert main(["export", "otel", "--store", store, "--endpoint", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "http://127.0.0.1:9/v1/traces: cannot send the traces" in err
    assert main(["export", "otel", "zzzz", "--store", store, "--file", str(tmp_path / "x.jsonl")]) == 1
    assert "zzzz" in capsys.readouterr().err
    assert main(["export", "otel", "--store", store, "--file", str(tmp_path)]) == 1  # a folder
    assert "cannot write" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()
