"""Writes an OpenTelemetry trace of real ``openai`` calls, as OpenInference records them.

``python otel_driver.py BASE_URL OUT_DIR``, run in the ``openinference`` side venv
(``venvs.py``) against the scripted server (``openai_stub.py``): an AGENT span in a
session, two chat calls made by the real ``openai`` client under the real
``OpenAIInstrumentor`` (a tool call, a TOOL span for its run, the answer), then the finished
spans encoded by the SDK's own OTLP encoder and written as OTLP protobuf (``trace.pb``,
an ``ExportTraceServiceRequest``) and as OTLP/JSON (``trace.jsonl``, one request a line,
as the collector's file exporter writes it: ids in hex, enums as integers, 64-bit
integers as strings). It prints ``{"session": ..., "spans": n}``.

Only the peer's packages are imported here: this file runs in the side venv, never in ours.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import openai
from google.protobuf.json_format import MessageToDict
from openinference.instrumentation import using_session
from openinference.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
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


def hex_ids(document: dict[str, object]) -> None:
    """Protobuf's JSON mapping writes bytes in base64; OTLP/JSON writes trace and span ids in hex."""
    for resource in document.get("resourceSpans", []):  # type: ignore[union-attr]
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64decode(span[key]).hex()


def main(base_url: str, out: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "otel-driver"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    tracer = provider.get_tracer("otel-driver")
    client = openai.OpenAI(base_url=base_url, api_key="not-a-key", max_retries=0)
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You analyse logs."},
        {"role": "user", "content": "How many errors are in the log?"},
    ]
    with (
        using_session(SESSION),
        tracer.start_as_current_span("Analyst", attributes={"openinference.span.kind": "AGENT"}),
    ):
        first = client.chat.completions.create(
            model="smollm2", messages=messages, tools=TOOLS, temperature=0.2, max_tokens=64
        )
        answer = first.choices[0].message
        [call] = answer.tool_calls or []
        with tracer.start_as_current_span(
            call.function.name,
            attributes={"openinference.span.kind": "TOOL", "tool.name": call.function.name},
        ):
            result = "3"
        messages += [
            answer.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": result},
        ]
        client.chat.completions.create(model="smollm2", messages=messages, tools=TOOLS, max_tokens=64)
    provider.force_flush()
    spans = exporter.get_finished_spans()
    request = encode_spans(spans)
    out.mkdir(parents=True, exist_ok=True)
    (out / "trace.pb").write_bytes(request.SerializeToString())
    document = MessageToDict(request, use_integers_for_enums=True)
    hex_ids(document)
    (out / "trace.jsonl").write_text(json.dumps(document) + "\n")
    print(json.dumps({"session": SESSION, "spans": len(spans)}))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
