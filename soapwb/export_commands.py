"""``soapwb export otel``: a store's sessions as OpenTelemetry traces, sent to an OTLP/HTTP
endpoint (Phoenix, Langfuse, a collector) or written as OTLP/JSON."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from importers.otel import ExportReport, export_otel
from soapwb.common import Progress, add_progress_option, emit_json, open_store, store_command

HEADERS_VARIABLE = "OTEL_EXPORTER_OTLP_HEADERS"
SESSION_NOTE = "each with every invocation chain through it"


def register(commands: Any) -> None:
    parser = commands.add_parser("export", help="export a store's sessions to another tool")
    targets = parser.add_subparsers(dest="target", metavar="FORMAT", required=True)
    otel = targets.add_parser(
        "otel",
        help="as OpenTelemetry traces (OpenInference and GenAI attributes): to Phoenix, Langfuse, "
        "a collector, or an OTLP/JSON file",
    )
    otel.add_argument(
        "sessions", metavar="SESSION", nargs="*", help="sessions to export (default: all); " + SESSION_NOTE
    )
    where = otel.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--endpoint",
        metavar="URL",
        help="OTLP/HTTP traces URL, e.g. http://127.0.0.1:6006/v1/traces (a URL without a path gets /v1/traces)",
    )
    where.add_argument("--file", metavar="PATH", type=Path, help="write OTLP/JSON, one export request a line")
    otel.add_argument(
        "--header",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help=f"an HTTP header for the endpoint, e.g. Authorization=Basic ... (also read from ${HEADERS_VARIABLE})",
    )
    add_progress_option(otel)
    store_command(otel, cmd_export_otel)


def headers_of(given: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` pairs: ``$OTEL_EXPORTER_OTLP_HEADERS`` (comma-separated, values
    URL-encoded, as the OpenTelemetry exporters read it), then ``--header``."""
    pairs = [p for p in os.environ.get(HEADERS_VARIABLE, "").split(",") if p.strip()]
    found = {k.strip(): unquote(v.strip()) for k, _, v in (p.partition("=") for p in pairs)}
    found.update({k.strip(): v.strip() for k, _, v in (p.partition("=") for p in given)})
    return found


def report_lines(report: ExportReport) -> list[str]:
    kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(report.spans.items())) or "no"
    lines = [f"exported {report.traces} traces ({kinds} spans) to {report.target}"]
    lines.extend(f"note: {note}" for note in report.notes)
    return lines


def cmd_export_otel(args: argparse.Namespace) -> int:
    store = open_store(args)
    progress = Progress(args)
    report = export_otel(
        store,
        args.sessions,
        endpoint=args.endpoint,
        path=args.file,
        headers=headers_of(args.header),
        progress=lambda done, total: progress.bar(done, total, "traces sent"),
    )
    if args.json:
        emit_json(report.as_dict())
    else:
        print("\n".join(report_lines(report)))
    return 0
