"""``soapwb ui``: the Streamlit workbench, with the local model beside it for replays."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from soap_core import STORAGE_OPTIONS_ENV, SoapError, is_remote, parse_storage_options
from soapwb.common import UsageError, add_storage_option

APP = Path(__file__).resolve().parents[1] / "app.py"


def register(commands: Any) -> None:
    ui = commands.add_parser("ui", help="open the workbench (Streamlit) on a store")
    ui.add_argument(
        "--store",
        metavar="DIR|URL",
        default=os.environ.get("SOAPWB_STORE"),
        help="the sOAP config dir, or one on object storage (s3://bucket/prefix) (default: $SOAPWB_STORE)",
    )
    add_storage_option(ui)
    ui.add_argument("--host", default="127.0.0.1", help="address to serve on (default: 127.0.0.1)")
    ui.add_argument("--port", type=int, default=8501, help="port to serve on (default: 8501)")
    ui.add_argument("--json", action="store_true", help="print the addresses as one JSON line")
    ui.add_argument(
        "--no-model", action="store_true", help="do not start the local model when OPENAI_BASE_URL is not set"
    )
    ui.set_defaults(handler=cmd_ui)


SERVER_OPTIONS = {
    "server.headless": "true",
    "browser.gatherUsageStats": "false",
    "client.toolbarMode": "viewer",  # no "Deploy" button: this is a local debugging tool
    # Streamlit's source watcher walks every imported module and sets up inotify watches
    # at each new browser session, on the server's event loop: a page opened by a link
    # waited for it. The workbench is run, not edited while it runs.
    "server.fileWatcherType": "none",
    # A full garbage collection after every script run walks every object of the process,
    # a long session's caches included: 0.15-0.3 s per page on two cores. Python's own
    # generational collector still runs.
    "runner.postScriptGC": "false",
}
"""The options of every workbench server (``soapwb ui``, ``make run``, the browser tests);
.streamlit/config.toml holds the same for ``streamlit run app.py`` from the checkout."""


def streamlit_command(host: str, port: int) -> list[str]:
    options = {"server.address": host, "server.port": str(port), **SERVER_OPTIONS}
    return [sys.executable, "-m", "streamlit", "run", str(APP)] + [
        flag for name, value in options.items() for flag in (f"--{name}", value)
    ]


def wait_until_serving(url: str, app: subprocess.Popen[bytes], timeout_s: float = 300) -> bool:
    """True once the app answers its health check; False if it exited or never answered."""
    deadline = time.monotonic() + timeout_s
    while app.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}_stcore/health", timeout=2) as answer:
                if answer.read() == b"ok":
                    return True
        except OSError:
            pass
        time.sleep(0.3)
    return False


def cmd_ui(args: argparse.Namespace) -> int:
    if not args.store:
        raise UsageError("no store given: pass --store DIR or set SOAPWB_STORE")
    if not APP.is_file():
        raise SoapError(f"{APP}: the workbench app is missing (soapwb ui runs from a source checkout)")
    env = {
        **os.environ,
        "SOAPWB_STORE": args.store if is_remote(args.store) else str(Path(args.store).resolve()),
    }
    if args.storage_option:  # the pages open the store with them (workbench.views.open_store)
        try:
            env[STORAGE_OPTIONS_ENV] = json.dumps(parse_storage_options(args.storage_option))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    with contextlib.ExitStack() as stack:
        if not env.get("OPENAI_BASE_URL") and not args.no_model:
            from local_model import LocalModelServer

            server = stack.enter_context(LocalModelServer(deterministic=True))
            env["OPENAI_BASE_URL"] = server.base_url
        url = f"http://{args.host}:{args.port}/"
        store, model = env["SOAPWB_STORE"], env.get("OPENAI_BASE_URL")
        starting = (
            json.dumps({"url": url, "store": store, "model": model})
            if args.json
            else f"starting the workbench at {url}  (store {store}, model {model})"
        )
        print(starting, flush=True)
        # With --json, standard output carries only JSON lines: streamlit's banner goes to stderr.
        app = subprocess.Popen(
            streamlit_command(args.host, args.port), env=env, stdout=sys.stderr if args.json else None
        )
        signal.signal(signal.SIGTERM, lambda *_: app.terminate())
        try:
            if wait_until_serving(url, app):
                print(json.dumps({"ready": url}) if args.json else f"ready: open {url}", flush=True)
            return app.wait()
        except KeyboardInterrupt:
            app.terminate()
            app.wait(timeout=10)
            return 0
