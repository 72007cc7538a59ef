"""A store's sessions out as OpenTelemetry traces, for Phoenix, Langfuse and other readers.

Every span carries both vocabularies: OpenInference's (what Phoenix shows) and the GenAI
semantic conventions' latest (``gen_ai.*``, what Langfuse and other GenAI readers map):

* an **AGENT** / ``invoke_agent`` span per invocation of the session's object, nested as
  the invocations nest, one trace per chain (its outermost invocation's);
* an **LLM** / ``chat`` span per recorded call, under the invocation that made it: the
  whole request in ``input.value`` (so an import gives back the same request), the
  messages in ``llm.input_messages.*`` and ``gen_ai.input.messages``, the answer, tools,
  model, parameters, token counts, status and the call's real start and end;
* a **TOOL** / ``execute_tool`` span per tool call of an answer, from the answer's end to
  its result's time, with the arguments and the result.

A session without recorded calls (a peteos store, an OpenPoke import) gets an LLM span per
model answer, its request rebuilt by the session's request source, timed at the answer.
The workbench's own runs (replays, re-runs) are left out: they are not the agent's history.
Span and trace ids are hashes of the records' ids, so exporting twice sends the same spans.
"""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Status
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

from importers._errors import ImporterError
from replay import MaterializeError, materialize
from soap_core import CallRecord, InvocationRecord, Message, Session, SoapError, read_invocations

SCOPE = "soap-workbench"
_NOT_PARAMETERS = ("messages", "tools")
_GENAI_PARAMETERS = {
    "temperature": "gen_ai.request.temperature",
    "max_tokens": "gen_ai.request.max_tokens",
    "top_p": "gen_ai.request.top_p",
    "seed": "gen_ai.request.seed",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "presence_penalty": "gen_ai.request.presence_penalty",
}


def _id(size: int, *parts: object) -> bytes:
    """A trace (16 bytes) or span (8 bytes) id from the records' ids: the same every export."""
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()[:size]


def _ns(stamp: str | None) -> int | None:
    """An ISO time (with its zone; a naive one is read as local time, as peteos writes)."""
    if not stamp:
        return None
    try:
        return int(datetime.fromisoformat(stamp).timestamp() * 1e9)
    except ValueError:
        return None


def _value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    return AnyValue(string_value=json.dumps(value, ensure_ascii=False))


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


# -- what each span says ------------------------------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n\n".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return "" if content is None else _json(content)


def _genai_parts(message: Mapping[str, Any]) -> dict[str, Any]:
    """A Chat Completions message as the GenAI conventions write it (role and typed parts)."""
    role = str(message.get("role", "user"))
    if role == "tool":
        part = {
            "type": "tool_call_response",
            "id": message.get("tool_call_id"),
            "response": message.get("content"),
        }
        return {"role": "tool", "parts": [part]}
    parts: list[dict[str, Any]] = []
    text = _text(message.get("content"))
    if text:
        parts.append({"type": "text", "content": text})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments", "")
        try:
            parsed: Any = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            parsed = arguments
        parts.append(
            {"type": "tool_call", "id": call.get("id"), "name": function.get("name"), "arguments": parsed}
        )
    return {"role": role, "parts": parts}


def _openinference_messages(prefix: str, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for i, message in enumerate(messages):
        key = f"{prefix}.{i}.message"
        found[f"{key}.role"] = str(message.get("role", "user"))
        text = _text(message.get("content"))
        if text:
            found[f"{key}.content"] = text
        if message.get("tool_call_id"):
            found[f"{key}.tool_call_id"] = str(message["tool_call_id"])
        for j, call in enumerate(message.get("tool_calls") or []):
            function = call.get("function") or {}
            found[f"{key}.tool_calls.{j}.tool_call.id"] = str(call.get("id", ""))
            found[f"{key}.tool_calls.{j}.tool_call.function.name"] = str(function.get("name", ""))
            found[f"{key}.tool_calls.{j}.tool_call.function.arguments"] = str(function.get("arguments", ""))
    return found


def _answer_of(response: Mapping[str, Any] | None, message: Message | None) -> dict[str, Any] | None:
    """The assistant message a call got, as its response had it (else from the context)."""
    try:
        answer = (response or {})["choices"][0]["message"]
        if isinstance(answer, dict):
            return answer
    except (KeyError, IndexError, TypeError):
        pass
    if message is None:
        return None
    calls = [
        {"id": u.call_id, "type": "function", "function": {"name": u.name, "arguments": u.arguments}}
        for u in message.tool_uses()
    ]
    return {"role": "assistant", "content": message.text(), **({"tool_calls": calls} if calls else {})}


def llm_attributes(
    session: Session, request: Mapping[str, Any], answer: Mapping[str, Any] | None, call: CallRecord | None
) -> dict[str, Any]:
    """The attributes of one model call's span, in both vocabularies."""
    model = request.get("model")
    parameters = {k: v for k, v in request.items() if k not in _NOT_PARAMETERS}
    messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
    tools = [t for t in request.get("tools") or [] if isinstance(t, dict)]
    usage = (call.usage if call is not None else None) or {}
    response_model = (call.response or {}).get("model") if call is not None and call.response else None
    attributes: dict[str, Any] = {
        "openinference.span.kind": "LLM",
        "session.id": session.uuid,
        "llm.system": "openai",
        "input.value": _json(request),
        "input.mime_type": "application/json",
        "llm.invocation_parameters": _json(parameters),
        **_openinference_messages("llm.input_messages", messages),
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.conversation.id": session.uuid,
        "gen_ai.input.messages": _json([_genai_parts(m) for m in messages]),
    }
    if model is not None:
        attributes["llm.model_name"] = str(response_model or model)
        attributes["gen_ai.request.model"] = str(model)
    if response_model:
        attributes["gen_ai.response.model"] = str(response_model)
    for key, name in _GENAI_PARAMETERS.items():
        if isinstance(parameters.get(key), (int, float)):
            attributes[name] = parameters[key]
    for i, tool in enumerate(tools):
        attributes[f"llm.tools.{i}.tool.json_schema"] = _json(tool)
    if tools:
        attributes["gen_ai.tool.definitions"] = _json(tools)
    if answer is not None:
        attributes["output.value"] = _json(call.response if call is not None and call.response else answer)
        attributes["output.mime_type"] = "application/json"
        attributes.update(_openinference_messages("llm.output_messages", [answer]))
        attributes["gen_ai.output.messages"] = _json([_genai_parts(answer)])
    for ours, openinference, genai in (
        ("prompt_tokens", "llm.token_count.prompt", "gen_ai.usage.input_tokens"),
        ("completion_tokens", "llm.token_count.completion", "gen_ai.usage.output_tokens"),
        ("total_tokens", "llm.token_count.total", None),
    ):
        if isinstance(usage.get(ours), int):
            attributes[openinference] = usage[ours]
            if genai:
                attributes[genai] = usage[ours]
    return attributes


# -- spans ---------------------------------------------------------------------------------


@dataclass
class _Spans:
    """The spans made so far, with the ids of the invocations they stand for."""

    spans: list[ProtoSpan] = field(default_factory=list)
    kinds: dict[str, int] = field(default_factory=dict)

    def add(
        self,
        kind: str,
        trace: bytes,
        span: bytes,
        parent: bytes | None,
        name: str,
        start: int,
        end: int,
        attributes: Mapping[str, Any],
        error: str | None = None,
    ) -> None:
        proto = ProtoSpan(
            trace_id=trace,
            span_id=span,
            parent_span_id=parent or b"",
            name=name,
            kind=ProtoSpan.SpanKind.SPAN_KIND_CLIENT
            if kind == "LLM"
            else ProtoSpan.SpanKind.SPAN_KIND_INTERNAL,
            start_time_unix_nano=start,
            end_time_unix_nano=max(start, end),
            attributes=[KeyValue(key=k, value=_value(v)) for k, v in attributes.items()],
            status=Status(code=Status.STATUS_CODE_ERROR, message=error)
            if error
            else Status(code=Status.STATUS_CODE_OK),
        )
        self.spans.append(proto)
        self.kinds[kind] = self.kinds.get(kind, 0) + 1


class ExportError(SoapError):
    """The traces could not be sent: the message names the endpoint and why."""


@dataclass
class Exported:
    """What an export made: the request to send, and a summary for the command line."""

    request: ExportTraceServiceRequest
    sessions: list[str]
    traces: int
    kinds: dict[str, int]
    notices: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {
            "sessions": self.sessions,
            "traces": self.traces,
            "spans": sum(self.kinds.values()),
            "kinds": self.kinds,
            "notices": self.notices,
        }


def _own_invocations(session: Session) -> list[InvocationRecord]:
    """The session object's own invocations, the workbench's re-runs left out."""
    if session.directory is None:
        return []
    records = read_invocations(session.directory, errors=[])
    return [r for r in records if r.callee.session == session.uuid and r.rerun is None]


def _tool_results(session: Session, context_id: str) -> dict[str, tuple[Any, str | None]]:
    """Each tool result of a context by its call id: its content and its time."""
    context = session.contexts.get(context_id)
    found: dict[str, tuple[Any, str | None]] = {}
    for message in context.messages if context is not None else []:
        for result in message.tool_results():
            found.setdefault(result.call_id, (result.content, message.creation_timestamp))
    return found


def _tool_spans(
    spans: _Spans,
    session: Session,
    call: CallRecord,
    answer: Mapping[str, Any] | None,
    trace: bytes,
    parent: bytes | None,
    after: int,
    results: Mapping[str, tuple[Any, str | None]],
) -> None:
    for tool_call in (answer or {}).get("tool_calls") or []:
        function = tool_call.get("function") or {}
        call_id, name = str(tool_call.get("id", "")), str(function.get("name", ""))
        result, at = results.get(call_id, (None, None))
        attributes: dict[str, Any] = {
            "openinference.span.kind": "TOOL",
            "session.id": session.uuid,
            "tool.name": name,
            "input.value": str(function.get("arguments", "")),
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.call.arguments": str(function.get("arguments", "")),
            "gen_ai.conversation.id": session.uuid,
        }
        if result is not None:
            attributes["output.value"] = result if isinstance(result, str) else _json(result)
            attributes["gen_ai.tool.call.result"] = attributes["output.value"]
        end = _ns(at) or after
        spans.add("TOOL", trace, _id(8, "tool", call.id, call_id), parent, name, after, end, attributes)


def _chains(invocations: Mapping[str, InvocationRecord]) -> dict[str, bytes]:
    """Each invocation's trace: its chain's, named by the outermost invocation exported.
    Each record is walked once (a walk up stops where an earlier one went)."""
    trace_of: dict[str, bytes] = {}
    for record in invocations.values():
        walked: list[str] = []
        current: InvocationRecord | None = record
        while current is not None and current.id not in trace_of and current.id not in walked:
            walked.append(current.id)
            parent = current.parent_invocation_id
            current = invocations.get(parent) if parent else None
        known = current is not None and current.id in trace_of
        trace = trace_of[current.id] if known and current is not None else _id(16, "chain", walked[-1])
        trace_of.update(dict.fromkeys(walked, trace))
    return trace_of


def _session_spans(
    session: Session,
    own: Sequence[InvocationRecord],
    invocations: Mapping[str, InvocationRecord],
    trace_of: Mapping[str, bytes],
    spans: _Spans,
    notices: list[str],
) -> set[bytes]:
    """Add the session's spans (its ``own`` invocations, its calls and their tools); the
    trace ids they use. ``invocations`` are every exported session's, by id."""
    traces: set[bytes] = set()
    for record in own:
        trace = trace_of[record.id]
        traces.add(trace)
        parent = (
            _id(8, "invocation", record.parent_invocation_id)
            if record.parent_invocation_id in invocations
            else None
        )
        start = _ns(record.started_at) or 0
        result = (
            record.result if isinstance(record.result, str) or record.result is None else _json(record.result)
        )
        attributes = {
            "openinference.span.kind": "AGENT",
            "session.id": session.uuid,
            "input.value": record.prompt,
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": record.callee.role,
            "gen_ai.agent.id": record.callee.object_id,
            "gen_ai.conversation.id": session.uuid,
            **({"output.value": result} if result is not None else {}),
        }
        error = record.error or (
            record.outcome if record.outcome in ("error", "refused", "interrupted") else None
        )
        spans.add(
            "AGENT",
            trace,
            _id(8, "invocation", record.id),
            parent,
            f"{record.callee.object_id}.invoke",
            start,
            _ns(record.ended_at) or start,
            attributes,
            error,
        )
    calls = [c for c in session.calls() if c.replay is None]
    loose = _id(16, "session", session.uuid)
    results: dict[str, dict[str, tuple[Any, str | None]]] = {}
    for call in calls:
        context = session.contexts.get(call.context_id)
        message = (
            context.messages[call.message_index]
            if context is not None
            and call.message_id is not None
            and call.message_index < len(context.messages)
            else None
        )
        answer = _answer_of(call.response, message)
        trace = trace_of.get(call.invocation_id or "", loose)
        traces.add(trace)
        parent = _id(8, "invocation", call.invocation_id) if call.invocation_id in invocations else None
        start = _ns(call.started_at) or 0
        end = _ns(call.ended_at) or start
        model = call.request.get("model")
        spans.add(
            "LLM",
            trace,
            _id(8, "call", call.id),
            parent,
            f"chat {model}" if model else "chat",
            start,
            end,
            llm_attributes(session, call.request, answer, call),
            call.error,
        )
        if call.context_id not in results:
            results[call.context_id] = _tool_results(session, call.context_id)
        _tool_spans(spans, session, call, answer, trace, parent, end, results[call.context_id])
    if not calls:
        traces |= _answers_spans(session, spans, loose, notices)
    return traces


def _answers_spans(session: Session, spans: _Spans, trace: bytes, notices: list[str]) -> set[bytes]:
    """A session written without a call log: an LLM span per model answer, its request
    rebuilt by the session's request source, each answer once (a fork's copies skipped)."""
    seen: set[str] = set()
    made = False
    for context in session.contexts.values():
        for index, message in enumerate(context.messages):
            if message.role != "assistant" or message.id in seen:
                continue
            seen.add(message.id)
            try:
                found = materialize(session, context, index)
            except (MaterializeError, SoapError) as exc:
                notices.append(
                    f"session {session.uuid}: message {index} of context {context.id} left out: {exc}"
                )
                continue
            at = _ns(message.creation_timestamp) or 0
            answer = _answer_of(None, message)
            spans.add(
                "LLM",
                trace,
                _id(8, "answer", session.uuid, message.id),
                None,
                "chat",
                at,
                at,
                llm_attributes(session, found.request, answer, None),
            )
            made = True
    return {trace} if made else set()


def export_sessions(sessions: Iterable[Session], *, service: str = SCOPE) -> Exported:
    """The spans of ``sessions`` as one OTLP export request."""
    spans, notices = _Spans(), list[str]()
    chosen = list(sessions)
    own = {session.uuid: _own_invocations(session) for session in chosen}
    invocations = {r.id: r for records in own.values() for r in records}
    trace_of = _chains(invocations)
    traces: set[bytes] = set()
    for session in chosen:
        traces |= _session_spans(session, own[session.uuid], invocations, trace_of, spans, notices)
    names = [s.uuid for s in chosen]
    resource = ResourceSpans(scope_spans=[ScopeSpans(spans=spans.spans)])
    resource.scope_spans[0].scope.name = SCOPE
    resource.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value=service)))
    request = ExportTraceServiceRequest(resource_spans=[resource])
    return Exported(request, names, len(traces), spans.kinds, notices)


# -- where it goes ---------------------------------------------------------------------------


def otlp_json(request: ExportTraceServiceRequest) -> str:
    """One OTLP/JSON line, as the collector's file exporter writes it (hex ids)."""
    document = MessageToDict(request, use_integers_for_enums=True)
    for resource in document.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = _hex(span[key])
    return json.dumps(document, ensure_ascii=False)


def _hex(base64_text: str) -> str:
    return base64.b64decode(base64_text).hex()


def write_otlp(exported: Exported, path: Path) -> None:
    try:
        path.write_text(otlp_json(exported.request) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ImporterError(path, f"cannot write: {exc.strerror or exc}") from None


def traces_url(endpoint: str) -> str:
    """``endpoint`` with the OTLP/HTTP traces path, unless it has it (``http://host:6006``
    and ``http://host:6006/v1/traces`` are the same place)."""
    trimmed = endpoint.rstrip("/")
    return trimmed if trimmed.endswith("/v1/traces") else f"{trimmed}/v1/traces"


def send_otlp(exported: Exported, endpoint: str, *, timeout: float = 30) -> int:
    """POST the export as OTLP/HTTP protobuf; the HTTP status. ExportError naming the
    endpoint when it cannot be reached or refuses it."""
    url = traces_url(endpoint)
    request = urllib.request.Request(
        url, data=exported.request.SerializeToString(), headers={"Content-Type": "application/x-protobuf"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        raise ExportError(f"{url}: the endpoint refused the traces: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ExportError(f"{url}: cannot send the traces: {reason}") from None
