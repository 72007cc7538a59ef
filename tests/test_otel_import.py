"""Importing traces (issue 25, points 1 and 2): real instrumentations' traces become
sessions, recorded calls and invocations, and every imported call rebuilds the request
the scripted server received, through the ``otel`` request source.

The traces are written in the side venvs by the real instrumentations around the real
``openai`` client (``tests/test_otel_read.py``'s fixtures, shared); the ground truth is the
bodies the scripted server recorded. The replay and the re-run go to the local model."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from importers import ImporterError
from importers.otel import Telemetry, import_otel, model_calls, read_otlp
from local_model import LocalModelServer
from replay import Overrides, ToolModes, materialize, replay, rerun, verify_session
from soap_core import Session, SoapError, Store
from soap_core.runtime import LLMEndpoint, invocation_chains, read_invocations
from soapwb.cli import main
from tests.apptest import PAGES, open_app_page
from tests.peers.local_proxy import LocalProxy
from tests.peers.otel_traces import SCRIPT, Written, run_driver
from tests.peers.phoenix import Phoenix

FLAVOURS = {"written": ("trace.pb",), "events": ("trace.pb", "logs.pb"), "latest": ("trace.jsonl",)}


def files_of(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}


def imported(trace: Written, names: tuple[str, ...], store_dir: Path) -> tuple[Store, Session]:
    report = import_otel([trace.directory / n for n in names], store_dir)
    [made] = report.sessions
    assert (made.session_id, made.calls, made.calls_added) == (trace.session, 2, 2)
    store = Store(store_dir)
    return store, store.load_session(made.uuid, require_active=False)


def rebuilt(session: Session) -> list[Any]:
    calls = sorted(session.calls(), key=lambda c: c.started_at)
    return [materialize(session, c.context_id, c.message_index) for c in calls]


def test_every_openinference_call_rebuilds_the_whole_body_the_server_received(
    written: Written, tmp_path: Path
) -> None:
    _store, session = imported(written, FLAVOURS["written"], tmp_path / "store")
    found = rebuilt(session)
    assert [f.request for f in found] == written.bodies  # every key, every message
    assert all(f.source == "otel" and not f.notes for f in found)
    assert all(v.match for v in verify_session(session)) and len(verify_session(session)) == 2
    # one context: the second call continues the first (its answer, the tool result)
    [context] = session.contexts.values()
    assert [m.role for m in context.messages] == [
        "system",
        "tool",
        "user",
        "assistant",
        "tool_result",
        "assistant",
    ]
    assert context.messages[-1].text() == SCRIPT[1]["content"]


@pytest.mark.parametrize("fixture", ["events", "latest"])
def test_every_genai_call_rebuilds_the_messages_exactly_and_names_what_the_trace_lost(
    fixture: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    trace: Written = request.getfixturevalue(fixture)
    _store, session = imported(trace, FLAVOURS[fixture], tmp_path / "store")
    for found, body in zip(rebuilt(session), trace.bodies, strict=True):
        assert found.request["messages"] == body["messages"]
        assert found.request["model"] == body["model"] and found.request["max_tokens"] == body["max_tokens"]
        assert "tools" not in found.request  # not kept by these instrumentations: never made up
        [note] = found.notes
        assert note.startswith("the trace did not keep: ") and "tool definitions" in note
    assert all(v.match for v in verify_session(session))


def test_the_older_conventions_get_the_assistant_text_back_from_the_choice(events: Written) -> None:
    """The next call's events drop an assistant message's text when it has tool calls;
    the gen_ai.choice with the same tool-call ids still holds it (the driver's first
    answer has no text: one is given to its choice here)."""
    spans = read_otlp(events.directory / "trace.pb").spans
    logs = read_otlp(events.directory / "logs.pb").logs
    assert "content" not in model_calls(Telemetry(spans, logs))[1].messages[2]  # nothing made up
    texted = tuple(
        dataclasses.replace(r, body={**r.body, "message": {**r.body["message"], "content": "Let me count."}})
        if r.event_name == "gen_ai.choice" and "tool_calls" in r.body["message"]
        else r
        for r in logs
    )
    assistant = model_calls(Telemetry(spans, texted))[1].messages[2]
    assert assistant["content"] == "Let me count." and assistant["tool_calls"][0]["id"] == "call_1"


@pytest.mark.parametrize("fixture", ["written", "events", "latest"])
def test_importing_again_writes_nothing(fixture: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    trace: Written = request.getfixturevalue(fixture)
    store_dir = tmp_path / "store"
    imported(trace, FLAVOURS[fixture], store_dir)
    before = files_of(store_dir)
    again = import_otel([trace.directory / n for n in FLAVOURS[fixture]], store_dir)
    assert not again.changed and [s.status for s in again.sessions] == ["unchanged"]
    assert files_of(store_dir) == before


def test_a_grown_file_appends_its_new_calls_to_the_same_context(written: Written, tmp_path: Path) -> None:
    [line] = (written.directory / "trace.jsonl").read_text().splitlines()
    document = json.loads(line)
    spans = document["resourceSpans"][0]["scopeSpans"]
    ordered = sorted(
        ((scope_index, span) for scope_index, scope in enumerate(spans) for span in scope["spans"]),
        key=lambda pair: int(pair[1]["startTimeUnixNano"]),
    )
    second_call = [s for _, s in ordered if s["name"] == "ChatCompletion"][1]

    def without(doc: dict[str, Any], keep: bool) -> dict[str, Any]:
        copy = json.loads(json.dumps(doc))
        for scope in copy["resourceSpans"][0]["scopeSpans"]:
            scope["spans"] = [s for s in scope["spans"] if (s["spanId"] == second_call["spanId"]) == keep]
        return copy

    grown = tmp_path / "grown.jsonl"
    grown.write_text(json.dumps(without(document, keep=False)) + "\n")
    store_dir = tmp_path / "store"
    first = import_otel([grown], store_dir)
    assert (first.calls, first.sessions[0].calls_added) == (1, 1)
    store = Store(store_dir)
    [context] = store.load_session(first.sessions[0].uuid, require_active=False).contexts.values()
    kept = [m.to_dict() for m in context.messages]
    with grown.open("a") as out:
        out.write(json.dumps(without(document, keep=True)) + "\n")
    second = import_otel([grown], store_dir)
    assert (second.calls, second.sessions[0].calls_added, second.sessions[0].status) == (2, 1, "updated")
    session = store.load_session(first.sessions[0].uuid, require_active=False)
    [context_after] = session.contexts.values()
    assert context_after.id == context.id
    # what was imported stays (the answer now also says how it was sent), the rest is appended
    assert [m["id"] for m in kept] == [m.id for m in context_after.messages[: len(kept)]]
    assert len(context_after.messages) == len(kept) + 2
    assert [f.request for f in rebuilt(session)] == written.bodies


def test_the_agent_span_is_an_invocation_listing_its_calls(written: Written, tmp_path: Path) -> None:
    _store, session = imported(written, FLAVOURS["written"], tmp_path / "store")
    assert session.role == "Analyst"
    [invocation] = read_invocations(session.directory)
    assert invocation.callee.object_id == "Analyst" and invocation.outcome == "ok"
    assert sorted(invocation.calls) == sorted(c.id for c in session.calls())
    assert all(c.invocation_id == invocation.id for c in session.calls())


def test_a_call_that_forks_its_history_becomes_a_fork(written: Written, tmp_path: Path) -> None:
    """A third call that sends only the system prompt and another question shares the
    first two messages' beginning: it is a fork of the context at the system prompt."""
    [line] = (written.directory / "trace.jsonl").read_text().splitlines()
    document = json.loads(line)
    scope = next(
        s
        for s in document["resourceSpans"][0]["scopeSpans"]
        if any(x["name"] == "ChatCompletion" for x in s["spans"])
    )
    call = json.loads(json.dumps(next(x for x in scope["spans"] if x["name"] == "ChatCompletion")))
    for attribute in call["attributes"]:
        if attribute["key"] == "input.value":
            body = json.loads(attribute["value"]["stringValue"])
            body["messages"] = [body["messages"][0], {"role": "user", "content": "Anything else?"}]
            attribute["value"]["stringValue"] = json.dumps(body)
    call["spanId"] = "00000000000000aa"
    call["startTimeUnixNano"] = call["endTimeUnixNano"] = str(10**19 - 1)
    scope["spans"].append(call)
    path = tmp_path / "forked.jsonl"
    path.write_text(json.dumps(document) + "\n")
    report = import_otel([path], tmp_path / "store")
    session = Store(tmp_path / "store").load_session(report.sessions[0].uuid, require_active=False)
    assert len(session.contexts) == 2
    fork = session.active_context
    assert fork.origin_context_id is not None and fork.id in session.contexts[fork.origin_context_id].children
    found = rebuilt(session)
    assert found[2].request["messages"] == body["messages"] and found[2].context_id == fork.id


def test_soapwb_import_otel_reports_and_fails_in_one_line(
    written: Written, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "store")
    assert main(["import", "otel", str(written.directory / "trace.pb"), "--store", store, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["calls"], report["flavours"], report["changed"]) == (2, {"openinference": 2}, True)
    assert main(["import", "otel", str(written.directory / "trace.pb"), "--store", store]) == 0
    assert "nothing changed (already imported)" in capsys.readouterr().out
    assert main(["import", "otel", str(tmp_path / "missing.pb"), "--store", store]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.pb: cannot read" in err and "Traceback" not in err


def test_an_imported_call_replays_and_reruns_on_the_local_model(
    written: Written, tmp_path: Path, llm_server: LocalModelServer
) -> None:
    store, session = imported(written, FLAVOURS["written"], tmp_path / "store")
    first = rebuilt(session)[0]
    [run] = replay(store, session, first, LLMEndpoint(llm_server.base_url), Overrides(max_tokens=24))
    assert run.ok, run.error
    # the request sent is the traced body, the model and max_tokens as asked
    expected = {**written.bodies[0], "max_tokens": 24}
    assert {k: v for k, v in run.request.items() if k != "model"} == {
        k: v for k, v in expected.items() if k != "model"
    }
    again = store.load_session(session.uuid, require_active=False)
    result = rerun(
        store,
        again,
        first.context_id,
        first.index,
        LLMEndpoint(llm_server.base_url),
        overrides=Overrides(max_tokens=24),
        tools=ToolModes(default="recorded"),
    )
    assert result.ok, result.problem
    # the re-run's first request is the traced one, up to the answer it re-ran
    sent = next(
        c for c in store.load_session(session.uuid, require_active=False).calls() if c.id == result.calls[0]
    )
    assert sent.request["messages"] == written.bodies[0]["messages"]
    assert sent.request["tools"] == written.bodies[0]["tools"]


def test_an_imported_call_is_attributed_with_requests_its_source_builds(
    written: Written, tmp_path: Path, scoring_server: LocalModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29: `soapwb attribute` on another framework's session: the ablated requests
    are the OpenTelemetry source's (with nothing removed, the traced body itself)."""
    from analysis import ablated_request, saved_attributions

    store, session = imported(written, FLAVOURS["written"], tmp_path / "store")
    last = rebuilt(session)[-1]
    assert ablated_request(last, set())[0] == written.bodies[-1]
    without_first_user = ablated_request(
        last, {next(i for i, m in enumerate(last.messages) if m.role == "user")}
    )[0]
    assert len(without_first_user["messages"]) == len(written.bodies[-1]["messages"]) - 1
    argv = ["attribute", session.uuid, "--context", last.context_id, "--at", str(last.index)]
    argv += [
        "--ablations",
        "4",
        "--store",
        str(tmp_path / "store"),
        "--json",
        "--base-url",
        scoring_server.base_url,
    ]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["source"] == "otel" and len(printed["units"]) == len(last.messages)
    [saved] = saved_attributions(store.load_session(session.uuid, require_active=False))
    assert saved.id == printed["id"] and saved.weights == printed["weights"]


@pytest.mark.parametrize("page", PAGES)
def test_every_page_opens_on_an_imported_trace(written: Written, tmp_path: Path, page: str) -> None:
    """Point 4: an imported trace is a session like any other: every page opens on it,
    with no error, and the Context and Replay pages show the traced answer and request."""
    _, session = imported(written, FLAVOURS["written"], tmp_path / "store")
    at = open_app_page(tmp_path / "store", page, session=session.uuid)
    assert not at.error, [e.value for e in at.error]
    shown = " ".join(str(e.value) for e in [*at.markdown, *at.text, *at.code, *at.caption])
    if page == "context":
        assert SCRIPT[1]["content"] in shown
    if page == "replay":
        assert "Rebuilt from its OpenTelemetry trace" in shown and "Verified" in " ".join(
            str(s.value) for s in at.success
        )
    if page == "traceback":
        assert "Analyst" in shown or any("Analyst" in str(c.proto) for c in at.get("plotly_chart"))


def test_agent_spans_nest_as_invocations_and_traceback_follows_them(written: Written, tmp_path: Path) -> None:
    """A sub-agent span between the agent and its second call: two invocations, the
    inner one's parent the outer one, each listing the call made directly in it."""
    [line] = (written.directory / "trace.jsonl").read_text().splitlines()
    document = json.loads(line)
    scopes = document["resourceSpans"][0]["scopeSpans"]
    spans = [s for scope in scopes for s in scope["spans"]]
    agent = next(s for s in spans if not s.get("parentSpanId"))
    second = sorted(
        (s for s in spans if s["name"] == "ChatCompletion"), key=lambda s: int(s["startTimeUnixNano"])
    )[1]
    inner = json.loads(json.dumps(agent))
    inner.update(spanId="00000000000000bb", parentSpanId=agent["spanId"], name="Counter")
    inner["startTimeUnixNano"] = str(int(second["startTimeUnixNano"]) - 1)
    second["parentSpanId"] = inner["spanId"]
    scopes[0]["spans"].append(inner)
    path = tmp_path / "nested.jsonl"
    path.write_text(json.dumps(document) + "\n")
    report = import_otel([path], tmp_path / "store")
    session = Store(tmp_path / "store").load_session(report.sessions[0].uuid, require_active=False)
    records = {r.callee.object_id: r for r in read_invocations(session.directory)}
    assert sorted(records) == ["Analyst", "Counter"]
    outer, nested = records["Analyst"], records["Counter"]
    assert nested.parent_invocation_id == outer.id and outer.parent_invocation_id is None
    assert nested.caller is not None and nested.caller.object_id == "Analyst"
    calls = sorted(session.calls(), key=lambda c: c.started_at)
    assert (outer.calls, nested.calls) == ([calls[0].id], [calls[1].id])
    [chain] = invocation_chains(Store(tmp_path / "store"), session.uuid)
    assert [(f.object_id, f.depth) for f in chain.frames] == [("Analyst", 0), ("Counter", 1)]


def test_a_tool_span_gives_the_result_no_request_sent_yet(written: Written, tmp_path: Path) -> None:
    """The trace ends after a tool ran: its span's output is the result of the call that
    asked for it. When the trace grows by the next request, which sends the result as the
    agent passed it on, that request continues the same context and is rebuilt exactly."""
    [line] = (written.directory / "trace.jsonl").read_text().splitlines()
    document = json.loads(line)
    spans = [s for scope in document["resourceSpans"][0]["scopeSpans"] for s in scope["spans"]]
    [tool] = [s for s in spans if s["name"] == "count_errors"]
    tool["attributes"].append(
        {"key": "output.value", "value": {"stringValue": "3 (as the tool span has it)"}}
    )
    second = sorted(
        (s for s in spans if s["name"] == "ChatCompletion"), key=lambda s: int(s["startTimeUnixNano"])
    )[1]

    def keeping(keep: bool) -> dict[str, Any]:
        copy = json.loads(json.dumps(document))
        for scope in copy["resourceSpans"][0]["scopeSpans"]:
            scope["spans"] = [s for s in scope["spans"] if (s["spanId"] == second["spanId"]) == keep]
        return copy

    path = tmp_path / "trace.jsonl"
    path.write_text(json.dumps(keeping(False)) + "\n")
    first = import_otel([path], tmp_path / "store")
    assert (first.calls, first.sessions[0].tool_results) == (1, 1)
    store = Store(tmp_path / "store")
    [context] = store.load_session(first.sessions[0].uuid, require_active=False).contexts.values()
    assert context.messages[-1].role == "tool_result"
    assert context.messages[-1].tool_results()[0].content == "3 (as the tool span has it)"
    assert not import_otel([path], tmp_path / "store").changed  # the span's result is there already
    with path.open("a") as out:
        out.write(json.dumps(keeping(True)) + "\n")
    grown = import_otel([path], tmp_path / "store")
    assert (grown.sessions[0].calls_added, grown.sessions[0].tool_results) == (1, 0)
    session = store.load_session(first.sessions[0].uuid, require_active=False)
    assert list(session.contexts) == [context.id]  # no fork: the request sent that result
    assert [f.request for f in rebuilt(session)] == written.bodies  # the result as it was sent


def test_what_phoenix_gives_back_imports_as_the_trace_it_was_sent(
    written: Written, phoenix: Phoenix, tmp_path: Path
) -> None:
    """A trace sent to a real Phoenix and read back from its span API (``soapwb import otel``
    of the answer, as the README shows) rebuilds the same requests."""
    sent = read_otlp(written.directory / "trace.pb").spans
    assert phoenix.send_traces((written.directory / "trace.pb").read_bytes()) == 200
    answer = tmp_path / "phoenix.json"
    document = phoenix.spans({sent[0].trace_id}, wanted=len(sent))
    answer.write_text(json.dumps(document))
    report = import_otel([answer], tmp_path / "store")
    [made] = report.sessions
    assert (made.session_id, made.calls, made.role) == (written.session, 2, "Analyst")
    session = Store(tmp_path / "store").load_session(made.uuid, require_active=False)
    assert [f.request for f in rebuilt(session)] == written.bodies


def test_a_trace_of_the_local_model_imports_and_replays(tmp_path: Path, llm_server: LocalModelServer) -> None:
    """OpenInference around the real client talking to the local model (through a proxy
    that keeps the bodies): two turns whose second sends the model's real first answer
    back. Both rebuild as received, and the second replays on the model."""
    with LocalProxy(llm_server.base_url) as proxy:
        summary = run_driver(
            "openinference", "openinference", proxy.base_url, tmp_path / "trace", "conversation"
        )
    assert len(proxy.bodies) == 2
    report = import_otel([tmp_path / "trace" / "trace.pb"], tmp_path / "store")
    [made] = report.sessions
    assert (made.session_id, made.calls) == (summary["session"], 2)
    store = Store(tmp_path / "store")
    session = store.load_session(made.uuid, require_active=False)
    found = rebuilt(session)
    assert [f.request for f in found] == proxy.bodies
    [context] = session.contexts.values()
    assert context.messages[2].text() == proxy.bodies[1]["messages"][2]["content"]  # the model's own words
    [run] = replay(store, session, found[1], LLMEndpoint(llm_server.base_url), Overrides(max_tokens=12))
    assert run.ok, run.error
    assert run.request["messages"] == proxy.bodies[1]["messages"]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "role",
                    "content",
                    "tool_calls",
                    "function",
                    "id",
                    "name",
                    "arguments",
                    "type",
                    "parts",
                    "tool_call_id",
                    "x",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(messages=JSON, output=JSON, parts=JSON)
def test_spans_shaped_wrongly_are_left_out_with_a_reason_never_a_traceback(
    written: Written, latest: Written, messages: Any, output: Any, parts: Any
) -> None:
    """Any JSON where the messages, the answer or the GenAI parts should be: the import
    ends in a report (the span left out and named) or an ImporterError, and every call it
    recorded materializes or says why not."""
    documents = []
    for trace, name in ((written, "input.value"), (latest, "gen_ai.input.messages")):
        [line] = (trace.directory / "trace.jsonl").read_text().splitlines()[:1]
        document = json.loads(line)
        for scope in document["resourceSpans"][0]["scopeSpans"]:
            for span in scope["spans"]:
                for attribute in span["attributes"]:
                    value = attribute["value"]
                    if attribute["key"] == name == "input.value":
                        value["stringValue"] = json.dumps({"model": "m", "messages": messages})
                    elif attribute["key"] == "output.value":
                        value["stringValue"] = json.dumps({"choices": [{"message": output}]})
                    elif attribute["key"] == name:
                        value["stringValue"] = json.dumps(parts)
        documents.append(json.dumps(document))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.jsonl"
        path.write_text("\n".join(documents) + "\n")
        try:
            report = import_otel([path], Path(folder) / "store")
        except ImporterError:
            return
        assert all("left out" in n for n in report.notices if n.startswith("span "))
        store = Store(Path(folder) / "store")
        for made in report.sessions:
            session = store.load_session(made.uuid, require_active=False)
            for call in session.calls():
                with contextlib.suppress(SoapError):  # an error that names the message is fine
                    materialize(session, call.context_id, call.message_index)


def test_a_span_in_two_files_is_imported_once(events: Written, tmp_path: Path) -> None:
    """Overlapping files (a span, or a log record, given twice) make each call once."""
    files = [events.directory / "trace.pb", events.directory / "logs.pb"]
    report = import_otel([*files, *files, events.directory / "trace.jsonl"], tmp_path / "store")
    assert (report.calls, report.spans, report.logs) == (2, 4, 8)
    session = Store(tmp_path / "store").load_session(report.sessions[0].uuid, require_active=False)
    assert [f.request["messages"] for f in rebuilt(session)] == [b["messages"] for b in events.bodies]
