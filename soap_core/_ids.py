"""Identifiers read from files, checked before anything uses them as a name.

peteos names a context's file after its id (``<id>.json``, or ``<YYYYMMDD>-<id>.json``)
and a session's folder after its uuid, and our records are named after theirs; so an id
read from a file may become a path: the active context's file, the record of a parent
invocation. Such an id must be something a single file name can hold, nothing a path
can be steered with: not empty, at most :data:`MAX_ID_BYTES` bytes of UTF-8 (a file name
has 255), no path separator, no ``..``, no control character, no lone surrogate (a JSON
file may hold ``"\\ud800"``, which has no UTF-8 form). Every id peteos or we write is a
uuid4, with or without a date, so the rule costs a valid store nothing.
"""

from __future__ import annotations

import re
from typing import Any

from soap_core._errors import FormatError

MAX_ID_BYTES = 200
"""The longest id in bytes: ``<YYYYMMDD>-<id>.json`` still fits a 255-byte file name."""
_UNSAFE = re.compile(r"[/\\\x00-\x1f\x7f\ud800-\udfff]|\.\.")


def identifier_problem(value: str) -> str | None:
    """Why ``value`` cannot be an id that names a file, or None when it can."""
    if not value:
        return "an empty id"
    found = _UNSAFE.search(value)
    if found is not None:
        what = found.group()
        kind = (
            "'..'"
            if what == ".."
            else "a path separator"
            if what in "/\\"
            else "a lone surrogate (no Unicode character)"
            if "\ud800" <= what <= "\udfff"
            else "a control character"
        )
        return f"id {_shown(value)} holds {kind}: it cannot name a file"
    size = len(value.encode("utf-8"))
    if size > MAX_ID_BYTES:
        return f"id {_shown(value)} is {size} bytes long: longer than a file name may be ({MAX_ID_BYTES})"
    return None


def _shown(value: str) -> str:
    text = value if len(value) <= 60 else value[:60] + "…"
    return ascii(text)


def checked_id(value: Any, json_path: str) -> Any:
    """``value`` itself when it is not a string or is a valid id; FormatError otherwise
    (the file is named by the caller, :meth:`FormatError.at`)."""
    if isinstance(value, str):
        problem = identifier_problem(value)
        if problem is not None:
            raise FormatError(None, json_path, problem)
    return value
