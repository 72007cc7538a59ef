"""OpenTelemetry traces in and out (issue 25).

:func:`read_otlp` reads what tracers write, OTLP/JSON as the collector's file exporter
writes it (one export request a line, traces and logs interleaved), OTLP protobuf, and
Phoenix's span API answer, into :class:`Span` and :class:`LogRecord` values;
:func:`model_calls` finds the model calls in them (OpenInference, GenAI latest and older
conventions) and :func:`import_otel` writes them into a store as sessions, recorded calls
and invocations. The ``otel`` request source (``_source.py``, an entry point) rebuilds
each imported call. :func:`export_otel` goes the other way: any store's sessions out as
traces (OTLP/HTTP protobuf or OTLP/JSON) that Phoenix, Langfuse and this import read.
"""

from importers.otel._calls import Call, model_calls
from importers.otel._export import ExportError, ExportReport, export_otel, otel_traces, otlp_json
from importers.otel._import import ImportReport, SessionReport, import_otel
from importers.otel._otlp import LogRecord, Span, Telemetry, read_otlp

__all__ = [
    "Call",
    "ExportError",
    "ExportReport",
    "ImportReport",
    "LogRecord",
    "SessionReport",
    "Span",
    "Telemetry",
    "export_otel",
    "import_otel",
    "model_calls",
    "otel_traces",
    "otlp_json",
    "read_otlp",
]
