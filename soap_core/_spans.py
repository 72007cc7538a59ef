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

    def __getstate__(self) -> dict[str, Any]:
        """A copy (``pickle``: ``st.cache_data``) keeps the bytes and spans but not the
        catalog's callback (a bound method of a catalog with its locks and connection):
        a stale span in the copy still falls back to parsing the bytes whole."""
        return {**self.__dict__, "_on_stale": None}

    def __len__(self) -> int:
        return len(self._spans) // 2 - 1

    def array_bytes(self) -> bytes:
        """The bytes of the whole ``messages`` array (``[`` to ``]``)."""
        return self._raw[self._spans[0] : self._spans[1]]

    @property
    def spans(self) -> array[int]:
        return self._spans

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


def spliced_text(rest_text: str, messages: bytes, spans: array[int]) -> tuple[str, array[int]] | None:
    """``rest_text`` (``json.dumps(indent=2)`` of a context dict whose ``messages`` is
    empty) with the bytes ``messages`` (an ASCII ``messages`` array laid out as
    ``indent=2`` lays it out at that depth, framed by ``spans`` in the file they came
    from) in place of the empty array: the text ``json.dumps`` writes for the whole
    dict, and the spans of its messages in it. None if ``rest_text`` has no such key."""
    at = rest_text.find(MESSAGES_PLACEHOLDER)
    if at < 0 or rest_text.find(MESSAGES_PLACEHOLDER, at + 1) >= 0:
        return None
    opened = at + len(MESSAGES_PLACEHOLDER) - 2
    text = rest_text[:opened] + messages.decode("ascii") + rest_text[opened + 2 :]
    shift = opened - spans[0]
    return text, array("q", (x + shift for x in spans))
