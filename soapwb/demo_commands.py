"""``soapwb demo``: run the example apps against a model and write a demo store.

The model is the one at ``--base-url`` or ``$OPENAI_BASE_URL`` (with ``$OPENAI_API_KEY``,
which goes to the server and nowhere else). With neither, the command starts the local
model server itself and stops it when it is done, also after an error, Ctrl-C or SIGTERM.
Sessions already in the store are kept; the run adds its own. A store that does not exist
yet is built beside it (``DIR.partial``) and renamed into place when the run is done, so
an interrupted first build never leaves a half store where the workbench looks.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from soapwb.common import UsageError, emit_json, store_command

if TYPE_CHECKING:
    from demo.build import DemoSummary
    from soap_core.runtime import LLMEndpoint


def register(commands: Any) -> None:
    demo = commands.add_parser(
        "demo", help="run the example apps (Log Analyzer, OpenPoke-like agents) and write a demo store"
    )
    demo.add_argument(
        "--base-url",
        metavar="URL",
        help="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL, else a local model started for the run)",
    )
    store_command(demo, cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    # Imported here so that the other commands do not pay for loading the runtime.
    from demo.build import build_demo_store

    if not args.store:
        raise UsageError("no store given: pass --store DIR or set SOAPWB_STORE")
    started = time.monotonic()

    def progress(step: str) -> None:
        elapsed = int(time.monotonic() - started)
        print(f"soapwb demo [{elapsed // 60}:{elapsed % 60:02d}] {step}", file=sys.stderr, flush=True)

    target = Path(args.store)
    fresh = not target.exists()
    building = target.with_name(target.name + ".partial") if fresh else target
    if fresh and building.exists():
        shutil.rmtree(building)  # what an interrupted first build left
    with _stop_on_sigterm(), model_endpoint(args.base_url) as endpoint:
        summary = build_demo_store(building, endpoint, progress=progress)
    if fresh:
        building.rename(target)  # every path the store keeps is relative to it: nothing to rewrite
        summary = dataclasses.replace(summary, store=str(target))
    if args.json:
        emit_json(summary.as_dict())
    else:
        print(format_summary(summary))
    return 0


@contextlib.contextmanager
def model_endpoint(base_url: str | None) -> Iterator[LLMEndpoint]:
    """The endpoint to run against: the one given or configured, else a local model
    server that lives as long as the ``with`` block."""
    from local_model import NO_API_KEY, LocalModelServer
    from soap_core.runtime import LLMEndpoint

    if base_url or os.environ.get("OPENAI_BASE_URL", "").strip():
        yield LLMEndpoint(base_url)
        return
    print("soapwb: no model endpoint configured; starting the local model server", file=sys.stderr)
    with LocalModelServer(deterministic=False) as server:
        print(f"soapwb: local model at {server.base_url} (pid {server.pid})", file=sys.stderr)
        yield LLMEndpoint(server.base_url, api_key=NO_API_KEY, model=server.model_name)


@contextlib.contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    """Make SIGTERM unwind like Ctrl-C, so that a server we started is stopped."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():  # signals go to the main thread only
        yield
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def format_summary(summary: DemoSummary) -> str:
    """The run in a few lines: what was written, and where to look first."""
    roles = ", ".join(f"{role} {count}" for role, count in summary.roles.items())
    reused = ", ".join(f"{name} ({count} invocations)" for name, count in summary.reused_threads.items())
    forks = ", ".join(f"{name} ({count})" for name, count in summary.forks.items())
    lines = [
        f"demo store: {summary.store}  (log file {summary.log_file}"
        + (", in the store)" if not Path(summary.log_file).is_absolute() else ")"),
        f"sessions written: {summary.session_count} ({roles})",
        f"invocations: {summary.invocations}, model calls: {summary.model_calls}, took {summary.elapsed_s:.0f} s",
        f"reused threads: {reused or 'none'}",
        f"compaction forks: {summary.fork_count}" + (f" in {forks}" if forks else ""),
        f"deepest chain: {summary.chain_depth}: {' -> '.join(summary.deepest_chain) or '-'}",
        f"refused (no-circle): {len(summary.refusals)}",
        *(f"  {line}" for line in summary.refusals),
    ]
    if summary.errors:
        lines.append(f"invocations that failed: {len(summary.errors)}")
        lines += [f"  {line}" for line in summary.errors]
    return "\n".join(lines)
