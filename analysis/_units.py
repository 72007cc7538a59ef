"""The units an answer is attributed to, and the request with some of them taken out.

Three sizes of unit:

* ``message``: every message of the request (the system prompt, the tool definitions,
  each message; a tool result is a unit of its own).
* ``part``: each text part of a message and each tool result of it.
* ``sentence``: each sentence of those parts (split after ``.``, ``!`` or ``?`` followed
  by a space, and at line breaks).

A message that holds anything else (a tool call, the tool definitions, an image,
thinking) stays one unit at every size: taking out a piece of a tool call would leave a
call the model never made, and an image has no sentences.

Taking units out never changes what is left: the kept sentences of a part are its
characters as they were, so a request with nothing taken out is the original,
byte for byte. A message with every unit taken out is taken out whole, as at the
message size (a tool result is emptied, so its call keeps its answer; a dropped call
takes its results with it).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from replay import Materialized, Overrides, dropped_with_pairs, inline_call, replay_messages, source_named
from soap_core import Message, Part, TextPart, ToolResultPart, count_text

UNITS = ("message", "part", "sentence")
"""The sizes of unit an answer can be attributed to (module docstring)."""

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*[ \t]+|[ \t]*\n\s*")


@dataclass(frozen=True)
class Unit:
    """One part of the request an answer may depend on."""

    index: int
    """Display index of the message in the request's messages."""
    kind: str
    label: str
    preview: str
    tokens: int
    message_id: str | None = None
    """The session's message the unit is (None for one the source made up, or in a
    record written before ids were kept)."""
    part: int | None = None
    """For a part or sentence: the position of its part in the message's content (None:
    the whole message)."""
    span: tuple[int, int] | None = None
    """For a sentence: its characters in the part's text (None: the whole part)."""
    piece: int | None = None
    """For a part or sentence: its number in the message, from 1."""

    @property
    def at(self) -> str:
        """Where it is, as the tables show it: ``#4`` for a message, ``#4.2`` for the
        second piece of message 4 (a part or a sentence)."""
        return f"#{self.index}" if self.piece is None else f"#{self.index}.{self.piece}"

    @property
    def piece_name(self) -> str | None:
        """A part or sentence as its label names it within its message ("sentence 2",
        "result 1"); None for a whole message."""
        return None if self.piece is None else self.label.rsplit(", ", 1)[-1]

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.part is None:  # records of message units read as they did before parts existed
            del data["part"], data["span"], data["piece"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Unit:
        span = data.get("span")
        return cls(**{**data, "span": tuple(span) if span is not None else None})


def _names(names: Sequence[str | None]) -> str:
    return ", ".join(dict.fromkeys(name or "a tool" for name in names))


def _shown(message: Message) -> str:
    """A message's words for a preview: its text, else its calls, results or tools."""
    if message.text().strip():
        return message.text()
    if message.tool_uses():
        return "; ".join(inline_call(u.name, u.parsed_arguments()) for u in message.tool_uses())
    if message.tool_results():
        return "; ".join(str(r.content) for r in message.tool_results())
    return ", ".join(t.name for t in message.tool_definitions())


def _preview(text: str) -> str:
    text = " ".join(text.split())
    return text[:77] + "..." if len(text) > 80 else text


def _labels(messages: Sequence[Message]) -> list[tuple[str, str]]:
    """Each message's (kind, label) as a reader would name it (a tool result by the tool
    its call named, where the result does not name it)."""
    seen: Counter[str] = Counter()
    called: dict[str, str] = {}
    labels = []
    for message in messages:
        if message.message_type == "SystemPromptMessage":
            kind, label = "system prompt", "the system prompt"
        elif message.tool_definitions():
            kind, label = "tool definitions", "the tool definitions"
        elif message.tool_results() and message.role != "assistant":
            names = _names([r.name or called.get(r.call_id) for r in message.tool_results()])
            seen[f"result {names}"] += 1
            kind, label = "tool result", f"the tool result of {names} #{seen[f'result {names}']}"
        elif message.role == "assistant" and message.tool_uses():
            names = _names([u.name for u in message.tool_uses()])
            called.update((u.call_id, u.name) for u in message.tool_uses())
            seen[f"call {names}"] += 1
            kind, label = "tool call", f"the call of {names} #{seen[f'call {names}']}"
        else:
            seen[message.role] += 1
            kind, label = message.role, f"{message.role} message #{seen[message.role]}"
        labels.append((kind, label))
    return labels


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """The sentences of ``text`` as character ranges that tile it: each takes the space
    after it, the first any space before it, so the ranges joined are ``text``. Text
    with no words has none."""
    spans: list[tuple[int, int]] = []
    start = 0
    for end in _SENTENCE_END.finditer(text):
        if text[start : end.start()].strip():
            spans.append((start, end.end()))
            start = end.end()
    if text[start:].strip():
        spans.append((start, len(text)))
    elif spans:
        spans[-1] = (spans[-1][0], len(text))
    return spans


def _part_text(part: Part) -> str | None:
    """The text a part or sentence unit can be cut from (None: the part is not text)."""
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, ToolResultPart) and isinstance(part.content, str):
        return part.content
    return None


def _pieces(message: Message, unit: str) -> list[tuple[int, tuple[int, int] | None, str]]:
    """(part position, sentence span, its text) of each piece of ``message`` at ``unit``;
    empty where the message stays whole (module docstring)."""
    if unit == "message" or message.tool_definitions():
        return []
    texts = [_part_text(p) for p in message.content]
    if not texts or any(t is None for t in texts):
        return []
    pieces: list[tuple[int, tuple[int, int] | None, str]] = []
    for position, text in enumerate(texts):
        assert text is not None
        if unit == "part":
            if text.strip():
                pieces.append((position, None, text))
        else:
            pieces.extend((position, (a, b), text[a:b]) for a, b in sentence_spans(text))
    return pieces


def request_units(found: Materialized, unit: str = "message") -> list[Unit]:
    """The request's units at size ``unit`` (:data:`UNITS`), in request order."""
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}: one of {', '.join(UNITS)}")
    units = []
    for index, (message, (kind, label)) in enumerate(
        zip(found.messages, _labels(found.messages), strict=True)
    ):
        pieces = _pieces(message, unit)
        if len(pieces) < 2:  # one piece is the whole message: it is named as one
            units.append(
                Unit(index, kind, label, _preview(_shown(message)), message.count_tokens(), message.id)
            )
            continue
        noun = "sentence" if unit == "sentence" else ("result" if kind == "tool result" else "part")
        units.extend(
            Unit(
                index,
                kind,
                f"{label}, {noun} {n}",
                _preview(text),
                count_text(text),
                message.id,
                part,
                span,
                n,
            )
            for n, (part, span, text) in enumerate(pieces, 1)
        )
    return units


def unit_count(found: Materialized, unit: str = "message") -> int:
    """How many units :func:`request_units` makes of ``found`` at ``unit``, without
    counting their tokens (cheap on a request of 20,000 messages)."""
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}: one of {', '.join(UNITS)}")
    return sum(len(pieces) if len(pieces := _pieces(m, unit)) >= 2 else 1 for m in found.messages)


def removal(found: Materialized, removed: Collection[int]) -> tuple[Overrides, frozenset[int]]:
    """The overrides that take the messages ``removed`` (display indices) out of
    ``found``'s request, and the messages they in fact take out.

    A tool result is emptied rather than dropped, so its call still has its answer; any
    other message is dropped, and a dropped call takes its results with it (the source
    would refuse a result without its call)."""
    messages = found.messages
    emptied = {
        i: [""] * len(messages[i].tool_results())
        for i in removed
        if messages[i].tool_results() and messages[i].role != "assistant"
    }
    drops = sorted(i for i in removed if i not in emptied)
    gone = frozenset(dropped_with_pairs(messages, drops)) | frozenset(emptied)
    return Overrides(drops=drops, tool_results=emptied), gone


def _cut(message: Message, cut: Sequence[Unit]) -> Message:
    """``message`` without the pieces ``cut``: a text part loses those characters (and
    goes where none are left), a tool result keeps its call id with what is left."""
    out: dict[int, set[tuple[int, int] | None]] = defaultdict(set)
    for unit in cut:
        assert unit.part is not None
        out[unit.part].add(unit.span)
    content: list[Part] = []
    for position, part in enumerate(message.content):
        spans = out.get(position)
        text = _part_text(part)
        if spans is None or text is None:
            content.append(part)
            continue
        kept = (
            ""
            if None in spans
            else "".join(text[a:b] for a, b in sentence_spans(text) if (a, b) not in spans)
        )
        if isinstance(part, ToolResultPart):
            content.append(replace(part, content=kept))
        elif isinstance(part, TextPart) and kept:
            content.append(replace(part, text=kept))
    changed = message.copy()
    changed.content = content
    return changed


def ablated_messages(
    found: Materialized, removed: Collection[int], units: Sequence[Unit] | None = None
) -> tuple[list[Message], frozenset[int]]:
    """The messages sent with the units at positions ``removed`` of ``units`` (default:
    the message units, whose positions are the display indices) taken out, and the
    positions in fact taken out (a dropped call's results go with it)."""
    units = request_units(found) if units is None else units
    of_message: dict[int, list[int]] = defaultdict(list)
    for position, unit in enumerate(units):
        of_message[unit.index].append(position)
    chosen = set(removed)
    whole = {i for i, positions in of_message.items() if all(p in chosen for p in positions)}
    messages = list(found.messages)
    for i, positions in of_message.items():
        if i not in whole and any(p in chosen for p in positions):
            messages[i] = _cut(messages[i], [units[p] for p in positions if p in chosen])
    cut = replace(found, messages=messages)
    overrides, gone_messages = removal(cut, whole)
    gone = {p for i in gone_messages for p in of_message[i]}
    gone.update(p for p in chosen if units[p].index not in gone_messages)
    return replay_messages(cut, overrides), frozenset(gone)


def ablated_request(
    found: Materialized, removed: Collection[int], units: Sequence[Unit] | None = None
) -> tuple[dict[str, Any], frozenset[int]]:
    """The request with the units ``removed`` taken out (:func:`ablated_messages`), built
    by the session's request source, and the units that were in fact taken out."""
    sent, gone = ablated_messages(found, removed, units)
    parameters = {k: v for k, v in found.parameters.items() if k != "model"}
    model = found.parameters.get("model")
    request = source_named(found.source).build_request(sent, model=model, parameters=parameters)
    return request, gone
