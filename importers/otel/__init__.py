"""OpenTelemetry traces in (issue 25).

:func:`read_otlp` reads what tracers write, OTLP/JSON as the collector's file exporter
writes it (one export request a line, traces and logs interleaved), OTLP protobuf, and
Phoenix's span API answer, into :class:`Span` and :class:`LogRecord` values;
:func:`model_calls` finds the model calls in them (OpenInference, GenAI latest and older
conventions) and :func:`import_otel` writes them into a store as sessions, recorded calls
and invocations. The ``otel`` request source (``_source.py``, an entry point) rebuilds
each imported call. :func:`export_sessions` turns any store's sessions into spans with
both OpenInference and GenAI attributes, to send (:func:`send_otlp`) or write
(:func:`write_otlp`).
"""

from importers.otel._calls import Call, model_calls
from importers.otel._export import (
    Exported,
    ExportError,
    export_sessions,
    otlp_json,
    send_otlp,
    traces_url,
    write_otlp,
)
from importers.otel._import import ImportReport, SessionReport, import_otel
from importers.otel._otlp import LogRecord, Span, Telemetry, read_otlp

__all__ = [
    "Call",
    "ExportError",
    "Exported",
    "ImportReport",
    "LogRecord",
    "SessionReport",
    "Span",
    "Telemetry",
    "export_sessions",
    "import_otel",
    "model_calls",
    "otlp_json",
    "read_otlp",
    "send_otlp",
    "traces_url",
    "write_otlp",
]
