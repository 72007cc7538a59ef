"""``soapwb llm serve``: run the local model server until stopped.

It prints where the server listens (or, with ``--json``, a one-line JSON object with the
base URL, model name and pid) and then waits; Ctrl-C or SIGTERM stops the server and the
command exits with status 0.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from types import FrameType
from typing import Any

_POLL_SECONDS = 0.5


def register(commands: Any) -> None:
    llm = commands.add_parser("llm", help="the local model server")
    actions = llm.add_subparsers(dest="llm_command", metavar="ACTION", required=True)

    serve = actions.add_parser("serve", help="serve SmolLM2 at an OpenAI-compatible URL until Ctrl-C")
    serve.add_argument("--port", type=int, metavar="P", help="port to listen on (default: a free one)")
    serve.add_argument(
        "--host", default="127.0.0.1", metavar="H", help="address to bind (default: 127.0.0.1)"
    )
    serve.add_argument(
        "--nondeterministic",
        action="store_true",
        help="use llama.cpp's default batch sizes: faster on long prompts, but temperature-0 "
        "answers can differ between repeats",
    )
    serve.add_argument("--n-ctx", type=int, default=4096, metavar="N", help="context window in tokens")
    serve.add_argument("--json", action="store_true", help="print base_url, model and pid as JSON")
    serve.set_defaults(handler=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    # Imported here so that the other commands do not pay for loading the runtime package.
    from local_model import LocalModelError, LocalModelServer

    stop_requested = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server = LocalModelServer(
            args.port, args.host, deterministic=not args.nondeterministic, n_ctx=args.n_ctx
        )
        with server:
            if args.json:
                # One line, because the command keeps running: a reader can take the first line.
                print(
                    json.dumps({"base_url": server.base_url, "model": server.model_name, "pid": server.pid})
                )
            else:
                print(server.base_url)
                mode = "nondeterministic" if args.nondeterministic else "deterministic"
                print(
                    f"soapwb: serving {server.model_name} ({mode}, pid {server.pid}); Ctrl-C to stop",
                    file=sys.stderr,
                )
            sys.stdout.flush()
            while not stop_requested.wait(_POLL_SECONDS):
                if not server.running:
                    raise LocalModelError(
                        f"the model server at {server.base_url} exited on its own; its log ends "
                        f"with:\n{server.log_tail()}"
                    )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
