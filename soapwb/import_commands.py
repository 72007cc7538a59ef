"""``soapwb import openpoke``, ``otel``, ``langgraph`` and ``openai-agents``: another
framework's state into a store, idempotently."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from importers import agents_sdk, langgraph, otel
from importers.openpoke import ImportReport, import_openpoke
from soapwb.common import UsageError, emit_json, store_command


def register(commands: Any) -> None:
    parser = commands.add_parser("import", help="import another framework's agent state into a store")
    sources = parser.add_subparsers(dest="source", metavar="SOURCE", required=True)
    openpoke = sources.add_parser(
        "openpoke",
        help="an OpenPoke server/data dir: the interaction agent, its summary, the execution agents",
    )
    openpoke.add_argument(
        "dir", metavar="DIR", type=Path, help="OpenPoke's server/data, or a checkout holding it"
    )
    openpoke.add_argument(
        "--openpoke-root",
        metavar="DIR",
        type=Path,
        help="an OpenPoke checkout: materialize/replay then send its real system prompt (remembered)",
    )
    store_command(openpoke, cmd_import_openpoke)
    traces = sources.add_parser(
        "otel",
        help="OpenTelemetry traces (OpenInference or GenAI conventions): OTLP/JSON, OTLP protobuf, "
        "or Phoenix's span API answer",
    )
    traces.add_argument(
        "files",
        metavar="FILE",
        type=Path,
        nargs="+",
        help="OTLP files; traces and logs of one run may be in separate files (give both)",
    )
    store_command(traces, cmd_import_otel)
    register_langgraph(sources)
    register_openai_agents(sources)


def report_lines(report: ImportReport) -> list[str]:
    """The text the command prints: what was read, skipped, written and noticed."""
    lines = [f"read {report.data_dir} (time zone {report.timezone})"]
    lines.append(f"  conversation log: {report.entries} entries, {len(report.skipped)} lines skipped")
    if report.summary is not None:
        s = report.summary
        lines.append(
            f"  working memory: summary of entries 0..{s.last_index} (updated_at {s.updated_at}), "
            f"{s.unsummarised} unsummarised entries"
        )
    for name, count in report.execution_agents.items():
        lines.append(f"  execution agent {name!r}: {count} entries")
    if report.skipped:
        lines.append("skipped lines (OpenPoke skips them silently):")
        lines.extend(f"  {line.describe()}" for line in report.skipped)
    lines.append(f"sessions in {report.store_dir}:")
    for session in report.sessions:
        new = (
            f"{session.appended} new"
            if session.rewritten_from is None
            else (f"rebuilt from entry {session.rewritten_from}: the log changed")
        )
        lines.append(
            f"  {session.status:<9} {session.role}/{session.uuid}  {session.name}: "
            f"{session.messages} messages ({new})"
        )
    if not report.sessions:
        lines.append("  none (no entries to import)")
    if report.summary is not None and report.summary.context_id is not None:
        lines.append(
            f"summary fork: context {report.summary.context_id} (active; the root holds the full log)"
        )
    lines.append(f"invocation records: {report.invocations} ({report.invocations_written} written)")
    lines.extend(f"note: {notice}" for notice in report.notices)
    if not report.changed:
        lines.append("nothing changed (already imported)")
    return lines


def cmd_import_openpoke(args: argparse.Namespace) -> int:
    if not args.store:
        raise UsageError("no store given: pass --store DIR or set SOAPWB_STORE")
    report = import_openpoke(args.dir, args.store, openpoke_root=args.openpoke_root)
    if args.json:
        emit_json(report.as_dict())
    else:
        print("\n".join(report_lines(report)))
    return 0


def otel_report_lines(report: otel.ImportReport) -> list[str]:
    flavours = ", ".join(f"{n} {name}" for name, n in report.flavours.items()) or "none"
    lines = [f"read {', '.join(report.files)}: {report.spans} spans, {report.logs} log records"]
    lines.append(f"  model calls: {report.calls} ({flavours})")
    for session in report.sessions:
        lines.append(
            f"  {session.status:<9} {session.role}/{session.uuid}  session {session.session_id!r}: "
            f"{session.calls} calls ({session.calls_added} new), {session.contexts} contexts"
        )
    lines.append(f"invocation records: {report.invocations} ({report.invocations_written} written)")
    lines.extend(f"note: {notice}" for notice in report.notices)
    if report.sessions and not report.changed:
        lines.append("nothing changed (already imported)")
    return lines


def cmd_import_otel(args: argparse.Namespace) -> int:
    if not args.store:
        raise UsageError("no store given: pass --store DIR or set SOAPWB_STORE")
    report = otel.import_otel(args.files, args.store)
    if args.json:
        emit_json(report.as_dict())
    else:
        print("\n".join(otel_report_lines(report)))
    return 0


# -- soapwb import langgraph ----------------------------------------------------------------


def register_langgraph(sources: Any) -> None:
    parser = sources.add_parser(
        "langgraph",
        help="a LangGraph SqliteSaver checkpoint database: a session per thread, its forks as forks",
    )
    parser.add_argument("db", metavar="DB", type=Path, help="the checkpoint database (read only)")
    parser.add_argument(
        "--graph",
        metavar="MODULE:ATTR",
        help="the app's compiled graph: materialize then builds the whole body, and re-runs run "
        "LangGraph itself (remembered)",
    )
    store_command(parser, cmd_import_langgraph)


def langgraph_report_lines(report: langgraph.ImportReport) -> list[str]:
    lines = [f"read {report.db} (decoded with {report.decoder})"]
    if report.graph:
        lines.append(f"  the app's graph: {report.graph}")
    for session in report.sessions:
        lines.append(
            f"  {session.status:<9} {session.role}/{session.uuid}  thread {session.thread!r}: "
            f"{session.checkpoints} checkpoints, {session.contexts} contexts, "
            f"{session.calls} calls ({session.calls_added} new, {session.messages_added} new messages)"
            + (f", {session.calls_rebuilt} rebuilt by the graph" if session.calls_rebuilt else "")
        )
    lines.extend(f"note: {notice}" for notice in report.notices)
    if report.sessions and not report.changed:
        lines.append("nothing changed (already imported)")
    return lines


def cmd_import_langgraph(args: argparse.Namespace) -> int:
    if not args.store:
        raise UsageError("no store given: pass --store DIR or set SOAPWB_STORE")
    report = langgraph.import_langgraph(args.db, args.store, graph=args.graph)
    if args.json:
        emit_json(report.as_dict())
    else:
        print("\n".join(langgraph_report_lines(report)))
    return 0


# -- the OpenAI Agents SDK (issue 26) ---------------------------------------------------


def register_openai_agents(sources: Any) -> None:
    parser = sources.add_parser(
        "openai-agents",
        help="an OpenAI Agents SDK SQLiteSession database: a session per session_id, a call per model answer",
    )
    parser.add_argument("db", metavar="DB", type=Path, help="the SQLite file the app's SQLiteSession writes")
    parser.add_argument(
        "--agent",
        metavar="MODULE:ATTR",
        help="the app's starting Agent, imported as code: the whole request of each call, and re-runs "
        "by the SDK's own Runner (remembered)",
    )
    store_command(parser, cmd_import_openai_agents)


def openai_agents_report_lines(report: agents_sdk.ImportReport) -> list[str]:
    lines = [f"read {report.database}" + (f" (agent {report.agent})" if report.agent else "")]
    for session in report.sessions:
        lines.append(
            f"  {session.status:<9} {session.role}/{session.uuid}  session {session.session_id!r}: "
            f"{session.messages} messages ({session.messages_added} new), {session.calls} calls "
            f"({session.calls_added} new), {session.handoffs} handoffs, {session.contexts} contexts"
        )
    lines.extend(f"note: {notice}" for notice in report.notices)
    if report.sessions and not report.changed:
        lines.append("nothing changed (already imported)")
    return lines


def cmd_import_openai_agents(args: argparse.Namespace) -> int:
    if not args.store:
        raise UsageError("no store given: pass --store DIR or set SOAPWB_STORE")
    try:
        report = agents_sdk.import_agents_sdk(args.db, args.store, agent=args.agent)
    except (ImportError, agents_sdk.AgentCodeError) as exc:
        raise UsageError(f"--agent {args.agent}: {exc}") from None
    if args.json:
        emit_json(report.as_dict())
    else:
        print("\n".join(openai_agents_report_lines(report)))
    return 0
