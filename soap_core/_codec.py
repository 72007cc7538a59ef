"""Shared pieces of the message, context and session codecs.

Writing a dict back in the key order it was read in:

Messages, contexts and session files are written by peteos with ``json.dump``, so their
key order is the order in which Python created the keys. To write a loaded file back to
the byte, the keys that were in the file go back in their places (unknown ones too), and
keys that were not there are added after them, in the order a new peteos object has.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from soap_core._errors import FormatError


def in_file_order(
    values: Mapping[str, Any],
    extra: Mapping[str, Any],
    file_order: Iterable[str],
    new_order: Iterable[str],
    file_keys: frozenset[str],
    write_new: Callable[[str, Any], bool],
) -> dict[str, Any]:
    """Merge known ``values`` and unknown ``extra`` keys into one ordered dict.

    A known key that was in the file is always written; one that was not is written
    when ``write_new(key, value)`` says so.
    """
    out: dict[str, Any] = {}
    for key in (*file_order, *new_order):
        if key in out:
            continue
        if key in values:
            if key in file_keys or write_new(key, values[key]):
                out[key] = values[key]
        elif key in extra:
            out[key] = extra[key]
    for key, value in extra.items():
        out.setdefault(key, value)
    return out


def optional_typed(data: dict[str, Any], key: str, kind: type, path: str = "$") -> Any:
    """``data[key]`` checked against ``kind`` (bool is no int); None when absent or null."""
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise FormatError(None, f"{path}.{key}", f"expected {kind.__name__}, got {type(value).__name__}")
    return value
