"""A store's sessions out as OpenTelemetry traces (issue 25), for Phoenix, Langfuse and others.

One trace per invocation chain (:func:`soap_core.runtime.invocation_chains`), its spans:

* an **AGENT** / ``invoke_agent`` span per invocation, under the invocation that made it;
* an **LLM** / ``chat`` span per model call of the invocation (:func:`replay.llm_calls`):
  a recorded call's exact request in ``input.value``, so that an import gives back the
  same request, its response, usage, status and real start and end; where a session has
  no call records (peteos, an import) a span per model answer, its request rebuilt by the
  session's request source, timed at the answer (start = end: one time is known);
* a **TOOL** / ``execute_tool`` span per tool call of an answer, beside the LLM span that
  asked for it, from the answer's end to its result's time.

A session's calls made outside any invocation (all of a peteos session's) get a trace of
their own, under one AGENT span standing for the session. The workbench's own runs are
left out: re-run chains and replayed calls are not the agent's history.

Each span carries both vocabularies: OpenInference's (``openinference.span.kind``,
``input.value``, ``llm.*``: what Phoenix shows) and the GenAI conventions' latest
(``gen_ai.*``, messages as JSON parts: what Langfuse and other GenAI readers map). A system
message stays in ``gen_ai.input.messages``: the conventions keep
``gen_ai.system_instructions`` for instructions given apart from the chat history.
``gen_ai.provider.name`` is ``openai``, the API every request source speaks (as the
openai-v2 instrumentation says whatever server it calls).

Trace and span ids are hashes of the records' ids, so a second export sends the same
spans. Message times without a zone (peteos and the runtime write local times) are read
in this machine's zone.
"""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from importers.otel._calls import _GENAI_PARAMETERS
from replay import llm_calls, materialize, session_calls
from soap_core import (
    CallRecord,
    Context,
    InvocationRecord,
    Message,
    Session,
    SoapError,
    Store,
    chat_message,
    parse_stamp,
    read_invocations,
    write_text_atomic,
)
from soap_core.runtime import InvocationChain, TraceFrame, invocation_chains

SCOPE = "soapwb.export"
PROVIDER = "openai"
"""The API every request source speaks (``llm.provider``, ``gen_ai.provider.name``)."""
INVOCATION_ID = "soapwb.invocation.id"
CALL_ID = "soapwb.call.id"
"""Where an AGENT span's invocation and an LLM span's call came from: the record's id (for
a call rebuilt without a record, ``ROLE/SESSION/CONTEXT/MESSAGE``)."""
INTERNAL, CLIENT = Span.SPAN_KIND_INTERNAL, Span.SPAN_KIND_CLIENT
_FAILED = ("error", "refused", "interrupted")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ChatMessage = dict[str, Any]


class ExportError(SoapError):
    """The traces cannot be delivered: the endpoint cannot be reached or refused them, or
    the file cannot be written. Names where they were going."""

    def __init__(self, target: str, problem: str) -> None:
        self.target, self.problem = target, problem
        super().__init__(f"{target}: {problem}")


@dataclass
class ExportReport:
    target: str
    sessions: list[str]
    """The sessions asked for (all of the store's when none was named)."""
    traces: int
    spans: dict[str, int]
    """Spans by OpenInference kind (AGENT, LLM, TOOL)."""
    notes: list[str] = field(default_factory=list)
    """What could not be exported, and why."""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# -- ids and times ------------------------------------------------------------------------


def _id(size: int, *parts: str) -> bytes:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).digest()[:size]


def time_ns(stamp: str | None) -> int | None:
    """Nanoseconds since the epoch of an ISO stamp; a stamp without a zone in this
    machine's (what peteos and the runtime meant by it); None for none."""
    moment = parse_stamp(stamp)
    return None if moment is None else (moment - _EPOCH) // timedelta(microseconds=1) * 1000


# -- attribute values ---------------------------------------------------------------------


def _text(value: str) -> str:
    """``value`` as protobuf can hold it (a lone surrogate a file held becomes U+FFFD)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "replace").decode("utf-8")
    return value


def _json(value: Any) -> str:
    """``value`` as JSON that reads back as the same value (escaped where it holds text
    that is no Unicode, as protobuf strings must be)."""
    text = json.dumps(value, ensure_ascii=False)
    return text if _text(text) is text else json.dumps(value)


def _any(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=_text(value))
    if isinstance(value, list) and all(isinstance(v, (str, bool, int, float)) for v in value):
        return AnyValue(array_value=ArrayValue(values=[_any(v) for v in value]))
    return AnyValue(string_value=_json(value))


def _key_values(attributes: Mapping[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=_any(v)) for k, v in attributes.items() if v is not None]


def _mime_type(text: str | None) -> str | None:
    """``application/json`` for the text of a JSON object or array (as Phoenix guesses it
    on its own), ``text/plain`` for other text."""
    if text is None:
        return None
    try:
        return "application/json" if isinstance(json.loads(text), (dict, list)) else "text/plain"
    except ValueError:
        return "text/plain"


# -- messages in both vocabularies --------------------------------------------------------


def _openinference_message(prefix: str, message: Mapping[str, Any]) -> dict[str, Any]:
    """One chat message as ``{prefix}.message.*`` attributes."""
    found: dict[str, Any] = {f"{prefix}.message.role": message.get("role")}
    content = message.get("content")
    if isinstance(content, str):
        found[f"{prefix}.message.content"] = content or None  # as OpenInference: no empty content
    elif isinstance(content, list):
        for k, part in enumerate(p for p in content if isinstance(p, dict)):
            at = f"{prefix}.message.contents.{k}.message_content"
            if part.get("type") == "text":
                found |= {f"{at}.type": "text", f"{at}.text": part.get("text")}
            elif part.get("type") == "image_url":
                url = (part.get("image_url") or {}).get("url")
                found |= {f"{at}.type": "image", f"{at}.image.image.url": url}
    found[f"{prefix}.message.tool_call_id"] = message.get("tool_call_id")
    for j, call in enumerate(message.get("tool_calls") or []):
        at, function = f"{prefix}.message.tool_calls.{j}.tool_call", call.get("function") or {}
        found |= {
            f"{at}.id": call.get("id"),
            f"{at}.function.name": function.get("name"),
            f"{at}.function.arguments": function.get("arguments"),
        }
    return found


def _parsed(arguments: Any) -> Any:
    try:
        return json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return arguments


def _genai_parts(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One chat message's parts as the GenAI conventions type them (as openai-v2 does)."""
    content = message.get("content")
    if message.get("role") == "tool":
        return [{"type": "tool_call_response", "id": message.get("tool_call_id"), "response": content}]
    parts: list[dict[str, Any]] = [
        {
            "type": "tool_call",
            "id": call.get("id"),
            "name": (call.get("function") or {}).get("name"),
            "arguments": _parsed((call.get("function") or {}).get("arguments")),
        }
        for call in message.get("tool_calls") or []
    ]
    if isinstance(content, str) and (content or not parts):
        parts.append({"type": "text", "content": content})
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict) and part.get("type") == "text":
            parts.append({"type": "text", "content": part.get("text", "")})
        elif isinstance(part, dict):
            parts.append({"type": str(part.get("type")), "value": part})
    return parts


def _genai_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    function = tool.get("function")
    if tool.get("type") != "function" or not isinstance(function, dict):
        return dict(tool)
    return {"type": "function", **{k: function.get(k) for k in ("name", "description", "parameters")}}


def _genai_parameters(parameters: Mapping[str, Any]) -> dict[str, Any]:
    found = {key: parameters.get(name) for key, name in _GENAI_PARAMETERS.items()}
    stop = found.get("gen_ai.request.stop_sequences")
    if isinstance(stop, str):
        found["gen_ai.request.stop_sequences"] = [stop]
    return found


def _messages_attributes(
    request: Mapping[str, Any], answer: ChatMessage | None, finish_reason: str | None
) -> dict[str, Any]:
    messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
    tools = [t for t in request.get("tools") or [] if isinstance(t, dict)]
    found: dict[str, Any] = {}
    for i, message in enumerate(messages):
        found |= _openinference_message(f"llm.input_messages.{i}", message)
    for i, tool in enumerate(tools):
        found[f"llm.tools.{i}.tool.json_schema"] = _json(tool)
    if answer is not None:
        found |= _openinference_message("llm.output_messages.0", answer)
    found["gen_ai.input.messages"] = _json(
        [{"role": m.get("role"), "parts": _genai_parts(m)} for m in messages]
    )
    if answer is not None:
        output = {"role": "assistant", "parts": _genai_parts(answer), "finish_reason": finish_reason}
        found["gen_ai.output.messages"] = _json([output])
    found["gen_ai.tool.definitions"] = _json([_genai_tool(t) for t in tools]) if tools else None
    return found


# -- the model calls of a session ---------------------------------------------------------


@dataclass
class _Call:
    """One model call as its span shows it."""

    key: str
    invocation: str | None
    request: dict[str, Any]
    response: dict[str, Any] | None
    usage: dict[str, Any] | None
    start_ns: int
    end_ns: int
    error: str | None
    context: Context
    answer: int | None
    """The display index of its answer in ``context`` (None when it has none)."""


@dataclass
class _Session:
    session: Session
    invocations: dict[str, InvocationRecord]
    calls: dict[str | None, list[_Call]]
    """By the invocation that made them (None: none of the session's)."""


def _recorded(context: Context, record: CallRecord, known: set[str]) -> _Call:
    start = time_ns(record.started_at) or 0
    index = record.message_index
    held = index < len(context.messages) and context.messages[index].id == record.message_id
    return _Call(
        key=record.id,
        invocation=record.invocation_id if record.invocation_id in known else None,
        request=record.request,
        response=record.response,
        usage=record.usage,
        start_ns=start,
        end_ns=time_ns(record.ended_at) or start,
        error=record.error,
        context=context,
        answer=index if held else None,
    )


def _rebuilt(session: Session, context: Context, index: int) -> _Call:
    """The call behind a model answer that has no record, rebuilt by the session's source."""
    found = materialize(session, context, index, calls=[])
    answer = context.messages[index]
    at = time_ns(answer.creation_timestamp) or 0
    key = f"{session.role}/{session.uuid}/{context.id}/{answer.id}"
    return _Call(key, None, found.request, None, None, at, at, None, context, index)


def _session_calls(session: Session, known: set[str], notes: list[str]) -> dict[str | None, list[_Call]]:
    """The session's calls by invocation; one note for the answers whose request its
    source cannot rebuild (OpenPoke rebuilds a turn at its incoming entry, not at a reply)."""
    log = session_calls(session)
    found: dict[str | None, list[_Call]] = {}
    failed: list[str] = []
    for context, index, record in llm_calls(session, log):
        try:
            call = _recorded(context, record, known) if record else _rebuilt(session, context, index)
        except SoapError as exc:
            failed.append(str(exc))
            continue
        found.setdefault(call.invocation, []).append(call)
    if failed:
        notes.append(
            f"{session.role}/{session.uuid}: {len(failed)} model answer(s) without an LLM span, their "
            f"request not rebuilt; the first: {failed[0]}"
        )
    return found


# -- spans --------------------------------------------------------------------------------


def _span(
    trace: bytes,
    span_id: bytes,
    parent: bytes | None,
    name: str,
    kind: Span.SpanKind.ValueType,
    times: tuple[int, int],
    attributes: Mapping[str, Any],
    error: str | None = None,
) -> Span:
    status = Status(code=Status.STATUS_CODE_ERROR, message=_text(error)) if error else None
    return Span(
        trace_id=trace,
        span_id=span_id,
        parent_span_id=parent or b"",
        name=_text(name),
        kind=kind,
        start_time_unix_nano=times[0],
        end_time_unix_nano=max(times),
        attributes=_key_values(attributes),
        status=status,
    )


def _agent_attributes(role: str, session: str, prompt: str | None, result: Any) -> dict[str, Any]:
    output = result if isinstance(result, str) or result is None else _json(result)
    return {
        "openinference.span.kind": "AGENT",
        "session.id": session,
        "input.value": prompt,
        "input.mime_type": _mime_type(prompt),
        "output.value": output,
        "output.mime_type": _mime_type(output),
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": role,
        "gen_ai.conversation.id": session,
    }


def _llm_attributes(call: _Call, session: str) -> dict[str, Any]:
    request, response, usage = call.request, call.response or {}, call.usage or {}
    parameters = {k: v for k, v in request.items() if k not in ("messages", "tools")}
    choice = (response.get("choices") or [{}])[0]
    if response:
        answer, finish = choice.get("message"), choice.get("finish_reason")
    elif call.answer is not None and not call.error:
        [answer] = chat_message(call.context.messages[call.answer])
        finish = "tool_calls" if answer.get("tool_calls") else "stop"
    else:
        answer, finish = None, None
    model = response.get("model") or request.get("model")
    return {
        "openinference.span.kind": "LLM",
        "session.id": session,
        "input.value": _json(request),
        "input.mime_type": "application/json",
        "output.value": _json(response or answer) if (response or answer) else None,
        "output.mime_type": "application/json" if (response or answer) else None,
        "llm.model_name": model,
        "llm.provider": PROVIDER,
        "llm.system": PROVIDER,
        "llm.finish_reason": finish,
        "llm.invocation_parameters": _json(parameters),
        "llm.token_count.prompt": usage.get("prompt_tokens"),
        "llm.token_count.completion": usage.get("completion_tokens"),
        "llm.token_count.total": usage.get("total_tokens"),
        **_messages_attributes(request, answer if isinstance(answer, dict) else None, finish),
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.conversation.id": session,
        "gen_ai.request.model": request.get("model"),
        **_genai_parameters(parameters),
        "gen_ai.response.model": response.get("model"),
        "gen_ai.response.id": response.get("id"),
        "gen_ai.response.finish_reasons": [finish] if finish else None,
        "gen_ai.usage.input_tokens": usage.get("prompt_tokens"),
        "gen_ai.usage.output_tokens": usage.get("completion_tokens"),
    }


def _tool_spans(trace: bytes, parent: bytes, call: _Call, session: str) -> Iterator[Span]:
    """A span per tool call of ``call``'s answer: from the answer to its result."""
    if call.answer is None:
        return
    messages = call.context.messages
    results: dict[str, tuple[Any, Message]] = {}
    for later in messages[call.answer + 1 :]:
        for part in later.tool_results():
            results.setdefault(part.call_id, (part.content, later))
    for position, use in enumerate(messages[call.answer].tool_uses()):
        result, message = results.get(use.call_id, (None, None))
        end = time_ns(message.creation_timestamp) if message is not None else None
        output = result if isinstance(result, str) or result is None else _json(result)
        attributes = {
            "openinference.span.kind": "TOOL",
            "session.id": session,
            "tool.name": use.name,
            "tool.id": use.call_id,
            "tool.parameters": use.arguments,
            "input.value": use.arguments,
            "input.mime_type": "application/json",
            "output.value": output,
            "output.mime_type": _mime_type(output),
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": use.name,
            "gen_ai.tool.call.id": use.call_id,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.call.arguments": use.arguments,
            "gen_ai.tool.call.result": output,
        }
        span_id = _id(8, "tool", call.key, use.call_id, str(position))
        times = (call.end_ns, max(end or call.end_ns, call.end_ns))
        yield _span(trace, span_id, parent, f"execute_tool {use.name}", INTERNAL, times, attributes)


def _call_spans(trace: bytes, parent: bytes, call: _Call, session: str) -> Iterator[Span]:
    span_id = _id(8, "llm", call.key)
    name = f"chat {call.request.get('model') or ''}".strip()
    times = (call.start_ns, call.end_ns)
    attributes = _llm_attributes(call, session) | {CALL_ID: call.key}
    yield _span(trace, span_id, parent, name, CLIENT, times, attributes, call.error)
    yield from _tool_spans(trace, parent, call, session)


# -- traces -------------------------------------------------------------------------------


class _Exporter:
    """Builds the traces; reads each session once."""

    def __init__(self, store: Store, notes: list[str]) -> None:
        self.store, self.notes = store, notes
        self._sessions: dict[str, _Session | None] = {}
        self._chains: dict[str, list[InvocationChain]] = {}

    def session(self, ref: str) -> _Session | None:
        if ref not in self._sessions:
            try:
                session = self.store.load_session(ref, require_active=False)
                directory = session.directory
                records = read_invocations(directory, errors=[]) if directory else []
                invocations = {r.id: r for r in records}
                calls = _session_calls(session, set(invocations), self.notes)
                self._sessions[ref] = _Session(session, invocations, calls)
            except SoapError as exc:
                self.notes.append(f"{ref}: left out: {exc}")
                self._sessions[ref] = None
        return self._sessions[ref]

    def whole(self, top: TraceFrame) -> InvocationChain:
        """The whole chain below ``top``: a chain walked from another session holds only
        that session's invocations, their callers and callees, not its siblings."""
        ref = f"{top.role}/{top.session}"
        if ref not in self._chains:
            self._chains[ref] = invocation_chains(self.store, ref)
        return next(c for c in self._chains[ref] if c.frames[0].invocation_id == top.invocation_id)

    def chain(self, chain: InvocationChain) -> list[Span]:
        trace = _id(16, "trace", chain.frames[0].invocation_id)
        parents, ids, spans = chain.parents(), [], []
        for at, frame in enumerate(chain.frames):
            ids.append(_id(8, "agent", frame.invocation_id))
            own = self.session(f"{frame.role}/{frame.session}")
            record = own.invocations.get(frame.invocation_id) if own else None
            attributes = _agent_attributes(
                frame.role, frame.session, frame.prompt, record.result if record else None
            )
            attributes |= {"gen_ai.agent.id": frame.object_id, INVOCATION_ID: frame.invocation_id}
            start = time_ns(frame.started_at) or 0
            times = (start, time_ns(frame.ended_at) or start)
            error = (frame.error or frame.outcome) if frame.outcome in _FAILED else None
            parent = ids[parents[at]] if parents[at] >= 0 else None
            spans.append(
                _span(
                    trace, ids[-1], parent, f"invoke_agent {frame.role}", INTERNAL, times, attributes, error
                )
            )
            for call in own.calls.get(frame.invocation_id, []) if own else []:
                spans.extend(_call_spans(trace, ids[-1], call, frame.session))
        return spans

    def loose_calls(self, ref: str) -> list[Span]:
        """The session's calls made outside its invocations, under one AGENT span for the
        session, from its first call's start to its last call's end."""
        own = self.session(ref)
        calls = own.calls.get(None, []) if own else []
        if not own or not calls:
            return []
        session = own.session
        trace, root = _id(16, "trace", ref), _id(8, "session", ref)
        spans = [s for call in calls for s in _call_spans(trace, root, call, session.uuid)]
        times = (min(s.start_time_unix_nano for s in spans), max(s.end_time_unix_nano for s in spans))
        attributes = _agent_attributes(session.role, session.uuid, None, None)
        return [_span(trace, root, None, f"invoke_agent {session.role}", INTERNAL, times, attributes), *spans]


def _request(spans: list[Span]) -> ExportTraceServiceRequest:
    resource = Resource(attributes=_key_values({"service.name": "soapwb"}))
    scope = ScopeSpans(scope=InstrumentationScope(name=SCOPE), spans=spans)
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(resource=resource, scope_spans=[scope])])


def otel_traces(
    store: Store, sessions: Sequence[str] = (), notes: list[str] | None = None
) -> list[ExportTraceServiceRequest]:
    """One export request per trace: every chain through the sessions ``sessions`` names
    (refs as :meth:`Store.find` takes them; all of the store's when empty), each once,
    then each session's calls made outside its invocations. An unknown session raises its
    SessionNotFoundError; what cannot be exported is said in ``notes``."""
    notes = notes if notes is not None else []
    summaries = [store.find(ref) for ref in sessions] if sessions else store.sessions()
    exporter, done, traces = _Exporter(store, notes), set(), []
    for summary in summaries:
        if summary.broken:
            notes.append(f"{summary.ref}: left out: {summary.error}")
            continue
        for through in invocation_chains(store, summary.ref):
            top = through.frames[0]
            if top.rerun is None and top.invocation_id not in done:
                done.add(top.invocation_id)
                traces.append(_request(exporter.chain(exporter.whole(top))))
        if loose := exporter.loose_calls(summary.ref):
            traces.append(_request(loose))
    return traces


# -- delivery -----------------------------------------------------------------------------


def otlp_json(request: ExportTraceServiceRequest) -> dict[str, Any]:
    """``request`` in OTLP/JSON: protobuf's JSON mapping, ids in hex, enums as numbers."""
    document = MessageToDict(request, use_integers_for_enums=True)
    for resource in document.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return document


def write_otlp_json(requests: Sequence[ExportTraceServiceRequest], path: Path) -> None:
    """One export request a line, as the collector's file exporter writes them."""
    lines = "".join(json.dumps(otlp_json(r), ensure_ascii=False) + "\n" for r in requests)
    try:
        write_text_atomic(path, lines)
    except OSError as exc:
        raise ExportError(str(path), f"cannot write: {exc.strerror or exc}") from None


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL: ``endpoint`` as given, or with ``/v1/traces`` appended
    when it names no path (a collector's or Phoenix's base URL)."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ExportError(endpoint, "not an http:// or https:// URL")
    return endpoint.rstrip("/") + "/v1/traces" if parts.path in ("", "/") else endpoint


def send_otlp(
    requests: Sequence[ExportTraceServiceRequest],
    endpoint: str,
    headers: Mapping[str, str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """POST each request as OTLP/HTTP protobuf; ExportError at the first the endpoint
    does not take whole."""
    url = traces_url(endpoint)
    for done, request in enumerate(requests, 1):
        sent = urllib.request.Request(
            url,
            data=request.SerializeToString(),
            headers={"Content-Type": "application/x-protobuf", **(headers or {})},
            method="POST",
        )
        try:
            with urllib.request.urlopen(sent, timeout=60) as answer:
                body = answer.read()
        except urllib.error.HTTPError as exc:
            said = exc.read()[:200].decode("utf-8", "replace").strip()
            raise ExportError(url, f"the endpoint answered {exc.code} {exc.reason}: {said}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ExportError(url, f"cannot send: {getattr(reason, 'strerror', None) or reason}") from None
        _check_accepted(url, body)
        if progress is not None:
            progress(done, len(requests))


def _check_accepted(url: str, body: bytes) -> None:
    """ExportError when the endpoint says it rejected spans (OTLP's partial success)."""
    try:
        answer = ExportTraceServiceResponse.FromString(body)
    except Exception:  # not an OTLP answer (a JSON or empty body): nothing said
        return
    rejected = answer.partial_success.rejected_spans
    if rejected:
        raise ExportError(
            url, f"the endpoint rejected {rejected} spans: {answer.partial_success.error_message}"
        )


def export_otel(
    store: Store,
    sessions: Sequence[str] = (),
    *,
    endpoint: str | None = None,
    path: Path | None = None,
    headers: Mapping[str, str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ExportReport:
    """Export the sessions ``sessions`` names (all when empty) to ``endpoint`` (OTLP/HTTP
    protobuf) or into the file ``path`` (OTLP/JSON)."""
    notes: list[str] = []
    if endpoint is not None:
        traces_url(endpoint)  # a wrong URL is said before the store is read
    requests = otel_traces(store, sessions, notes)
    if endpoint is not None:
        send_otlp(requests, endpoint, headers, progress)
    elif path is not None:
        write_otlp_json(requests, path)
    spans: dict[str, int] = {}
    for request in requests:
        for span in request.resource_spans[0].scope_spans[0].spans:
            kind = next(a.value.string_value for a in span.attributes if a.key == "openinference.span.kind")
            spans[kind] = spans.get(kind, 0) + 1
    target = traces_url(endpoint) if endpoint is not None else str(path)
    return ExportReport(target, list(sessions), len(requests), spans, notes)
