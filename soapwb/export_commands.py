"""``soapwb export otel``: a store's sessions as OpenTelemetry traces, sent to an OTLP/HTTP
endpoint (Phoenix, Langfuse, a collector) or written as OTLP/JSON."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from importers.otel import export_sessions, send_otlp, traces_url, write_otlp
from soap_core import Session, SoapError
from soapwb.common import SESSION_HELP, emit_json, open_store, store_command


def register(commands: Any) -> None:
    parser = commands.add_parser("export", help="send a store's sessions to other tools")
    targets = parser.add_subparsers(dest="target", metavar="TARGET", required=True)
    otel = targets.add_parser(
        "otel",
        help="OpenTelemetry traces (OpenInference and GenAI attributes) for Phoenix, Langfuse, a collector",
    )
    otel.add_argument("sessions", metavar="SESSION", nargs="*", help=f"{SESSION_HELP}; none: every session")
    where = otel.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--endpoint",
        metavar="URL",
        help="an OTLP/HTTP endpoint, sent as protobuf (http://127.0.0.1:6006 for Phoenix: /v1/traces is added)",
    )
    where.add_argument(
        "--file", metavar="PATH", type=Path, help="write OTLP/JSON (one export request a line)"
    )
    store_command(otel, cmd_export_otel)


def _sessions(args: argparse.Namespace, notices: list[str]) -> list[Session]:
    store = open_store(args)
    if args.sessions:  # named: each must load
        return [store.load_session(ref, require_active=False) for ref in args.sessions]
    found = []
    for summary in store.sessions():
        try:
            found.append(store.load_session(summary.ref, require_active=False))
        except SoapError as exc:
            notices.append(f"left out: {exc}")
    return found


def cmd_export_otel(args: argparse.Namespace) -> int:
    notices: list[str] = []
    exported = export_sessions(_sessions(args, notices))
    exported.notices[:0] = notices
    if args.file is not None:
        write_otlp(exported, args.file)
        where = str(args.file)
    else:
        send_otlp(exported, args.endpoint)
        where = traces_url(args.endpoint)
    summary = {**exported.as_dict(), "to": where}
    if args.json:
        emit_json(summary)
        return 0
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(exported.kinds.items())) or "no spans"
    print(f"{len(exported.sessions)} sessions, {exported.traces} traces, {kinds} -> {where}")
    for notice in exported.notices:
        print(f"note: {notice}", file=sys.stderr)
    return 0
