"""``soapwb export otel`` (issue 25): the demo store out as OpenTelemetry traces, read back
by our own OTLP reader, imported again, and received by a real Phoenix.

The ground truth is the store's own records: each invocation record (and its parent link),
each call record (the exact body sent, its usage and times), each tool call of an answer.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from importers.openpoke import import_openpoke
from importers.otel import Span, export_otel, import_otel, read_otlp
from local_model import free_port
from replay import materialize
from soap_core import CallRecord, InvocationRecord, Store, canonical_json, read_calls, read_invocations
from soapwb.cli import main
from tests.conftest import SOAP_FIXTURE
from tests.peers.phoenix import Phoenix


def export(store: Path, out: Path, *argv: str) -> list[Span]:
    assert main(["export", "otel", *argv, "--store", str(store), "--file", str(out)]) == 0
    return list(read_otlp(out).spans)


def records(store: Path) -> tuple[dict[str, InvocationRecord], dict[str, CallRecord]]:
    """Every invocation and call record of the store, by id."""
    invocations: dict[str, InvocationRecord] = {}
    calls: dict[str, CallRecord] = {}
    for summary in Store(store).sessions():
        invocations |= {r.id: r for r in read_invocations(summary.path)}
        calls |= {c.id: c for c in read_calls(summary.path)}
    return invocations, calls


def of_kind(spans: list[Span], kind: str) -> list[Span]:
    return [s for s in spans if s.attributes["openinference.span.kind"] == kind]


def ns(stamp: str) -> int:
    from importers.otel._export import time_ns

    found = time_ns(stamp)
    assert found is not None
    return found


@pytest.fixture(scope="module")
def exported(demo_store: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Span]]:
    out = tmp_path_factory.mktemp("export") / "demo.jsonl"
    return out, export(demo_store, out)


def test_each_chain_is_one_trace_its_agent_spans_nested_as_the_invocations_nest(
    demo_store: Path, exported: tuple[Path, list[Span]]
) -> None:
    spans = exported[1]
    invocations, _ = records(demo_store)
    agents = {s.attributes["soapwb.invocation.id"]: s for s in of_kind(spans, "AGENT")}
    assert sorted(agents) == sorted(invocations)  # every invocation once (the demo has no re-runs)
    for invocation_id, record in invocations.items():
        span = agents[invocation_id]
        parent = agents.get(record.parent_invocation_id or "")
        assert span.parent_id == (parent.span_id if parent else None)
        assert span.trace_id == (parent.trace_id if parent else span.trace_id)
        assert span.name == f"invoke_agent {record.callee.role}"
        assert (
            span.attributes["session.id"]
            == span.attributes["gen_ai.conversation.id"]
            == record.callee.session
        )
        assert span.attributes["input.value"] == record.prompt
        assert (span.start_ns, span.end_ns) == (ns(record.started_at), ns(record.ended_at or ""))
        assert span.status == (2 if record.outcome == "refused" else 0)
    roots = [s for s in agents.values() if s.parent_id is None]
    assert len({s.trace_id for s in spans}) == len(roots) == 10  # 6 questions, 4 user turns
    assert Counter(s.attributes["openinference.span.kind"] for s in spans)["AGENT"] == 17


def test_each_llm_span_holds_its_calls_exact_request_answer_usage_and_times(
    demo_store: Path, exported: tuple[Path, list[Span]]
) -> None:
    spans = exported[1]
    invocations, calls = records(demo_store)
    agents = {s.attributes["soapwb.invocation.id"]: s for s in of_kind(spans, "AGENT")}
    llm = {s.attributes["soapwb.call.id"]: s for s in of_kind(spans, "LLM")}
    assert sorted(llm) == sorted(calls)
    for call_id, call in calls.items():
        span = llm[call_id]
        attributes = span.attributes
        assert json.loads(attributes["input.value"]) == call.request
        assert json.loads(attributes["output.value"]) == call.response
        assert span.parent_id == agents[call.invocation_id or ""].span_id
        assert attributes["session.id"] == call.session
        assert (span.start_ns, span.end_ns, span.status) == (ns(call.started_at), ns(call.ended_at or ""), 0)
        assert call.usage is not None
        assert attributes["llm.token_count.prompt"] == attributes["gen_ai.usage.input_tokens"]
        assert attributes["llm.token_count.prompt"] == call.usage["prompt_tokens"]
        assert attributes["gen_ai.usage.output_tokens"] == call.usage["completion_tokens"]
        assert attributes["gen_ai.request.model"] == call.request["model"]
        assert attributes["gen_ai.request.temperature"] == call.request["temperature"]
        assert json.loads(attributes["llm.invocation_parameters"])["max_tokens"] == call.request["max_tokens"]
        for i, message in enumerate(call.request["messages"]):
            assert attributes[f"llm.input_messages.{i}.message.role"] == message["role"]
            assert attributes.get(f"llm.input_messages.{i}.message.content") == (message["content"] or None)
        genai = json.loads(attributes["gen_ai.input.messages"])
        assert [m["role"] for m in genai] == [m["role"] for m in call.request["messages"]]
        tools = json.loads(attributes.get("gen_ai.tool.definitions", "[]"))  # the summarizer has none
        assert [t["name"] for t in tools] == [t["function"]["name"] for t in call.request.get("tools", [])]
        answer = call.response["choices"][0]["message"] if call.response else {}
        [output] = json.loads(attributes["gen_ai.output.messages"])
        texts = [p["content"] for p in output["parts"] if p["type"] == "text"]
        assert texts == ([answer["content"]] if answer.get("content") else [])
    assert invocations  # the calls above were matched to these


def test_each_tool_call_is_a_tool_span_beside_the_llm_span_that_asked_for_it(
    demo_store: Path, exported: tuple[Path, list[Span]]
) -> None:
    spans = exported[1]
    _, calls = records(demo_store)
    llm = {s.attributes["soapwb.call.id"]: s for s in of_kind(spans, "LLM")}
    tools = of_kind(spans, "TOOL")
    asked = [
        (call_id, c)
        for call_id, call in calls.items()
        for c in ((call.response or {})["choices"][0]["message"].get("tool_calls") or [])
    ]
    assert len(tools) == len(asked) > 0
    by_call_id = {s.attributes["gen_ai.tool.call.id"]: s for s in tools}
    for call_id, tool_call in asked:
        span, asking = by_call_id[tool_call["id"]], llm[call_id]
        assert span.parent_id == asking.parent_id and span.trace_id == asking.trace_id
        assert (
            span.attributes["tool.name"]
            == span.attributes["gen_ai.tool.name"]
            == tool_call["function"]["name"]
        )
        assert span.attributes["tool.parameters"] == tool_call["function"]["arguments"]
        assert asking.end_ns == span.start_ns <= span.end_ns
        assert isinstance(span.attributes["output.value"], str)


def test_a_second_export_is_the_same_file(
    demo_store: Path, exported: tuple[Path, list[Span]], tmp_path: Path
) -> None:
    export(demo_store, tmp_path / "again.jsonl")
    assert (tmp_path / "again.jsonl").read_bytes() == exported[0].read_bytes()


def test_one_session_exports_every_chain_through_it_whole(demo_store: Path, tmp_path: Path) -> None:
    """The working memory's one invocation was made in an interaction turn: its trace is
    that whole turn, the execution agent the turn called and its refused call back too."""
    [memory] = [s for s in Store(demo_store).sessions() if s.role == "WorkingMemory"]
    spans = export(demo_store, tmp_path / "one.jsonl", memory.uuid)
    agents = of_kind(spans, "AGENT")
    assert len({s.trace_id for s in spans}) == 1
    assert Counter(s.name for s in agents) == Counter(
        {
            "invoke_agent InteractionAgent": 2,
            "invoke_agent WorkingMemory": 1,
            "invoke_agent ExecutionAgent": 1,
        }
    )


def test_export_then_import_gives_back_the_same_requests(
    demo_store: Path, exported: tuple[Path, list[Span]], tmp_path: Path
) -> None:
    report = import_otel([exported[0]], tmp_path / "imported")
    _, original = records(demo_store)
    _, back = records(tmp_path / "imported")
    assert report.calls == len(back) == len(original)
    assert sorted(canonical_json(c.request) for c in back.values()) == sorted(
        canonical_json(c.request) for c in original.values()
    )
    sessions = {s.uuid: s for s in Store(tmp_path / "imported").sessions()}
    assert sorted(s.role for s in sessions.values()) == sorted(s.role for s in Store(demo_store).sessions())


def test_a_failed_call_is_an_error_span_with_its_message(demo_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(demo_store, store)
    path = next(store.glob("agents/KeywordExtractor/*/calls/*.json"))
    record: dict[str, Any] = json.loads(path.read_text())
    record.update(error="LLM call failed: 500 from the server", response=None, message_id=None)
    path.write_text(json.dumps(record))
    [failed] = [
        s for s in export(store, tmp_path / "out.jsonl") if s.attributes.get("soapwb.call.id") == record["id"]
    ]
    assert (failed.status, failed.status_message) == (2, "LLM call failed: 500 from the server")
    assert "output.value" not in failed.attributes


def test_a_peteos_session_gets_an_llm_span_per_answer_with_its_rebuilt_request(tmp_path: Path) -> None:
    spans = export(SOAP_FIXTURE, tmp_path / "peteos.jsonl")
    [agent] = of_kind(spans, "AGENT")
    llm = of_kind(spans, "LLM")
    session = Store(SOAP_FIXTURE).load_session(agent.attributes["session.id"])
    answers = [
        (c, i) for c in session.contexts.values() for i, m in enumerate(c.messages) if m.role == "assistant"
    ]
    assert len(llm) == 3 and agent.parent_id is None
    for span in llm:
        _, context_id, message_id = span.attributes["soapwb.call.id"].rsplit("/", 2)
        context = session.contexts[context_id]
        [index] = [i for i, m in enumerate(context.messages) if m.id == message_id]
        assert (context, index) in answers
        assert json.loads(span.attributes["input.value"]) == materialize(session, context, index).request
        assert span.start_ns == span.end_ns == ns(context.messages[index].creation_timestamp or "")
        assert span.parent_id == agent.span_id
    assert (agent.start_ns, agent.end_ns) == (min(s.start_ns for s in llm), max(s.end_ns for s in llm))


def test_an_openpoke_import_exports_its_turns_and_says_why_its_replies_have_no_llm_span(
    tmp_path: Path,
) -> None:
    """OpenPoke's source rebuilds a turn's request at the entry that started it, never at
    a reply (a reply is a tool's output): the turns are AGENT spans, and one note says why
    the replies have no LLM span."""
    import_openpoke(SOAP_FIXTURE.parent / "openpoke" / "short", tmp_path / "store")
    invocations, _ = records(tmp_path / "store")
    report = export_otel(Store(tmp_path / "store"), path=tmp_path / "poke.jsonl")
    spans = list(read_otlp(tmp_path / "poke.jsonl").spans)
    assert len(of_kind(spans, "AGENT")) == len(invocations) == report.spans["AGENT"] > 0
    assert not of_kind(spans, "LLM")
    [note] = report.notes
    assert "without an LLM span" in note and "a poke_reply: only user_message and agent_message" in note


# -- the command line ---------------------------------------------------------------------


def test_json_says_what_was_exported(
    demo_store: Path, exported: tuple[Path, list[Span]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.jsonl"
    assert main(["export", "otel", "--store", str(demo_store), "--file", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    kinds = Counter(s.attributes["openinference.span.kind"] for s in exported[1])
    assert report == {
        "target": str(out),
        "sessions": [],
        "traces": 10,
        "spans": dict(kinds),
        "notes": [],
    }


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--endpoint", f"http://127.0.0.1:{free_port()}/v1/traces"], "cannot send: Connection refused"),
        (["--endpoint", "ftp://example.org/v1/traces"], "not an http:// or https:// URL"),
        (["no-such-session", "--file", "out.jsonl"], "no session matches 'no-such-session'"),
    ],
)
def test_a_failure_is_one_line_and_exit_status_1(
    argv: list[str],
    said: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["export", "otel", *argv, "--store", str(SOAP_FIXTURE)]) == 1
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "out.jsonl").exists()


def test_an_endpoint_or_a_file_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["export", "otel", "--store", str(SOAP_FIXTURE)])
    assert (
        exit_.value.code == 2
        and "one of the arguments --endpoint --file is required" in capsys.readouterr().err
    )


# -- a real Phoenix -----------------------------------------------------------------------


def without_parameters(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attributes.items() if not k.startswith("tool.parameters")}


def parameters_of(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k.removeprefix("tool.parameters."): v
        for k, v in attributes.items()
        if k.startswith("tool.parameters.")
    }


def is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def flattened(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):  # Phoenix keeps no empty object
        return {k: v for key, item in value.items() for k, v in flattened(item, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): value}


def test_phoenix_receives_the_demo_store_as_exported(
    demo_store: Path, exported: tuple[Path, list[Span]], phoenix: Phoenix, tmp_path: Path
) -> None:
    sent = exported[1]
    assert main(["export", "otel", "--store", str(demo_store), "--endpoint", phoenix.url]) == 0
    answer = tmp_path / "phoenix.json"
    answer.write_text(json.dumps(phoenix.spans({s.trace_id for s in sent}, wanted=len(sent))))
    ours = {s.trace_id for s in sent}
    back = {s.span_id: s for s in read_otlp(answer).spans if s.trace_id in ours}
    assert sorted(back) == sorted(s.span_id for s in sent)
    for span in sent:
        kept = back[span.span_id]
        assert (kept.trace_id, kept.parent_id, kept.name, kept.status) == (
            span.trace_id,
            span.parent_id,
            span.name,
            span.status,
        )
        assert kept.kind == 1  # Phoenix keeps no OTLP span kind: it answers INTERNAL for all
        # Phoenix gives a tool's JSON parameters back flattened (tool.parameters.start), and
        # arguments that are no JSON (the small model's, with a raw newline in a string) as sent
        if "tool.parameters" in span.attributes and is_json(span.attributes["tool.parameters"]):
            assert without_parameters(kept.attributes) == without_parameters(span.attributes)
            assert parameters_of(kept.attributes) == flattened(json.loads(span.attributes["tool.parameters"]))
        else:
            assert kept.attributes == span.attributes
    _, calls = records(demo_store)
    for span in of_kind(list(back.values()), "LLM"):
        call = calls[span.attributes["soapwb.call.id"]]
        assert json.loads(span.attributes["input.value"]) == call.request
        system = call.request["messages"][0]
        assert span.attributes["llm.input_messages.0.message.content"] == system["content"]
        assert span.attributes["session.id"] == call.session
    roles = Counter(s.attributes["gen_ai.agent.name"] for s in of_kind(list(back.values()), "AGENT"))
    assert roles["LogAnalyzer"] == 6 and roles["InteractionAgent"] == 5


def test_phoenixs_sessions_view_draws_the_exported_sessions_at_the_benchmarks_link(
    demo_store: Path, exported: tuple[Path, list[Span]], phoenix: Phoenix
) -> None:
    """What benchmarks/phoenix_view.py times is a real list: Phoenix's Sessions view, at
    the link the benchmark opens, draws a row for each session of ours that roots a trace."""
    from benchmarks.phoenix_view import FIRST_ROW, SESSIONS_RANGE, _ingested
    from tests.test_browser import CHROMIUM, FLAGS

    if not Path(CHROMIUM).exists():
        pytest.skip(f"no chromium at {CHROMIUM}: the browser test cannot run")
    from playwright.sync_api import sync_playwright

    sent = exported[1]
    assert main(["export", "otel", "--store", str(demo_store), "--endpoint", phoenix.url]) == 0
    project = _ingested(phoenix.url, len({s.trace_id for s in sent}))
    roots = {str(s.attributes["session.id"]) for s in sent if not s.parent_id}
    assert roots
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{phoenix.url}/projects/{project['id']}/sessions?{SESSIONS_RANGE}")
            page.locator(FIRST_ROW).first.wait_for(state="visible", timeout=60_000)
            drawn = {text.strip() for text in page.locator(f"{FIRST_ROW} td:first-child").all_inner_texts()}
        finally:
            browser.close()
    assert roots <= drawn
