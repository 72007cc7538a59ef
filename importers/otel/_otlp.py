"""OTLP files read into spans and log records.

OTLP/JSON is protobuf's JSON mapping with the exceptions the OTLP specification makes:
trace and span ids in hex (not base64), enums as integers, 64-bit integers as strings,
keys in lowerCamelCase. A protobuf file is parsed with ``opentelemetry-proto``'s own
classes and taken through the same mapping, so both read into the same values.

Phoenix's span API (``GET /v1/projects/{project}/spans/otlpv1``) answers
``{"data": [span, ...], "next_cursor": ...}``: OTLP spans with snake_case keys, nulls for
what is not set, kinds by name (``SPAN_KIND_INTERNAL``), no resource. A file holding that
answer (or one such answer a line) is read as the same spans, with an empty resource.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from importers._errors import ImporterError

_IDS = ("traceId", "spanId", "parentSpanId")


@dataclass(frozen=True)
class Span:
    """One span: ids in hex, times in nanoseconds since the epoch, attributes decoded
    (``session.id``, ``input.value``, ``gen_ai.*``, ...)."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any]
    status: int = 0
    """0 unset, 1 ok, 2 error (OTLP's ``StatusCode``)."""
    status_message: str = ""
    resource: Mapping[str, Any] = field(default_factory=dict)
    scope: str = ""


@dataclass(frozen=True)
class LogRecord:
    """One log record (the GenAI conventions' message events): its event name, the span
    it belongs to, its body and attributes decoded."""

    trace_id: str
    span_id: str
    time_ns: int
    event_name: str
    body: Any
    attributes: Mapping[str, Any]
    resource: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Telemetry:
    """What one file holds, in file order."""

    spans: tuple[Span, ...]
    logs: tuple[LogRecord, ...]


def read_otlp(path: Path) -> Telemetry:
    """The spans and log records of an OTLP/JSON or OTLP protobuf file; ImporterError
    naming the file (and the line, for JSON) when it is neither."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ImporterError(path, f"cannot read: {exc.strerror or exc}") from None
    spans: list[Span] = []
    logs: list[LogRecord] = []
    for where, document, hex_ids in _documents(path, raw):
        try:
            spans.extend(_spans(document, hex_ids))
            logs.extend(_logs(document, hex_ids))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ImporterError(
                path, f"{where}: not an OTLP export request: {type(exc).__name__}: {exc}"
            ) from None
    return Telemetry(tuple(spans), tuple(logs))


def _documents(path: Path, raw: bytes) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """Each export request of the file as a dict in the JSON mapping, where it is, and
    whether its ids are hex (OTLP/JSON) or base64 (protobuf through the mapping)."""
    if raw.lstrip()[:1] in (b"{", b""):
        text = raw.decode("utf-8", errors="replace")
        try:
            whole = json.loads(text)
        except ValueError:
            whole = None
        if isinstance(whole, dict):
            yield "line 1" if "\n" not in text.strip() else "the document", _otlp_shaped(whole), True
            return
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                document = json.loads(line)
            except ValueError as exc:
                raise ImporterError(path, f"line {number}: not JSON: {exc}") from None
            if not isinstance(document, dict):
                raise ImporterError(path, f"line {number}: not an OTLP export request (a JSON object)")
            yield f"line {number}", _otlp_shaped(document), True
        return
    for kind in (ExportTraceServiceRequest, ExportLogsServiceRequest):
        try:
            message = kind.FromString(raw)
        except DecodeError:
            continue
        document = MessageToDict(message, use_integers_for_enums=True)
        if document:
            yield "the protobuf message", document, False
            return
    raise ImporterError(path, "neither OTLP/JSON nor an OTLP protobuf export request")


_SPAN_KINDS = {
    f"SPAN_KIND_{name}": n
    for n, name in enumerate(["UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER"])
}
_STATUS_CODES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}


def _otlp_shaped(document: dict[str, Any]) -> dict[str, Any]:
    """An export request as it is; Phoenix's span API answer as the export request of its
    spans (keys in lowerCamelCase, nulls dropped, kinds and status codes as numbers)."""
    data = document.get("data")
    if "resourceSpans" in document or "resourceLogs" in document or not isinstance(data, list):
        return document
    spans = [_camel(span) for span in data]
    for span in spans:
        span["kind"] = _SPAN_KINDS.get(span.get("kind"), span.get("kind", 0))
        status = span.get("status", {})
        status["code"] = _STATUS_CODES.get(status.get("code"), status.get("code", 0))
    return {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}


def _camel(item: Any) -> Any:
    if isinstance(item, list):
        return [_camel(i) for i in item]
    if not isinstance(item, dict):
        return item
    return {_camel_key(k): _camel(v) for k, v in item.items() if v is not None}


def _camel_key(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(word.title() for word in rest)


def _id(value: Any, hex_ids: bool) -> str:
    if not value:
        return ""
    return str(value).lower() if hex_ids else base64.b64decode(value).hex()


def _spans(document: Mapping[str, Any], hex_ids: bool) -> Iterator[Span]:
    for resource_spans in document.get("resourceSpans", []):
        resource = attributes(resource_spans.get("resource", {}).get("attributes", []))
        for scope_spans in resource_spans.get("scopeSpans", []):
            scope = scope_spans.get("scope", {}).get("name", "")
            for span in scope_spans.get("spans", []):
                status = span.get("status", {})
                yield Span(
                    trace_id=_id(span["traceId"], hex_ids),
                    span_id=_id(span["spanId"], hex_ids),
                    parent_id=_id(span.get("parentSpanId"), hex_ids) or None,
                    name=span.get("name", ""),
                    kind=int(span.get("kind", 0)),
                    start_ns=int(span.get("startTimeUnixNano", 0)),
                    end_ns=int(span.get("endTimeUnixNano", 0)),
                    attributes=attributes(span.get("attributes", [])),
                    status=int(status.get("code", 0)),
                    status_message=status.get("message", ""),
                    resource=resource,
                    scope=scope,
                )


def _logs(document: Mapping[str, Any], hex_ids: bool) -> Iterator[LogRecord]:
    for resource_logs in document.get("resourceLogs", []):
        resource = attributes(resource_logs.get("resource", {}).get("attributes", []))
        for scope_logs in resource_logs.get("scopeLogs", []):
            for record in scope_logs.get("logRecords", []):
                decoded = attributes(record.get("attributes", []))
                yield LogRecord(
                    trace_id=_id(record.get("traceId"), hex_ids),
                    span_id=_id(record.get("spanId"), hex_ids),
                    time_ns=int(record.get("timeUnixNano") or record.get("observedTimeUnixNano") or 0),
                    event_name=record.get("eventName") or str(decoded.get("event.name", "")),
                    body=value(record.get("body", {})),
                    attributes=decoded,
                    resource=resource,
                )


def attributes(pairs: list[Mapping[str, Any]]) -> dict[str, Any]:
    """OTLP's ``KeyValue`` list as a dict, each value decoded by :func:`value`."""
    return {pair["key"]: value(pair.get("value", {})) for pair in pairs}


def value(any_value: Mapping[str, Any]) -> Any:
    """One OTLP ``AnyValue`` as Python: str, bool, int, float, bytes, list or dict (None
    for an empty one)."""
    if "stringValue" in any_value:
        return any_value["stringValue"]
    if "boolValue" in any_value:
        return bool(any_value["boolValue"])
    if "intValue" in any_value:
        return int(any_value["intValue"])
    if "doubleValue" in any_value:
        return float(any_value["doubleValue"])
    if "bytesValue" in any_value:
        return base64.b64decode(any_value["bytesValue"])
    if "arrayValue" in any_value:
        return [value(v) for v in any_value["arrayValue"].get("values", [])]
    if "kvlistValue" in any_value:
        return attributes(any_value["kvlistValue"].get("values", []))
    return None
