"""What a listing takes of a context file, read in a process of its own.

A new store's first indexing for the workbench lists each context file from its
file-level keys (:meth:`soap_core._catalog.Catalog._apply_walk`). Reading and parsing
the files is most of that work, and one process does it on one core; from
:data:`soap_core._catalog.WORKERS_FROM` files on, the catalog hands them to worker
processes that run this module as a script, while it reads the sessions' own files.

A worker reads NUL-separated paths on stdin and writes one JSON line per path on
stdout, in order: ``[id, origin, children, messages, first, last]`` (:func:`keys_of`)
for a file whose keys are plainly what a listing takes, or ``null`` for anything else
(a link, a FIFO, JSON orjson refuses, a key of another type): the catalog reads those
itself, with the reader that says what is wrong. It imports orjson alone, so it starts
in a few hundredths of a second, and writes nothing but its stdout.

The catalog imports :func:`keys_of` too: the same values, whichever process reads."""

from __future__ import annotations

import os
import sys
from typing import Any

import orjson

_BOM = b"\xef\xbb\xbf"
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # no link, no FIFO's wait


def keys_of(data: Any) -> tuple[str, str | None, list[str], int, str | None, str | None] | None:
    """A parsed context file's id, origin, children, number of messages and first and
    last message times, when each has the type :meth:`Context.from_dict` takes; None
    otherwise. The ids are not checked as names here (the catalog does that); nothing
    of the messages is kept."""
    if data.__class__ is not dict:
        return None
    get = data.get
    context_id, origin, children, messages = (
        get("id"),
        get("origin_context_id"),
        get("children"),
        get("messages"),
    )
    if context_id.__class__ is not str or (origin is not None and origin.__class__ is not str):
        return None
    if children is not None and (
        children.__class__ is not list or any(c.__class__ is not str for c in children)
    ):
        return None
    if messages is not None and messages.__class__ is not list:
        return None
    messages = messages or []
    return context_id, origin, children or [], len(messages), *message_times(messages)


def message_times(messages: list[Any]) -> tuple[str | None, str | None]:
    """The first and last ``creation_timestamp`` of a context file's messages as
    parsed (a message without one, or with one of another type, has none)."""
    stamps = [
        t
        for m in messages
        if m.__class__ is dict and (t := m.get("creation_timestamp")).__class__ is str and t
    ]
    return (min(stamps), max(stamps)) if stamps else (None, None)


def read_all(fd: int) -> bytes:
    """The bytes of an open file, to its end (as ``Path.read_bytes``, without the
    buffered file object around the descriptor)."""
    size = os.fstat(fd).st_size
    chunks = []
    want = size + 1  # one byte more: the end is seen without a third call
    while chunk := os.read(fd, want):
        chunks.append(chunk)
        want = 1 << 20
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def listed(path: bytes) -> tuple[str, str | None, list[str], int, str | None, str | None] | None:
    """:func:`keys_of` the file at ``path``, or None for anything but a plain file of
    JSON orjson takes."""
    try:
        fd = os.open(path, _OPEN)
    except OSError:
        return None
    try:
        raw = read_all(fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        data = orjson.loads(raw[3:] if raw.startswith(_BOM) else raw)
    except orjson.JSONDecodeError:
        return None
    return keys_of(data)


def main() -> None:
    paths = sys.stdin.buffer.read().split(b"\0")
    out = sys.stdout.buffer
    for path in paths:
        out.write(orjson.dumps(listed(path)) + b"\n")
    out.flush()


if __name__ == "__main__":
    main()
