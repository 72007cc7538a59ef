"""Diffs of model outputs and of whole contexts, and the noise band of a model.

Prose is compared word by word (difflib); tool calls are compared as parsed JSON
(deepdiff), ignoring call ids, which servers make up afresh on every call. The noise
band says how much the model varies by itself on an unchanged request, so that a change
after an edit can be called real or noise.
"""

from __future__ import annotations

import difflib
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from deepdiff import DeepDiff

from soap_core import Context, Message, TextPart, ToolResultPart, canonical_json, part_to_dict


@dataclass(frozen=True)
class Output:
    """What a model call produced, as far as comparing goes."""

    text: str
    tool_calls: tuple[tuple[str, Any], ...] = ()
    usage: dict[str, Any] | None = None
    latency_s: float | None = None

    @classmethod
    def of(
        cls, message: Message | None, usage: dict[str, Any] | None = None, latency_s: float | None = None
    ) -> Output:
        if message is None:
            return cls("", (), usage, latency_s)
        calls = tuple((u.name, u.parsed_arguments()) for u in message.tool_uses())
        return cls(message.text(), calls, usage, latency_s)

    def key(self) -> str:
        """Equal keys: equal outputs (text and tool calls, ids aside)."""
        return canonical_json([self.text, [list(c) for c in self.tool_calls]])


def words(text: str) -> list[str]:
    return text.split()


def word_diff(a: str, b: str) -> list[tuple[str, str]]:
    """(op, words) runs: op is equal, delete (only in a) or insert (only in b)."""
    left, right = words(a), words(b)
    runs: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, left, right, autojunk=False).get_opcodes():
        if op == "equal":
            runs.append(("equal", " ".join(left[i1:i2])))
            continue
        if i2 > i1:
            runs.append(("delete", " ".join(left[i1:i2])))
        if j2 > j1:
            runs.append(("insert", " ".join(right[j1:j2])))
    return runs


def distance(a: Output, b: Output) -> float:
    """0 for the same output, up to 1 for nothing in common (words and tool calls)."""
    left = [*words(a.text), *(canonical_json(list(c)) for c in a.tool_calls)]
    right = [*words(b.text), *(canonical_json(list(c)) for c in b.tool_calls)]
    if not left and not right:
        return 0.0
    return round(1.0 - difflib.SequenceMatcher(None, left, right, autojunk=False).ratio(), 6)


@dataclass
class OutputDiff:
    """How two outputs differ."""

    identical: bool
    distance: float
    words: list[tuple[str, str]]
    tool_calls: dict[str, Any]
    usage_delta: dict[str, float]
    latency_delta_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "identical": self.identical,
            "distance": self.distance,
            "words": [list(run) for run in self.words],
            "tool_calls": self.tool_calls,
            "usage_delta": self.usage_delta,
            "latency_delta_s": self.latency_delta_s,
        }


def _usage_delta(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, float]:
    if not a or not b:
        return {}
    keys = [k for k in a if isinstance(a.get(k), (int, float)) and isinstance(b.get(k), (int, float))]
    return {k: b[k] - a[k] for k in keys}


def diff_outputs(a: Output, b: Output) -> OutputDiff:
    calls = DeepDiff([list(c) for c in a.tool_calls], [list(c) for c in b.tool_calls], verbose_level=2)
    latency = b.latency_s - a.latency_s if a.latency_s is not None and b.latency_s is not None else None
    return OutputDiff(
        identical=a.key() == b.key(),
        distance=distance(a, b),
        words=word_diff(a.text, b.text),
        tool_calls=calls.to_dict() if calls else {},
        usage_delta=_usage_delta(a.usage, b.usage),
        latency_delta_s=latency,
    )


@dataclass
class NoiseBand:
    """How much unchanged replays of one request differ from each other."""

    samples: int
    agreement_rate: float
    """Share of samples equal to the most common output."""
    distances: list[float] = field(default_factory=list)
    """Every pairwise distance between samples."""

    @property
    def upper(self) -> float:
        """The largest distance seen between two unchanged runs."""
        return max(self.distances, default=0.0)

    def contains(self, value: float) -> bool:
        return value <= self.upper

    def as_dict(self) -> dict[str, Any]:
        spread = self.distances or [0.0]
        return {
            "samples": self.samples,
            "agreement_rate": self.agreement_rate,
            "distance_min": min(spread),
            "distance_median": statistics.median(spread),
            "distance_max": self.upper,
            "distances": self.distances,
        }


def noise_band(outputs: list[Output]) -> NoiseBand:
    if not outputs:
        return NoiseBand(0, 1.0)
    most_common = Counter(o.key() for o in outputs).most_common(1)[0][1]
    pairs = [distance(a, b) for a, b in combinations(outputs, 2)]
    return NoiseBand(len(outputs), round(most_common / len(outputs), 6), sorted(pairs))


def _turn_view(message: Message) -> Any:
    """A message as a turn-by-turn comparison sees it: no ids, sequence numbers or counts."""
    parts: list[Any] = []
    for part in message.content:
        if isinstance(part, TextPart):
            parts.append(["text", part.text])
        elif isinstance(part, ToolResultPart):
            parts.append(["tool_result", part.content])
        else:
            raw = {k: v for k, v in part_to_dict(part).items() if k != "call_id"}
            parts.append([raw.get("type"), raw])
    return [message.role, parts]


@dataclass
class ContextDiff:
    """Two contexts side by side, their messages lined up by content (a fork that dropped
    the first turns, or added a summary, still pairs the messages it kept)."""

    first_divergence: int | None
    """Display index (in A, else in B) of the first message that is not in both."""
    turn: int | None
    """The user turn (1-based count of user messages up to it) where they diverge."""
    rows: list[dict[str, Any]]
    summary: str = ""
    """One sentence counting what is the same, changed, and only on one side."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "first_divergence": self.first_divergence,
            "turn": self.turn,
            "summary": self.summary,
            "rows": self.rows,
        }


def diff_contexts(a: Context, b: Context) -> ContextDiff:
    """``a`` and ``b`` message by message, lined up by content rather than by position:
    the common start and end are taken as they are (linear), the middle is aligned with
    difflib; a pair the alignment could not match becomes a "changed" row with its word
    diff, a message on one side only a row of its own."""
    left, right = a.messages, b.messages
    keys_a = [canonical_json(_turn_view(m)) for m in left]
    keys_b = [canonical_json(_turn_view(m)) for m in right]
    head = 0
    while head < min(len(keys_a), len(keys_b)) and keys_a[head] == keys_b[head]:
        head += 1
    tail = 0
    while tail < min(len(keys_a), len(keys_b)) - head and keys_a[-1 - tail] == keys_b[-1 - tail]:
        tail += 1
    pairs: list[tuple[int | None, int | None]] = [(i, i) for i in range(head)]
    middle = difflib.SequenceMatcher(
        None, keys_a[head : len(keys_a) - tail], keys_b[head : len(keys_b) - tail], autojunk=False
    )
    for op, i1, i2, j1, j2 in middle.get_opcodes():
        span_a = list(range(head + i1, head + i2))
        span_b = list(range(head + j1, head + j2))
        if op == "equal":
            pairs += list(zip(span_a, span_b, strict=True))
            continue
        for k in range(max(len(span_a), len(span_b))):  # a replaced block pairs up in order
            pairs.append((span_a[k] if k < len(span_a) else None, span_b[k] if k < len(span_b) else None))
    pairs += [(len(keys_a) - tail + k, len(keys_b) - tail + k) for k in range(tail)]
    return _context_diff(left, right, keys_a, keys_b, pairs)


def _context_diff(
    left: Sequence[Message],
    right: Sequence[Message],
    keys_a: Sequence[str],
    keys_b: Sequence[str],
    pairs: Sequence[tuple[int | None, int | None]],
) -> ContextDiff:
    rows: list[dict[str, Any]] = []
    first: int | None = None
    turn = 0
    diverged_turn: int | None = None
    counts = Counter[str]()
    for ia, ib in pairs:
        ma = left[ia] if ia is not None else None
        mb = right[ib] if ib is not None else None
        present = ma if ma is not None else mb
        if present is not None and present.role == "user":
            turn += 1
        same = ia is not None and ib is not None and keys_a[ia] == keys_b[ib]
        side = (
            "same" if same else "changed" if ia is not None and ib is not None else "a" if ib is None else "b"
        )
        counts[side] += 1
        index = ia if ia is not None else ib
        if not same and first is None:
            first, diverged_turn = index, max(turn, 1)
        rows.append(
            {
                "index": index,
                "a_index": ia,
                "b_index": ib,
                "same": same,
                "a": _row(ma),
                "b": _row(mb),
                "words": [] if same else word_diff(ma.text() if ma else "", mb.text() if mb else ""),
            }
        )
    return ContextDiff(first, diverged_turn, rows, _summary(counts))


def _summary(counts: Counter[str]) -> str:
    """``12 messages the same, 1 changed, 6 only in A, 1 only in B``."""
    parts = [f"{counts['same']:,} message{'' if counts['same'] == 1 else 's'} the same"]
    parts += [f"{counts['changed']:,} changed"] if counts["changed"] else []
    parts += [f"{counts['a']:,} only in A"] if counts["a"] else []
    parts += [f"{counts['b']:,} only in B"] if counts["b"] else []
    return ", ".join(parts)


def _row(message: Message | None) -> dict[str, Any] | None:
    if message is None:
        return None
    return {
        "role": message.role,
        "id": message.id,
        "text": message.text(),
        "tool_calls": [[u.name, u.parsed_arguments()] for u in message.tool_uses()],
    }
