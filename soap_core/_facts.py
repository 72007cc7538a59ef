"""What a page needs to know of every message of a context, without building them.

The catalog computes :class:`MessageFacts` when it indexes a big context file (beside
the spans of :mod:`soap_core._spans`), so a reader of a 100,000-message context gets
each message's id, sequence number and kind, and which tool result answers which call,
from one stored value: no message parsed or built.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import orjson

from soap_core._message import Message
from soap_core._parts import TextPart, ToolResultPart, ToolUsePart

SUMMARY_PREFIX = "[Summary of the earlier conversation]\n"
"""How a compaction summary message begins (the runtime's ``summarize`` strategy writes it)."""

TURN, TOOL_CALL, COMPACTION, OTHER = "t", "c", "s", "."
"""The kind codes of :attr:`MessageFacts.kinds`: a turn starts (a user message with
text), a tool call, a compaction summary, anything else."""


def kind_code(message: Message) -> str:
    """The kind code of one message."""
    if message.role == "assistant" and message.tool_uses():
        return TOOL_CALL
    if message.role != "user":
        return OTHER
    text = next((part.text for part in message.content if isinstance(part, TextPart)), None)
    if text is None:
        return OTHER
    return COMPACTION if text.startswith(SUMMARY_PREFIX) else TURN


def _ints() -> array[int]:
    return array("l")


@dataclass(frozen=True)
class CallPairs:
    """Every tool call of a context and the result that answers it, as four arrays.

    Calls are numbered in display order (the order of their parts in the messages);
    so are result parts. Arrays of ints, because the page's cache copies this on
    every rerun: a 100,000-message context has some 25,000 calls.
    """

    call_message: array[int] = field(default_factory=_ints)
    """Per call: the display index of the message that made it (ascending)."""
    answered_by: array[int] = field(default_factory=_ints)
    """Per call: the display index of the message holding its result; -1 for none."""
    result_message: array[int] = field(default_factory=_ints)
    """Per result part: the display index of the message holding it (ascending)."""
    answers: array[int] = field(default_factory=_ints)
    """Per result part: the number of the call it answers; -1 when no call asked."""

    def calls_of(self, index: int) -> range:
        """The numbers of the calls made by the message at display index ``index``."""
        return range(
            bisect.bisect_left(self.call_message, index), bisect.bisect_right(self.call_message, index)
        )

    def results_in(self, index: int) -> range:
        """The numbers of the result parts held by the message at ``index``."""
        return range(
            bisect.bisect_left(self.result_message, index), bisect.bisect_right(self.result_message, index)
        )


def pair_tool_parts(messages: Iterable[Sequence[Sequence[str]]]) -> CallPairs:
    """:func:`build_call_pairs` from each message's tool parts alone, ``("use", call id)``
    or ``("result", call id)`` in order (``MessageFacts.tool_parts``: no message built)."""
    pairs = CallPairs()
    waiting: dict[str, list[int]] = {}
    for index, parts in enumerate(messages):
        for kind, call_id in parts:
            if kind == "use":
                waiting.setdefault(call_id, []).append(len(pairs.call_message))
                pairs.call_message.append(index)
                pairs.answered_by.append(-1)
            else:
                pairs.result_message.append(index)
                pairs.answers.append(_answer(pairs, waiting.get(call_id), index))
    return pairs


def _answer(pairs: CallPairs, waiting: list[int] | None, index: int) -> int:
    """The call a result in message ``index`` answers (and mark it answered), or -1."""
    if not waiting:
        return -1
    latest = pairs.call_message[waiting[-1]]
    if latest >= index:
        return -1  # a result in the same message as its call cannot sit under it
    call = next(k for k in waiting if pairs.call_message[k] == latest)
    waiting.remove(call)
    pairs.answered_by[call] = index
    return call


def tool_parts_of(message: Message) -> tuple[tuple[str, str], ...]:
    """The message's tool parts in order: ``("use", call id)`` or ``("result", call id)``."""
    return tuple(
        ("use" if isinstance(part, ToolUsePart) else "result", part.call_id)
        for part in message.content
        if isinstance(part, ToolUsePart | ToolResultPart)
    )


def build_call_pairs(messages: Iterable[Message]) -> CallPairs:
    """Pair every result with its call in one pass over the messages (display order).

    A result answers the earlier call with its ``call_id`` that is still unanswered;
    when several wait (ids repeat: forks, OpenPoke's ids that are tool names), the
    latest message holding one wins, and within it the first call, so that a call left
    without a result (an interrupted run) does not steal the result of a later one.
    """
    return pair_tool_parts(tool_parts_of(message) for message in messages)


@dataclass(frozen=True)
class MessageFacts:
    """The facts of every message of one context, in display order."""

    ids: list[str]
    sequence_numbers: list[int | None]
    kinds: str
    """One :func:`kind_code` per message."""
    calls: CallPairs

    def __len__(self) -> int:
        return len(self.ids)


def facts_of(messages: Sequence[Message]) -> MessageFacts:
    """The facts of built messages (the catalog stores the same, computed this way)."""
    return MessageFacts(
        [m.id for m in messages],
        [m.sequence_number for m in messages],
        "".join(kind_code(m) for m in messages),
        build_call_pairs(messages),
    )


def prefix_facts(facts: MessageFacts, count: int, sequence_numbers: Sequence[int | None]) -> MessageFacts:
    """The facts of a context's first ``count`` messages, renumbered ``sequence_numbers``
    (a fork of them): a call answered past them is unanswered, and every result among
    them answers the call it answered (calls and results are paired in display order,
    each result with an earlier call)."""
    calls = facts.calls
    made = bisect.bisect_left(calls.call_message, count)
    held = bisect.bisect_left(calls.result_message, count)
    answered = array("l", (-1 if i >= count else i for i in calls.answered_by[:made]))
    return MessageFacts(
        facts.ids[:count],
        list(sequence_numbers),
        facts.kinds[:count],
        CallPairs(calls.call_message[:made], answered, calls.result_message[:held], calls.answers[:held]),
    )


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a bulk decode allocates some 100,000
    strings (none of them in a cycle, all freed by reference counting): with it on, each
    of its full passes walks every object of the process, and decoding the facts of a
    100,000-message context took four times as long."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def encode_facts(facts: MessageFacts) -> bytes | None:
    """The catalog's column for the facts of one context file; None when orjson cannot
    write them (an id with a lone surrogate: the reader then builds the messages)."""
    calls = facts.calls
    try:
        return orjson.dumps(
            [
                facts.ids,
                facts.sequence_numbers,
                facts.kinds,
                [calls.call_message.tolist(), calls.answered_by.tolist()],
                [calls.result_message.tolist(), calls.answers.tolist()],
            ]
        )
    except orjson.JSONEncodeError:
        return None


def decode_facts(raw: bytes) -> MessageFacts | None:
    """:func:`encode_facts` read back; None if the value is not what it wrote."""
    try:
        with collector_paused():
            ids, sequence_numbers, kinds, (made, answered), (held, answers) = orjson.loads(raw)
        if (
            not len(ids) == len(sequence_numbers) == len(kinds)
            or len(made) != len(answered)
            or len(held) != len(answers)
        ):
            return None
        calls = CallPairs(array("l", made), array("l", answered), array("l", held), array("l", answers))
        return MessageFacts(ids, sequence_numbers, kinds, calls)
    except (orjson.JSONDecodeError, TypeError, ValueError, OverflowError):
        return None
