"""``soapwb``: the workbench's command line.

Each command parses its arguments, calls library functions and lays out what they
return, as a table or, with ``--json``, as JSON. Errors the library raises on purpose
become one line on stderr and exit status 1; there is no user-facing traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence

from soap_core import SoapError, reporting_progress
from soap_core._redact import redact
from soapwb.common import (
    Handler,
    Progress,
    StoreWorkProgress,
    UsageError,
    terminal_safe_output,
    use_storage_options,
)

COMMAND_MODULES = {
    "ls": "store_commands",
    "show": "store_commands",
    "tree": "store_commands",
    "search": "store_commands",
    "llm": "llm_commands",
    "trace": "runtime_commands",
    "materialize": "replay_commands",
    "verify": "replay_commands",
    "replay": "replay_commands",
    "diff": "replay_commands",
    "attribute": "attribution_commands",
    "isolate": "attribution_commands",
    "rerun": "rerun_commands",
    "continue": "rerun_commands",
    "tokens": "analysis_commands",
    "compact": "analysis_commands",
    "ui": "ui_commands",
    "demo": "demo_commands",
    "import": "import_commands",
    "export": "export_commands",
    "gen-store": "gen_commands",
    "suite": "fleet_commands",
    "follow": "follow_commands",
}
"""Which module registers each command: a command imports only its own module, so
``soapwb ls`` does not pay for replay, pandas and openai (a test checks this map
against what the modules register)."""


def _modules() -> list[str]:
    names = list(dict.fromkeys(COMMAND_MODULES.values()))
    return [n for n in names if importlib.util.find_spec(f"soapwb.{n}") is not None]


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or only the module that registers the command ``only``."""
    parser = argparse.ArgumentParser(
        prog="soapwb", description="Inspect, replay and compare LLM agent contexts stored in sOAP format."
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in [only] if only else _modules():
        importlib.import_module(f"soapwb.{name}").register(commands)
    return parser


def _command_module(argv: Sequence[str]) -> str | None:
    first = next((a for a in argv if not a.startswith("-")), None)
    return COMMAND_MODULES.get(first) if first and argv and argv[0] == first else None


def _escape_unprintable_output() -> None:
    """Text that has no form in the output's encoding (a lone surrogate a file held, or
    any non-ASCII under an ASCII locale) is printed as a backslash escape: never an
    error, never a byte that is not UTF-8 (``surrogateescape``, the POSIX locale's
    handler, would write one)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Everything it prints, on stdout and stderr, text and ``--json``
    alike, goes through :func:`~soapwb.common.terminal_safe_output`: a control character
    from a message, a file name or an id is shown as ``\\xHH``, never sent raw."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _escape_unprintable_output()
    with terminal_safe_output():
        return _run(argv)


def _run(argv: list[str]) -> int:
    parser = build_parser(_command_module(argv))
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        use_storage_options(args)  # before any store is opened, by the command or an importer
        with reporting_progress(StoreWorkProgress(Progress(args))):  # a new store's first indexing
            return handler(args)
    except UsageError as exc:
        print(f"soapwb: error: {exc}", file=sys.stderr)
        return 2
    except SoapError as exc:
        print(f"soapwb: error: {redact(str(exc))}", file=sys.stderr)
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
            f"soapwb: internal error: {type(exc).__name__}: {redact(str(exc))} "
            "(set SOAPWB_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 3


if __name__ == "__main__":
    sys.exit(main())
