"""Two branches of an agent run, step by step, and the noise band of unchanged re-runs.

A *branch* is what an agent did from some message on: its texts, its tool calls with
their arguments and results, the user's messages, its final answer. The original context
from message k on is one branch; a re-run of the agent from k (a fork) is another.
:func:`branch_turns` turns a context into its steps, :func:`diff_branches` aligns two
branches step by step (an LCS over the steps' kind, tool name and arguments) and says,
for a person, where they part; :func:`branch_noise_band` measures how far unchanged
re-runs differ from each other, so that an edited re-run's distance can be called real
or noise.

Distance between two branches (:func:`branch_distance`): a branch is seen as one
:class:`replay.Output` whose text is its final answer and whose tool calls are its steps
(one element per step: kind, tool name, arguments), and :func:`replay.distance` is taken:
``1 - difflib.SequenceMatcher(None, words(final_a) + keys_a, words(final_b) + keys_b).ratio()``.
0 means the same steps in the same order (same kinds, tools and arguments) and the same
final answer word for word; 1 means nothing in common. Intermediate texts, the user's
texts and tool results do not count in it (they show in the aligned pairs), so that a
model's rewording on the way is not taken for a different run.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, TypeAlias

from replay._diff import NoiseBand, Output, distance, noise_band, word_diff, words
from replay._phrases import SENTENCE_WIDTH, counted, difference_sentences, inline_call, sentence, value_text
from soap_core import CallRecord, Context, SoapError, TextPart, ToolResultPart, ToolUsePart, canonical_json

TurnKind: TypeAlias = Literal["user", "text", "tool_call"]
PairStatus: TypeAlias = Literal["equal", "changed", "only_a", "only_b"]
StepKey: TypeAlias = tuple[str, str, str]


@dataclass(frozen=True)
class Turn:
    """One step of a branch: a user message, an assistant text, or one tool call."""

    kind: TurnKind
    """``user`` (a user message), ``text`` (an assistant text part) or ``tool_call``."""
    index: int
    """Display index of the message the step is part of (in its context)."""
    message_id: str
    """Id of that message."""
    tokens: int
    """True token count of that message (``Message.count_tokens()``); the steps of one
    message (a text and its tool calls) each carry the whole message's count."""
    text: str = ""
    """The text of a ``user`` or ``text`` step; empty for a tool call."""
    name: str | None = None
    """The tool called (``tool_call`` only)."""
    arguments: Any = field(default=None, hash=False)
    """The call's arguments as parsed JSON (the raw string if they are not JSON)."""
    call_id: str | None = None
    """The call id that ties a tool call to its result."""
    result: Any = field(default=None, hash=False)
    """The content of the tool_result part with the same call id (None: none found)."""
    result_index: int | None = None
    """Display index of the message holding the result; None when the call has none."""
    latency_s: float | None = None
    """Latency of the LLM call that produced the message, when it was recorded."""
    usage: dict[str, Any] | None = field(default=None, hash=False)
    """Usage of that call, when it was recorded."""

    @property
    def key(self) -> StepKey:
        """What aligns steps: kind, tool name and canonical JSON of the arguments."""
        if self.kind != "tool_call":
            return (self.kind, "", "")
        return (self.kind, self.name or "", canonical_json(self.arguments))

    @property
    def has_result(self) -> bool:
        return self.result_index is not None

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "index": self.index,
            "message_id": self.message_id,
            "tokens": self.tokens,
            "text": self.text,
            "name": self.name,
            "arguments": self.arguments,
            "call_id": self.call_id,
            "result": self.result,
            "result_index": self.result_index,
            "latency_s": self.latency_s,
            "usage": self.usage,
        }


def branch_turns(context: Context, start: int = 0, calls: Iterable[CallRecord] | None = None) -> list[Turn]:
    """The steps of ``context`` from display index ``start`` on (negative: from the end).

    One turn per user message, per non-empty assistant text part and per tool call, in
    display order (the parts of a message in their order). A tool call carries the
    content of the ``tool_result`` part with its call id (later in the branch). System
    prompt, tool definitions, thinking and media are not steps. ``calls`` (a session's
    call records) give each turn the latency and usage of the call that produced its
    message: the record whose ``context_id`` is this context's and whose ``message_id``
    is the message's (the last such record when there are several).
    """
    messages = context.messages
    begin = start + len(messages) if start < 0 else start
    if not 0 <= begin <= len(messages):
        raise SoapError(f"context {context.id} has {len(messages)} messages; no index {start}")
    produced: dict[str, CallRecord] = {
        c.message_id: c for c in calls or () if c.context_id == context.id and c.message_id is not None
    }
    results: dict[str, tuple[Any, int]] = {}
    for index in range(begin, len(messages)):
        for part in messages[index].content:
            if isinstance(part, ToolResultPart):
                results.setdefault(part.call_id, (part.content, index))
    turns: list[Turn] = []
    for index in range(begin, len(messages)):
        message = messages[index]
        if message.is_special:
            continue
        call = produced.get(message.id)
        common: dict[str, Any] = {
            "index": index,
            "message_id": message.id,
            "tokens": message.count_tokens(),
            "latency_s": call.latency_s if call else None,
            "usage": call.usage if call else None,
        }
        if message.role == "user":
            if any(not isinstance(p, ToolResultPart) for p in message.content):
                turns.append(Turn("user", text=message.text(), **common))
            continue
        if message.role != "assistant":
            continue
        for part in message.content:
            if isinstance(part, TextPart) and part.text.strip():
                turns.append(Turn("text", text=part.text, **common))
            elif isinstance(part, ToolUsePart):
                result, result_index = results.get(part.call_id, (None, None))
                turns.append(
                    Turn(
                        "tool_call",
                        name=part.name,
                        arguments=part.parsed_arguments(),
                        call_id=part.call_id,
                        result=result,
                        result_index=result_index,
                        **common,
                    )
                )
    return turns


# ── the distance and the noise band ───────────────────────────────────────────────────


def final_answer(turns: Sequence[Turn]) -> str:
    """The branch's final answer: its last assistant text ("" when it has none)."""
    return next((t.text for t in reversed(turns) if t.kind == "text"), "")


def branch_output(turns: Sequence[Turn]) -> Output:
    """A branch as one :class:`Output`: the final answer's words as its text, one
    ``(kind[:tool], arguments)`` per step as its tool calls. Equal outputs (``key()``)
    are exactly the branches at distance 0."""
    steps = tuple(
        (f"tool_call:{t.name}", t.arguments) if t.kind == "tool_call" else (t.kind, None) for t in turns
    )
    return Output(" ".join(words(final_answer(turns))), steps)


def branch_distance(a: Sequence[Turn], b: Sequence[Turn]) -> float:
    """0 for the same steps and final answer, up to 1 for nothing in common (see the module)."""
    return distance(branch_output(a), branch_output(b))


def branch_noise_band(branches: Sequence[Sequence[Turn]]) -> NoiseBand:
    """How much unchanged re-runs of one branch differ: :func:`replay.noise_band` over the
    branches seen as outputs. ``agreement_rate`` is the share of branches equal (distance
    0) to the most common one; ``distances`` every pairwise :func:`branch_distance`.
    With fewer than two branches there is no pair: ``distances`` is empty and ``upper`` 0."""
    return noise_band([branch_output(b) for b in branches])


# ── the diff ────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class AlignedPair:
    """One row of the alignment: a step of each branch, or of one only."""

    status: PairStatus
    """``equal``, ``changed`` (a step in both that differs), ``only_a`` or ``only_b``."""
    a: Turn | None
    """The step of the first branch (None: only in the second)."""
    b: Turn | None
    """The step of the second branch (None: only in the first)."""
    tokens_delta: int | None = None
    """``b.tokens - a.tokens`` (None unless both are present)."""
    latency_delta_s: float | None = None
    """``b.latency_s - a.latency_s`` (None unless both are known)."""
    argument_changes: tuple[str, ...] = ()
    """How a changed tool call's arguments differ, one sentence per difference (in the
    order of their paths; :func:`replay._phrases.difference_sentences`)."""
    result_changes: tuple[str, ...] = ()
    """How a changed tool call's result differs, one sentence per difference (as above)."""
    words: tuple[tuple[str, str], ...] = ()
    """Word diff of a changed user or text step (``replay.word_diff`` runs)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "a": self.a.as_dict() if self.a else None,
            "b": self.b.as_dict() if self.b else None,
            "tokens_delta": self.tokens_delta,
            "latency_delta_s": self.latency_delta_s,
            "argument_changes": list(self.argument_changes),
            "result_changes": list(self.result_changes),
            "words": [list(run) for run in self.words],
        }


@dataclass(frozen=True)
class BranchDiff:
    """Two branches aligned step by step."""

    pairs: tuple[AlignedPair, ...]
    """The alignment, in order."""
    first_divergence: int | None
    """Index into ``pairs`` of the first pair that is not equal (None: all are)."""
    divergence: str
    """That divergence in one sentence for a person (or that there is none)."""
    final_a: str
    """The first branch's final answer (its last text)."""
    final_b: str
    """The second branch's final answer."""
    final_words: tuple[tuple[str, str], ...]
    """The final answers' word diff (``replay.word_diff``)."""
    distance: float
    """:func:`branch_distance` of the two branches, in [0, 1]."""

    @property
    def identical(self) -> bool:
        """Every step equal, texts and results included."""
        return self.first_divergence is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "identical": self.identical,
            "distance": self.distance,
            "first_divergence": self.first_divergence,
            "divergence": self.divergence,
            "pairs": [p.as_dict() for p in self.pairs],
            "final_a": self.final_a,
            "final_b": self.final_b,
            "final_words": [list(run) for run in self.final_words],
        }


def diff_branches(
    a_turns: Sequence[Turn],
    b_turns: Sequence[Turn],
    *,
    names: tuple[str, str] = ("the original", "the re-run"),
) -> BranchDiff:
    """Align two branches with an LCS over the steps' keys (kind, tool, arguments).

    Steps an ``equal`` run of the matcher covers are paired (``equal``, or ``changed``
    when their texts or results differ); a ``replace`` run pairs its steps position by
    position as ``changed`` and leaves the rest of the longer side alone; ``delete`` and
    ``insert`` runs are steps of one branch only. ``names`` name the branches in the
    sentences.
    """
    a, b = list(a_turns), list(b_turns)
    matcher = difflib.SequenceMatcher(None, [t.key for t in a], [t.key for t in b], autojunk=False)
    pairs: list[AlignedPair] = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        both = min(i2 - i1, j2 - j1) if op in ("equal", "replace") else 0
        pairs += [_pair(a[i1 + k], b[j1 + k]) for k in range(both)]
        pairs += [AlignedPair("only_a", t, None) for t in a[i1 + both : i2]]
        pairs += [AlignedPair("only_b", None, t) for t in b[j1 + both : j2]]
    first = next((i for i, p in enumerate(pairs) if p.status != "equal"), None)
    final_a, final_b = final_answer(a), final_answer(b)
    return BranchDiff(
        pairs=tuple(pairs),
        first_divergence=first,
        divergence=_divergence(pairs, first, names),
        final_a=final_a,
        final_b=final_b,
        final_words=tuple(word_diff(final_a, final_b)),
        distance=branch_distance(a, b),
    )


_NO_RESULT = "(no result)"


def _result_value(turn: Turn) -> Any:
    """A result for comparing: JSON text parsed (tools often return JSON as a string)."""
    if not turn.has_result:
        return _NO_RESULT
    value = turn.result
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _same(a: Turn, b: Turn) -> bool:
    if a.key != b.key or a.text != b.text:
        return False
    return a.kind != "tool_call" or canonical_json(_result_value(a)) == canonical_json(_result_value(b))


def _pair(a: Turn, b: Turn) -> AlignedPair:
    tokens = b.tokens - a.tokens
    latency = (
        round(b.latency_s - a.latency_s, 6) if a.latency_s is not None and b.latency_s is not None else None
    )
    if _same(a, b):
        return AlignedPair("equal", a, b, tokens, latency)
    arguments: tuple[str, ...] = ()
    results: tuple[str, ...] = ()
    runs: tuple[tuple[str, str], ...] = ()
    if a.kind == "tool_call" and b.kind == "tool_call":
        if a.name != b.name:
            arguments = (f"tool changed from {a.name} to {b.name}",)
        else:
            arguments = tuple(
                difference_sentences(a.arguments, b.arguments, "argument", "the arguments", _show)
            )
            results = _result_changes(a, b)
    elif a.kind == b.kind:
        runs = tuple(word_diff(a.text, b.text))
    return AlignedPair("changed", a, b, tokens, latency, arguments, results, runs)


def _result_changes(a: Turn, b: Turn) -> tuple[str, ...]:
    """How two calls' results differ, one sentence per difference: ``result count changed
    from 3 to 4``; a result on one side only is added or removed as a whole."""
    old, new = _result_value(a), _result_value(b)
    if a.has_result != b.has_result:
        return (sentence("added" if b.has_result else "removed", "result", old, new, _show),)
    return tuple(difference_sentences(old, new, "result", "result", _show))


def _show(value: Any, width: int = SENTENCE_WIDTH) -> str:
    """A value as a person reads it in a sentence: strings quoted as Python quotes them
    (``'x'``), JSON otherwise, shortened."""
    if isinstance(value, str):
        return repr(value if len(value) <= width else value[: width - 1] + "…")
    return value_text(value, width)


def _action(turn: Turn, *, past: bool) -> str:
    """What a step did: ``called search(query='x')`` (or ``call ...`` with past=False)."""
    if turn.kind == "tool_call":
        call = inline_call(str(turn.name), turn.arguments, partial(_show, width=40))
        return f"{'called' if past else 'call'} {call}"
    if turn.kind == "text":
        return f"{'wrote' if past else 'write'} {_show(turn.text)}"
    return f"{'had' if past else 'have'} the user say {_show(turn.text)}"


def _divergence(pairs: Sequence[AlignedPair], first: int | None, names: tuple[str, str]) -> str:
    name_a, name_b = names
    if first is None:
        return "the two branches take the same steps and give the same final answer"
    pair = pairs[first]
    number = first + 1
    if pair.a is not None and pair.b is not None:
        if pair.a.key == pair.b.key and pair.a.kind == "tool_call":
            changes = pair.result_changes
            more = f" (and {counted(len(changes) - 1, 'more difference')})" if len(changes) > 1 else ""
            detail = changes[0] if changes else "the result differs"
            return f"turn {number}: both {_action(pair.a, past=True)}, but {detail}{more}"
        return f"turn {number}: {name_a} {_action(pair.a, past=True)}, {name_b} {_action(pair.b, past=True)}"
    owner, missing = (name_a, name_b) if pair.a is not None else (name_b, name_a)
    step = pair.a if pair.a is not None else pair.b
    assert step is not None
    rest = pairs[first:]
    in_owner = sum(1 for p in rest if (p.a if pair.a is not None else p.b) is not None)
    missing_ends = all((p.b if pair.a is not None else p.a) is None for p in rest)
    if missing_ends:
        more = f" (and {counted(in_owner - 1, 'more step')})" if in_owner > 1 else ""
        stop = f"stops after turn {first}" if first else "takes no step"
        return f"{missing} {stop}; {owner} went on to {_action(step, past=False)}{more}"
    return f"turn {number}: {owner} {_action(step, past=True)}, {missing} has no such step"
