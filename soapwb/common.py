"""Pieces every ``soapwb`` command shares: the store options, JSON and table output."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

import orjson

from soap_core import Store


class UsageError(Exception):
    """A command was called in a way that cannot work (no store given, ...)."""


def add_store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="DIR",
        default=os.environ.get("SOAPWB_STORE"),
        help="the store: a peteos config dir (holding peteos.json, .peteos/, agents/ or sessions/), "
        "or its agents/ or sessions/ folder (default: $SOAPWB_STORE)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def open_store(args: argparse.Namespace) -> Store:
    if not args.store:
        raise UsageError("no store given: pass --store DIR or set SOAPWB_STORE")
    return Store(args.store)


_SURROGATE = re.compile("[\ud800-\udfff]")


def emit_json(value: Any) -> None:
    """``value`` as indented JSON on stdout: orjson where it can (the standard library's
    indenting encoder is pure Python: 0.4 s for a listing of 10,000 sessions), the
    standard library for what orjson refuses (lone surrogates, integers past 64 bits).

    The output is always UTF-8: a lone surrogate (a JSON file may hold ``"\\ud800"``, which
    is no Unicode character and has no UTF-8 form) is written as that same ``\\uXXXX``
    escape, which reads back as the value the file held, and stderr says so."""
    try:
        text = orjson.dumps(value, default=str, option=orjson.OPT_INDENT_2).decode("utf-8")
    except (TypeError, orjson.JSONEncodeError):
        text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
        text, escaped = _SURROGATE.subn(lambda m: f"\\u{ord(m.group()):04x}", text)
        if escaped:
            print(
                f"soapwb: note: {escaped} lone surrogate(s) in the data (text that is not valid Unicode) "
                "are written as \\uXXXX escapes",
                file=sys.stderr,
            )
    print(text)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Plain left-aligned columns; None shows as '-'."""
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)
