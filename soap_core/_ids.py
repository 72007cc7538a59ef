"""Identifiers read from files, checked before anything uses them as a name.

peteos names a context's file after its id (``<id>.json``, or ``<YYYYMMDD>-<id>.json``)
and a session's folder after its uuid, and our records are named after theirs; so an id
read from a file may become a path: the active context's file, the record of a parent
invocation. Such an id must be something a single file name can hold, nothing a path
can be steered with, by the rule every path the store builds obeys
(:func:`soap_core._paths.unsafe_reason`: one plain component, no control character, no
lone surrogate, which a JSON file may hold as ``"\\ud800"``, at most 200 bytes). Every
id peteos or we write is a uuid4, with or without a date, so the rule costs a valid
store nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from soap_core._errors import FormatError
from soap_core._paths import unsafe_reason


def identifier_problem(value: str) -> str | None:
    """Why ``value`` cannot be an id that names a file, or None when it can: the store's
    one rule for names (:func:`soap_core._paths.unsafe_reason`)."""
    reason = unsafe_reason(value)
    return (
        None
        if reason is None
        else f"id {_shown(value)} is not a plain name ({reason}): it cannot name a file"
    )


def _shown(value: str) -> str:
    text = value if len(value) <= 60 else value[:60] + "…"
    return ascii(text)


def checked_id(value: Any, json_path: str, file: Path | None = None) -> Any:
    """``value`` itself when it is not a string or is a valid id; FormatError otherwise,
    naming ``file`` (or no file: the caller names it, :meth:`FormatError.at`)."""
    if isinstance(value, str):
        problem = identifier_problem(value)
        if problem is not None:
            raise FormatError(file, json_path, problem)
    return value
