"""``soapwb``: the workbench's command line.

Each command parses its arguments, calls library functions and lays out what they
return, as a table or, with ``--json``, as JSON. Errors the library raises on purpose
become one line on stderr and exit status 1; there is no user-facing traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from soap_core import SoapError
from soapwb import (
    analysis_commands,
    demo_commands,
    import_commands,
    llm_commands,
    replay_commands,
    rerun_commands,
    runtime_commands,
    store_commands,
    ui_commands,
)
from soapwb.common import UsageError

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="soapwb", description="Inspect, replay and compare LLM agent contexts stored in sOAP format."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    store_commands.register(commands)
    llm_commands.register(commands)
    runtime_commands.register(commands)
    replay_commands.register(commands)
    rerun_commands.register(commands)
    analysis_commands.register(commands)
    ui_commands.register(commands)
    demo_commands.register(commands)
    import_commands.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except UsageError as exc:
        print(f"soapwb: error: {exc}", file=sys.stderr)
        return 2
    except SoapError as exc:
        print(f"soapwb: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("soapwb: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug of ours: still one line, the traceback on request
        if os.environ.get("SOAPWB_DEBUG"):
            raise
        print(
            f"soapwb: internal error: {type(exc).__name__}: {exc} (set SOAPWB_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 3


if __name__ == "__main__":
    sys.exit(main())
