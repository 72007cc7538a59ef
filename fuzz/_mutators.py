"""The mutations of each file kind: JSON values, bytes, log lines, a time zone name.

A JSON file is mutated as a value where that can reach the reader's checks (a value
swapped for a hostile one, a key dropped, an id pointed at another id of the store:
self-references and cycles), and as text where only text can say it (a number of 5,000
digits, 5,000 levels of nesting, a lone surrogate escape) or as bytes (cut, flipped,
not UTF-8, a trailing comma or a comment). Log files are mutated by line and by byte.
Each mutation returns the new bytes and a short description of itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fuzz._choices import Chooser

Mutation = tuple[bytes, str]

HOSTILE_STRINGS = [
    "",
    "\ud800",
    "a\udcff",
    "x\ud83d",
    "..",
    ".",
    "../../../../etc/passwd",
    "a/b",
    "a\\b",
    "nul\x00byte",
    "line\nbreak",
    "\u2028",
    "<|endoftext|>",
    "x" * 300,
    "é" * 200,
    "*?[",
    "-",
    "20250611-",
]
# Written into the text in place of a marker: values json.dumps cannot write (or writes
# otherwise).
RAW_VALUES = [
    "1" * 5000,
    "-" + "9" * 400,
    "1e999",
    "NaN",
    "-Infinity",
    "[" * 5000 + "]" * 5000,
    "{" + '"a":{' * 3000 + "}" * 3001,
    '"\\ud800"',
    '"\\udfff\\ud800"',
    '"\\u0000"',
    "0.1e-99999",
]
HOSTILE_VALUES: list[Any] = [None, True, False, 0, -1, 1, 2**63, -(2**70), 1.5, [], {}, [None], {"": None}]
_MARK = "\u0001fuzz-raw\u0001"


def _paths(value: Any, limit: int = 400) -> list[tuple[Any, ...]]:
    """Paths to the nodes of a JSON value, breadth first (the first ``limit``)."""
    found: list[tuple[Any, ...]] = [()]
    queue: list[tuple[tuple[Any, ...], Any]] = [((), value)]
    while queue and len(found) < limit:
        path, node = queue.pop(0)
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in items:
            found.append((*path, key))
            queue.append(((*path, key), child))
    return found


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


def _strings(value: Any, into: list[str]) -> list[str]:
    if isinstance(value, str):
        into.append(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            into.append(k)
            _strings(v, into)
    elif isinstance(value, list):
        for v in value:
            _strings(v, into)
    return into


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    parent = _get(value, path[:-1])
    parent[path[-1]] = new
    return value


def _delete(value: Any, path: tuple[Any, ...]) -> Any:
    if not path:
        return value
    parent = _get(value, path[:-1])
    del parent[path[-1]]
    return value


def _dump(value: Any) -> bytes:
    text = json.dumps(value, indent=2, allow_nan=True)
    return text.encode("utf-8", "surrogatepass")


def mutate_json_value(raw: bytes, c: Chooser, ids: list[str]) -> Mutation:
    """One change to the parsed value: ``ids`` are ids found elsewhere in the store."""
    try:
        value = json.loads(raw)
    except ValueError:
        return mutate_bytes(raw, c)
    paths = _paths(value)
    path = c.choice(paths)
    op = c.choice(["hostile", "string", "raw", "delete", "id", "own-id", "type", "duplicate", "id-list"])
    where = "$" + "".join(f"[{k!r}]" for k in path)
    if op == "delete" and path:
        return _dump(_delete(value, path)), f"delete {where}"
    if op == "hostile":
        new = c.choice(HOSTILE_VALUES)
        return _dump(_replace(value, path, new)), f"{where} = {new!r}"
    if op == "string":
        new = c.choice(HOSTILE_STRINGS)
        return _dump(_replace(value, path, new)), f"{where} = {new!r}"
    if op in ("id", "own-id", "id-list"):
        own = [s for s in _strings(value, []) if len(s) >= 8]
        pool = own if op == "own-id" and own else ids or own or ["x"]
        new_id: Any = c.choice(pool)
        if op == "id-list":
            new_id = [new_id, c.choice(pool)]
        return _dump(_replace(value, path, new_id)), f"{where} = {new_id!r} ({op})"
    if op == "type":
        old = _get(value, path)
        swapped: Any = [old] if not isinstance(old, list) else {"0": old}
        if isinstance(old, str):
            swapped = c.choice([len(old), [old], {old: old}, None])
        return _dump(_replace(value, path, swapped)), f"{where}: type of {type(old).__name__} changed"
    if op == "duplicate" and path:
        parent = _get(value, path[:-1])
        if isinstance(parent, list):
            parent.insert(path[-1], json.loads(json.dumps(parent[path[-1]])))
            return _dump(value), f"duplicate {where}"
    text = c.choice(RAW_VALUES)
    new_text = _dump(_replace(value, path, _MARK)).replace(json.dumps(_MARK).encode(), text.encode(), 1)
    return new_text, f"{where} = <{text[:24]}{'…' if len(text) > 24 else ''}>"


_INSERTS = [b"\xff", b"\xed\xa0\x80", b"\xef\xbb\xbf", b"\x00", b",", b"}", b"]", b"/*", b"//\n", b'"', b"\\"]


def mutate_bytes(raw: bytes, c: Chooser) -> Mutation:
    """One change to the bytes."""
    op = c.choice(["cut", "cut-end", "flip", "insert", "trailing-comma", "comment", "bom", "empty", "repeat"])
    at = c.integer(0, max(len(raw) - 1, 0))
    if op == "cut":
        return raw[:at], f"cut at byte {at}"
    if op == "cut-end":
        n = c.integer(1, 8)
        return raw[:-n] if len(raw) > n else b"", f"last {n} bytes cut"
    if op == "flip" and raw:
        bit = 1 << c.integer(0, 7)
        return raw[:at] + bytes([raw[at] ^ bit]) + raw[at + 1 :], f"byte {at} ^ {bit}"
    if op == "insert":
        what = c.choice(_INSERTS)
        return raw[:at] + what + raw[at:], f"insert {what!r} at byte {at}"
    if op == "trailing-comma":
        close = [i for i, b in enumerate(raw) if b in b"]}"]
        if close:
            i = c.choice(close)
            return raw[:i] + b"," + raw[i:], f"trailing comma before byte {i}"
    if op == "comment":
        return raw[:at] + b"/* hand edit */" + raw[at:], f"comment at byte {at}"
    if op == "bom":
        return b"\xef\xbb\xbf" + raw, "byte-order mark"
    if op == "repeat" and raw:
        end = c.integer(at, len(raw))
        return raw[:end] + raw[at:end] + raw[end:], f"bytes {at}..{end} repeated"
    return b"", "emptied"


# -- OpenPoke ------------------------------------------------------------------------------

TIMESTAMPS = [
    "0001-01-01 00:00:00",
    "9999-12-31 23:59:59",
    "2025-11-02 01:30:00",
    "2025-03-09 02:30:00",
    "2025-13-45 99:99:99",
    "",
    "yesterday",
]
PAYLOADS = [
    "hello",
    "a\u2028b",
    "x\x0cy",
    "&#xd800;",
    "&#1114112;",
    "&#0;",
    "\x00",
    "<b>&amp;</b>",
    "[SUCCESS] X: done",
    "[FAILED] : ",
    "\\n" * 50,
    "é" * 300,
]
SUMMARY_INFOS = [
    '{"last_index": ' + "9" * 5000 + "}",
    "[" * 5000 + "]" * 5000,
    '{"last_index": 1e999, "updated_at": "0001-01-01T00:00:00+05:00"}',
    '{"last_index": 99999, "updated_at": "9999-12-31T23:59:59-05:00"}',
    '{"last_index": -5, "updated_at": "not a time"}',
    '{"last_index": true, "updated_at": 5}',
    '{"last_index": 2, "updated_at": "2025-06-11T04:01:33"}',
    "null",
    '"\\ud800"',
]
TAGS = [
    "user_message",
    "poke_reply",
    "agent_message",
    "wait",
    "agent_request",
    "agent_action",
    "tool_response",
    "agent_response",
    "summary_info",
    "conversation_summary",
    "replies",
    "x y",
]


def _line(c: Chooser) -> str:
    tag = c.choice(TAGS)
    if tag == "summary_info":
        return f"<summary_info>{c.choice(SUMMARY_INFOS)}</summary_info>"
    stamp = c.choice(TIMESTAMPS)
    attr = f' timestamp="{stamp}"' if stamp or c.integer(0, 1) else ""
    return f"<{tag}{attr}>{c.choice(PAYLOADS)}</{tag}>"


def mutate_log(raw: bytes, c: Chooser) -> Mutation:
    """A line added, dropped, doubled or changed; else a byte-level change."""
    op = c.choice(["add", "drop", "double", "retime", "bytes"])
    text = raw.decode("utf-8", "surrogateescape")
    lines = text.split("\n")
    at = c.integer(0, max(len(lines) - 1, 0))
    if op == "add":
        new = _line(c)
        lines.insert(at, new)
        return "\n".join(lines).encode("utf-8", "surrogateescape"), f"line {at + 1} = {new[:60]!r}"
    if op == "drop" and lines:
        del lines[at]
        return "\n".join(lines).encode("utf-8", "surrogateescape"), f"line {at + 1} dropped"
    if op == "double" and lines:
        lines.insert(at, lines[at])
        return "\n".join(lines).encode("utf-8", "surrogateescape"), f"line {at + 1} doubled"
    if op == "retime" and 'timestamp="' in text:
        stamp = c.choice(TIMESTAMPS)
        new_text = text.replace(text[text.index('timestamp="') :].split('"')[1], stamp, 1)
        return new_text.encode("utf-8", "surrogateescape"), f"first timestamp = {stamp!r}"
    return mutate_bytes(raw, c)


TIMEZONES = [
    "America",
    "x" * 300,
    "../../../etc/passwd",
    "/etc/passwd",
    "UTC\x00",
    "Asia/Tokyo",
    "Pacific/Kiritimati",
    "Etc/GMT+12",
    "Etc/GMT-14",
    "",
    "  \n",
    "zone1970.tab",
    "posixrules",
    "Factory",
    "America/New_York\nEurope/Paris",
    "\ud800",
]


def mutate_timezone(raw: bytes, c: Chooser) -> Mutation:
    if c.integer(0, 4) == 0:
        return mutate_bytes(raw, c)
    name = c.choice(TIMEZONES)
    return name.encode("utf-8", "surrogatepass"), f"timezone.txt = {name[:40]!r}"


def mutate_file(kind: str, raw: bytes, c: Chooser, ids: list[str]) -> Mutation:
    """One mutation of a file of ``kind`` (see :func:`fuzz._corpus.file_kind`)."""
    by_kind: dict[str, Callable[[], Mutation]] = {
        "log": lambda: mutate_log(raw, c),
        "timezone": lambda: mutate_timezone(raw, c),
    }
    if kind in by_kind:
        return by_kind[kind]()
    if c.integer(0, 3) == 0:
        return mutate_bytes(raw, c)
    return mutate_json_value(raw, c, ids)
