"""Where each message of a context file lies in its bytes, and facts about each message.

A context of 100,000 messages is a 50 MB file: parsing it whole takes half a second,
and building its Message objects two more. A reader that shows one page of it needs
fifty messages and a few facts about the others (role, sequence number, the first words
of its text, its tool call ids). When the catalog indexes a big context file it keeps
both: the byte span of every message (:func:`message_spans`) and their
:class:`~soap_core._facts.MessageFacts`. A context read at the signature the catalog indexed is then
loaded without its messages (:class:`SpannedMessages` parses one when asked for it).

The spans are found without a parser, from the layout every writer of these files
uses (``json.dump(obj, f, indent=2)``, peteos and ours): a message is the object that
opens on a line of exactly four spaces and ``{`` and closes on one of four spaces and
``}``. JSON strings hold no raw newline, and only objects two levels deep are indented
by four spaces, so nothing inside a message can look like either line. A file laid out
any other way gets no spans and is read whole, as before.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

from soap_core._errors import FormatError, StoreError
from soap_core._jsonio import parse_json_bytes

SPANNED_FROM = 1_000
"""Context files with at least this many messages get spans; smaller ones parse whole
in a few milliseconds."""

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
    built (``Context.message_at`` does).

    A span that does not parse means the file changed under a signature that could not
    tell (the catalog vouched for spans of other bytes): the bytes are then parsed whole
    and the messages come from there, ``on_stale`` is called (the catalog stops vouching
    for the file), and only bytes that do not parse whole are reported broken. Bytes
    that parse whole into another number of messages than the spans said raise a
    StoreError asking for the file to be read again (the context was sized from the
    spans)."""

    def __init__(
        self, path: Path, raw: bytes, spans: array[int], on_stale: Callable[[], None] | None = None
    ) -> None:
        self.path = path
        self._raw = raw
        self._spans = spans
        self._on_stale = on_stale
        self._whole: list[Any] | None = None
        self._ascii: bool | None = None

    def __getstate__(self) -> dict[str, Any]:
        """A copy (``pickle``: ``st.cache_data``) keeps the bytes and spans but not the
        catalog's callback (a bound method of a catalog with its locks and connection):
        a stale span in the copy still falls back to parsing the bytes whole."""
        return {**self.__dict__, "_on_stale": None}

    def __len__(self) -> int:
        return len(self._spans) // 2 - 1

    def array_bytes(self) -> memoryview:
        """The bytes of the whole ``messages`` array (``[`` to ``]``), not copied."""
        return memoryview(self._raw)[self._spans[0] : self._spans[1]]

    def array_is_ascii(self) -> bool:
        """Whether the ``messages`` array is ASCII (what ``json.dumps`` writes), checked
        once."""
        ascii_ = self._ascii
        if ascii_ is None:
            ascii_ = self._ascii = self._raw[self._spans[0] : self._spans[1]].isascii()
        return ascii_

    @property
    def spans(self) -> array[int]:
        return self._spans

    def holds_id(self, message_id: str) -> bool:
        """Whether a message's own ``id`` is ``message_id``, by its bytes (the key six
        spaces in, as every ``indent=2`` writer lays a message's keys out), no message
        parsed; parsed one by one if the id is not one the bytes could spell plainly."""
        needle = _ID_KEY + json.dumps(message_id).encode("ascii")
        if b"\\" in needle:
            return any(isinstance(m, dict) and m.get("id") == message_id for m in self)
        raw, start, end = self._raw, self._spans[0], self._spans[1]
        at = raw.find(needle, start, end)
        while at >= 0:
            if raw[at + len(needle) : at + len(needle) + 1] in (b",", b"\n"):
                return True
            at = raw.find(needle, at + 1, end)
        return False

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
        if self._whole is not None:
            return self._whole[index]
        start, end = self._spans[2 * index + 2], self._spans[2 * index + 3]
        try:
            return parse_json_bytes(self.path, self._raw[start:end])
        except FormatError:
            return self._parsed_whole()[index]

    def _parsed_whole(self) -> list[Any]:
        """The messages of the bytes parsed whole (a span did not parse)."""
        on_stale, self._on_stale = self._on_stale, None
        if on_stale is not None:
            on_stale()
        data = parse_json_bytes(self.path, self._raw)  # bytes that do not parse: that error names the file
        messages = data.get("messages") if isinstance(data, dict) else None
        if not isinstance(messages, list) or len(messages) != len(self):
            raise StoreError(
                self.path, "changed since the catalog indexed it (its messages moved): read it again"
            )
        self._whole = messages
        return messages

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(len(self)))


MESSAGES_PLACEHOLDER = '\n  "messages": []'


def spliced_parts(rest_text: str, spans: array[int]) -> tuple[bytes, bytes, array[int]] | None:
    """What goes around a ``messages`` array framed by ``spans`` (in the file it came
    from, laid out as ``indent=2`` lays it out at that depth, ASCII) when it takes the
    place of the empty array in ``rest_text`` (``json.dumps(indent=2)`` of a context
    dict whose ``messages`` is empty): the bytes before it and after it, which with it
    are the text ``json.dumps`` writes for the whole dict, and the spans of its messages
    in that text (``spans`` itself where they did not move: ``messages`` is the first
    key of a peteos file). None if ``rest_text`` has no such key."""
    at = rest_text.find(MESSAGES_PLACEHOLDER)
    if at < 0 or rest_text.find(MESSAGES_PLACEHOLDER, at + 1) >= 0:
        return None
    opened = at + len(MESSAGES_PLACEHOLDER) - 2
    head = rest_text[:opened].encode("ascii")
    tail = rest_text[opened + 2 :].encode("ascii")
    shift = opened - spans[0]
    return head, tail, spans if shift == 0 else array("q", [x + shift for x in spans])


_ID_KEY = b'\n      "id": '
"""How a message's own ``id`` key begins in an ``indent=2`` file (see :data:`_SEQUENCE_KEY`)."""

_SEQUENCE_KEY = b'\n      "_sequence_number": '
"""How a message's own ``_sequence_number`` key begins in an ``indent=2`` file: the
only key six spaces in (keys of objects inside a message are deeper, and no string
holds a raw newline)."""


def forked_messages(
    source: SpannedMessages, order: Sequence[int], sequence_numbers: Sequence[int]
) -> SpannedMessages | None:
    """The messages ``order`` of ``source``, renumbered ``sequence_numbers``, as the bytes
    a fork's file holds for them: each message's own bytes with only its
    ``_sequence_number`` changed, which is what ``json.dumps(indent=2)`` writes for the
    dict of that message copied and renumbered (every other key, value and place stays).
    Linear in the bytes copied; no message is parsed. None (build the messages) when a
    message has no sequence number of its own or the array is not ASCII."""
    if not order or not source.array_is_ascii():
        return None
    raw, spans = source._raw, source.spans
    view = memoryview(raw)
    pieces: list[Any] = [b'{\n  "messages": [']
    out = array("q", (len(pieces[0]) - 1, 0))
    at = len(pieces[0])
    find = raw.find
    key_length = len(_SEQUENCE_KEY)
    for rank, index in enumerate(order):
        start, end = spans[2 * index + 2], spans[2 * index + 3]
        key = find(_SEQUENCE_KEY, start, end)
        if key < 0:
            return None
        value = key + key_length
        stop = value
        while stop < end and raw[stop] in _DIGITS:
            stop += 1
        if stop == value or raw[stop] not in _AFTER_NUMBER:
            return None
        number = str(sequence_numbers[rank]).encode("ascii")
        separator = b"\n    " if rank == 0 else b",\n    "
        pieces.append(separator)
        at += len(separator)
        out.append(at)
        if raw[value:stop] == number:
            pieces.append(view[start:end])
        else:
            pieces += (view[start:value], number, view[stop:end])
        at += end - start + len(number) - (stop - value)
        out.append(at)
    pieces.append(b"\n  ]")
    out[1] = at + 4
    pieces.append(b"\n}")
    return SpannedMessages(source.path, b"".join(pieces), out, source._on_stale)


_DIGITS = frozenset(b"0123456789")
_AFTER_NUMBER = frozenset(b",\n")
