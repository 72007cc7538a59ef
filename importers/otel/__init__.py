"""OpenTelemetry traces in (issue 25): OTLP files read into spans and log records.

The first part: :func:`read_otlp` reads what tracers write, OTLP/JSON as the collector's
file exporter writes it (one export request a line, traces and logs interleaved) and OTLP
protobuf (one ``ExportTraceServiceRequest`` or ``ExportLogsServiceRequest``), into
:class:`Span` and :class:`LogRecord` values with their attributes decoded. Sessions,
request sources and the export come next.
"""

from importers.otel._calls import Call, model_calls
from importers.otel._import import ImportReport, SessionReport, import_otel
from importers.otel._otlp import LogRecord, Span, Telemetry, read_otlp

__all__ = [
    "Call",
    "ImportReport",
    "LogRecord",
    "SessionReport",
    "Span",
    "Telemetry",
    "import_otel",
    "model_calls",
    "read_otlp",
]
