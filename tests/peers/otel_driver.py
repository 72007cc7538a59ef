"""Writes an OpenTelemetry trace of real ``openai`` calls, as a real instrumentation records them.

``python otel_driver.py FLAVOUR BASE_URL OUT_DIR [conversation]``, run in the flavour's side venv
(``venvs.py``) against the scripted server (``openai_stub.py``). FLAVOUR is
``openinference`` (``openinference-instrumentation-openai``, in its venv of that name) or
``genai-events`` (``opentelemetry-instrumentation-openai-v2`` with the older GenAI
conventions, in the ``openai-v2`` venv: the messages are log records) or ``genai-latest``
(the same with the latest experimental conventions, in the ``openai-v2-latest`` venv: the
messages are JSON in span attributes). It makes an agent
span in a session, two chat calls by the real ``openai`` client under the real
instrumentor (a tool call, a tool span for its run, the answer; with ``conversation``, for
a real model, two turns of plain chat instead), then encodes what was
recorded with the SDK's own OTLP encoders and writes it as OTLP protobuf (``trace.pb``, an
``ExportTraceServiceRequest``; ``logs.pb``, an ``ExportLogsServiceRequest``, when there
are log records) and as OTLP/JSON (``trace.jsonl``, one request a line, traces then logs,
as the collector's file exporter writes them: ids in hex, enums as integers, 64-bit
integers as strings). It prints ``{"session": ..., "spans": n, "logs": n}``.

Only the peer's packages are imported here: this file runs in the side venv, never in ours.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")  # openai-v2's switch

import openai
from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

SESSION = "otel-session-1"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "count_errors",
            "description": "Count the lines of the log matching a pattern.",
            "parameters": {
                "type": "object",
                "properties": {"pattern": {"type": "string"}},
                "required": ["pattern"],
            },
        },
    }
]


def hex_ids(document: dict[str, Any]) -> None:
    """Protobuf's JSON mapping writes bytes in base64; OTLP/JSON writes trace and span ids in hex."""
    items = [
        item
        for resource in document.get("resourceSpans", []) + document.get("resourceLogs", [])
        for scope in resource.get("scopeSpans", []) + resource.get("scopeLogs", [])
        for item in scope.get("spans", []) + scope.get("logRecords", [])
    ]
    for item in items:
        for key in ("traceId", "spanId", "parentSpanId"):
            if item.get(key):
                item[key] = base64.b64decode(item[key]).hex()


def instrument(flavour: str, tracer_provider: TracerProvider, logger_provider: LoggerProvider) -> Any:
    """Instrument the openai client; the context manager that puts a span in the session
    (OpenInference's ``using_session``; the GenAI conventions name it on the agent span)."""
    if flavour == "openinference":
        from openinference.instrumentation import using_session
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=tracer_provider)
        return (
            using_session(SESSION),
            {"openinference.span.kind": "AGENT"},
            {"openinference.span.kind": "TOOL"},
        )
    if flavour == "genai-latest":  # the latest experimental conventions: JSON in span attributes
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as GenAIInstrumentor

    GenAIInstrumentor().instrument(tracer_provider=tracer_provider, logger_provider=logger_provider)
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": SESSION}
    return contextlib.nullcontext(), agent, {"gen_ai.operation.name": "execute_tool"}


def main(flavour: str, base_url: str, out: Path, mode: str = "tools") -> None:
    exporter, log_exporter = InMemorySpanExporter(), InMemoryLogRecordExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "otel-driver"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    logger_provider = LoggerProvider(resource=Resource.create({"service.name": "otel-driver"}))
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(log_exporter))
    in_session, agent_attributes, tool_attributes = instrument(flavour, provider, logger_provider)
    tracer = provider.get_tracer("otel-driver")
    client = openai.OpenAI(base_url=base_url, api_key="not-a-key", max_retries=0)
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You analyse logs."},
        {"role": "user", "content": "How many errors are in the log?"},
    ]
    with in_session, tracer.start_as_current_span("Analyst", attributes=agent_attributes):
        if mode == "conversation":  # a real model: two turns of plain chat, no tools
            first = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=24)
            messages += [
                first.choices[0].message.model_dump(exclude_none=True),
                {"role": "user", "content": "Say it in one word."},
            ]
            client.chat.completions.create(model="smollm2", messages=messages, max_tokens=12)
        else:
            first = client.chat.completions.create(
                model="smollm2", messages=messages, tools=TOOLS, temperature=0.2, max_tokens=64
            )
            answer = first.choices[0].message
            [call] = answer.tool_calls or []
            with tracer.start_as_current_span(
                call.function.name, attributes={**tool_attributes, "tool.name": call.function.name}
            ):
                result = "3"
            messages += [
                answer.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": result},
            ]
            client.chat.completions.create(model="smollm2", messages=messages, tools=TOOLS, max_tokens=64)
    provider.force_flush()
    logger_provider.force_flush()
    spans, logs = exporter.get_finished_spans(), log_exporter.get_finished_logs()
    requests = [encode_spans(spans), *([encode_logs(logs)] if logs else [])]
    out.mkdir(parents=True, exist_ok=True)
    for name, request in zip(("trace.pb", "logs.pb"), requests, strict=False):
        (out / name).write_bytes(request.SerializeToString())
    lines = []
    for request in requests:
        document = MessageToDict(request, use_integers_for_enums=True)
        hex_ids(document)
        lines.append(json.dumps(document))
    (out / "trace.jsonl").write_text("\n".join(lines) + "\n")
    print(json.dumps({"session": SESSION, "spans": len(spans), "logs": len(logs)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), *sys.argv[4:5])
