"""Where each message of a context file lies in its bytes, and facts about each message.

A context of 100,000 messages is a 50 MB file: parsing it whole takes half a second,
and building its Message objects two more. A reader that shows one page of it needs
fifty messages and a few facts about the others (role, sequence number, the first words
of its text, its tool call ids). When the catalog indexes a big context file it keeps
both: the byte span of every message (:func:`message_spans`) and its
:class:`MessageFacts`. A context read at the signature the catalog indexed is then
loaded without its messages (:class:`SpannedMessages` parses one when asked for it).

The spans are found without a parser, from the layout every writer of these files
uses (``json.dump(obj, f, indent=2)``, peteos and ours): a message is the object that
opens on a line of exactly four spaces and ``{`` and closes on one of four spaces and
``}``. JSON strings hold no raw newline, and only objects two levels deep are indented
by four spaces, so nothing inside a message can look like either line. A file laid out
any other way gets no spans and is read whole, as before.
"""

from __future__ import annotations

import contextlib
import gc
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import orjson

from soap_core._jsonio import parse_json_bytes
from soap_core._message import Message
from soap_core._parts import TextPart, ToolResultPart, ToolUsePart

SPANNED_FROM = 1_000
"""Context files with at least this many messages get spans; smaller ones parse whole
in a few milliseconds."""

LEAD_CHARS = 64
"""Characters of a message's first text part kept as its :attr:`MessageFacts.leads`."""

_KEY = b'\n  "messages": ['
_OPEN = b"\n    {\n"
_CLOSE = b"\n    }"
_END = b"\n  ]"


def message_spans(raw: bytes, count: int) -> array[int] | None:
    """``[array start, array end, start 0, end 0, start 1, end 1, …]``: the byte range of
    the ``messages`` array (``[`` to after ``]``) and of each of its ``count`` objects in
    ``raw``; None when the file is not laid out as ``indent=2`` writes it."""
    key = raw.find(_KEY)
    if key < 0 or count == 0:
        return None
    opened = key + len(_KEY) - 1  # the "["
    spans = array("q", (opened, 0))
    at = opened + 1
    for _ in range(count):
        if not raw.startswith(_OPEN, at):
            return None
        start = at + 5
        end = raw.find(_CLOSE, start)
        if end < 0:
            return None
        end += len(_CLOSE)
        spans.append(start)
        spans.append(end)
        at = end + 1 if raw.startswith(b",", end) else end
    if not raw.startswith(_END, at):
        return None
    spans[1] = at + len(_END)
    return spans


def without_messages(raw: bytes, spans: array[int]) -> bytes:
    """The file's bytes with an empty ``messages`` array: the rest of the context."""
    return raw[: spans[0]] + b"[]" + raw[spans[1] :]


class SpannedMessages(Sequence[Any]):
    """The message dicts of a context file, each parsed from its span when asked for.

    Holds the file's bytes (read once, at the signature the catalog indexed), not the
    parsed messages: a dict is parsed again on every access, so callers keep what they
    built (``Context.message_at`` does)."""

    def __init__(self, path: Path, raw: bytes, spans: array[int]) -> None:
        self.path = path
        self._raw = raw
        self._spans = spans

    def __len__(self) -> int:
        return len(self._spans) // 2 - 1

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        start, end = self._spans[2 * index + 2], self._spans[2 * index + 3]
        return parse_json_bytes(self.path, self._raw[start:end])

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(len(self)))


@dataclass(frozen=True)
class MessageFacts:
    """What a page needs to know of every message of a context without building them:
    one entry per message, in display order."""

    ids: list[str]
    roles: list[str]
    sequence_numbers: list[int | None]
    leads: list[str | None]
    """The first :data:`LEAD_CHARS` characters of the message's first text part; None
    when it has no text part."""
    tool_parts: list[Sequence[Sequence[str]]]
    """Its tool parts in order: ``["use", call id]`` or ``["result", call id]``."""

    def __len__(self) -> int:
        return len(self.ids)


def tool_parts_of(message: Message) -> tuple[tuple[str, str], ...]:
    return tuple(
        ("use" if isinstance(part, ToolUsePart) else "result", part.call_id)
        for part in message.content
        if isinstance(part, ToolUsePart | ToolResultPart)
    )


def lead_of(message: Message) -> str | None:
    text = next((part.text for part in message.content if isinstance(part, TextPart)), None)
    return None if text is None else text[:LEAD_CHARS]


def facts_of(messages: Iterable[Message]) -> MessageFacts:
    """The facts of built messages (the catalog stores the same, computed this way)."""
    facts = MessageFacts([], [], [], [], [])
    for message in messages:
        facts.ids.append(message.id)
        facts.roles.append(message.role)
        facts.sequence_numbers.append(message.sequence_number)
        facts.leads.append(lead_of(message))
        facts.tool_parts.append([list(part) for part in tool_parts_of(message)])
    return facts


def encode_facts(facts: MessageFacts) -> bytes | None:
    """The catalog's column for the facts of one context file; None when orjson cannot
    write them (a lone surrogate in a text: the page then builds the messages)."""
    try:
        return orjson.dumps([facts.ids, facts.roles, facts.sequence_numbers, facts.leads, facts.tool_parts])
    except orjson.JSONEncodeError:
        return None


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a bulk decode allocates some 500,000
    strings and lists (none of them in a cycle, all freed by reference counting): with
    it on, each of its full passes walks every object of the process, and the facts of a
    100,000-message context took four times as long to decode."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def decode_facts(raw: bytes) -> MessageFacts | None:
    """:func:`encode_facts` read back; None if the value is not what it wrote."""
    try:
        with collector_paused():
            ids, roles, sequence_numbers, leads, tool_parts = orjson.loads(raw)
        if not len(ids) == len(roles) == len(sequence_numbers) == len(leads) == len(tool_parts):
            return None
        return MessageFacts(ids, roles, sequence_numbers, leads, tool_parts)
    except (orjson.JSONDecodeError, TypeError, ValueError):
        return None
