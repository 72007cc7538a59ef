"""Differences as a person reads them, in one grammar for the pages and the command line.

DeepDiff's findings between two JSON values become one sentence each, in the order of
their paths (DeepDiff's own order changes from run to run): ``argument tags[0] added:
"x"``, ``… removed (was "x")``, ``… changed from "x" to "y"``, ``… changed from 1 (a
number) to "1" (text)``. :func:`difference_sentences` takes the renderer of the values:
output diffs quote them as JSON (:func:`value_text`), the branch diff as Python (``'x'``).

An output reads as its text and its tool calls, each call as its name and one line per
argument; two outputs are word-diffed as that text, and :func:`output_sentences` says what
changed. Calls are paired by name in order (a longest common subsequence), so one call
added in the middle reads as one call added, not as every later call changed.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

from deepdiff import DeepDiff

from replay._diff import Output, word_diff

SENTENCE_WIDTH = 60
"""Longest rendering of one value inside a sentence."""
ORIGINAL_AND_RUN = ("the original", "the run")
EMPTY_OUTPUTS = "(both outputs are empty: no text and no tool calls)"

ToolCall = tuple[str, Any]
Show = Callable[[Any], str]  # how a sentence renders one value


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def value_text(value: Any, width: int | None = None) -> str:
    """A JSON value as a person reads it: strings in double quotes, the rest as JSON;
    cut to ``width`` characters (with …) when given."""
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        text = repr(value)
    if width is not None and len(text) > width:
        return text[: width - 1] + "…"
    return text


_as_json: Show = partial(value_text, width=SENTENCE_WIDTH)


# ── differences as sentences ──────────────────────────────────────────────────────────


def path_text(steps: Sequence[Any]) -> str:
    """DeepDiff's path list as a person writes it: ``['filters', 'tags', 0]`` → ``filters.tags[0]``."""
    out = ""
    for step in steps:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out


_KINDS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "true/false"),  # before int, which bool is a kind of
    ((int, float), "a number"),
    (str, "text"),
    (list, "a list"),
    (dict, "an object"),
)


def kind_of(value: Any) -> str:
    if value is None:
        return "null"
    return next((name for types, name in _KINDS if isinstance(value, types)), type(value).__name__)


def sentence(kind: str, subject: str, old: Any, new: Any, show: Show) -> str:
    """One difference of ``subject`` as a sentence. ``kind`` is DeepDiff's report type
    (``values_changed``, ``type_changes``, ``…_added``, ``…_removed``, …) or just
    ``added``/``removed`` for a whole value on one side only."""
    if kind.endswith("added"):
        return f"{subject} added: {show(new)}"
    if kind.endswith("removed"):
        return f"{subject} removed (was {show(old)})"
    if kind == "type_changes":
        return f"{subject} changed from {show(old)} ({kind_of(old)}) to {show(new)} ({kind_of(new)})"
    if kind == "values_changed":
        return f"{subject} changed from {show(old)} to {show(new)}"
    return f"{subject} differs ({kind.replace('_', ' ')})"


def difference_sentences(old: Any, new: Any, item: str, whole: str, show: Show) -> list[str]:
    """What DeepDiff finds between ``old`` and ``new``, one sentence per finding, in the
    order of the findings' paths. A finding inside the values is about ``{item} {path}``
    (``argument filters.tags[0]``), one about the values themselves about ``whole``."""
    found = DeepDiff(old, new, view="tree")
    sentences: list[tuple[str, str]] = []
    for kind, levels in found.items():
        for level in levels:
            path = path_text(level.path(output_format="list"))
            subject = f"{item} {path}" if path else whole
            sentences.append((path, sentence(kind, subject, level.t1, level.t2, show)))
    return [text for _, text in sorted(sentences)]


def argument_sentences(old: Any, new: Any) -> list[str]:
    """How two calls' arguments differ, their values as JSON: ``argument q changed from "x" to "y"``."""
    return difference_sentences(old, new, "argument", "the arguments", _as_json)


# ── outputs as text ────────────────────────────────────────────────────────────────

_WORD_MARKS = {"equal": "{}", "delete": "[-{}-]", "insert": "{{+{}+}}"}


def marked_runs(words: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Each run of a word diff (``replay.word_diff``) with its op and the marks git's word
    diff gives it: ``("delete", "[-cat-]")``, ``("insert", "{+dog+}")``, ``("equal", "sat")``."""
    return [(op, _WORD_MARKS[op].format(text)) for op, text in words]


def marked_words(words: Iterable[tuple[str, str]]) -> str:
    """A word diff as plain text: ``[-deleted-]`` and ``{+inserted+}``, as git's word diff."""
    return " ".join(marked for _, marked in marked_runs(words))


def _pretty(value: Any) -> str:
    """A value over several lines when it is an object or a list, indented under its name."""
    if isinstance(value, (dict, list)) and value:
        return json.dumps(value, ensure_ascii=False, indent=2).replace("\n", "\n    ")
    return value_text(value)


def call_text(number: int, name: str, arguments: Any) -> str:
    """One tool call as text: ``tool call 1: search`` then one ``name = value`` line per
    argument (arguments that are no JSON object are shown as they came)."""
    lines = [f"tool call {number}: {name}"]
    if isinstance(arguments, dict):
        lines += [f"  {key} = {_pretty(value)}" for key, value in arguments.items()]
        if not arguments:
            lines.append("  (no arguments)")
    elif isinstance(arguments, str):
        lines.append(f"  arguments (not JSON): {arguments}")
    else:
        lines.append(f"  arguments: {_pretty(arguments)}")
    return "\n".join(lines)


def call_texts(output: Output) -> list[str]:
    return [call_text(number, name, args) for number, (name, args) in enumerate(output.tool_calls, start=1)]


def output_text(output: Output) -> str:
    """The whole output as one text: its text, then each tool call as :func:`call_text`."""
    return "\n\n".join(part for part in (output.text, *call_texts(output)) if part)


def output_words(a: Output, b: Output) -> list[tuple[str, str]]:
    """The word diff of two outputs as text (tool calls and their arguments included)."""
    return word_diff(output_text(a), output_text(b))


def marked_output(a: Output, b: Output) -> str:
    """:func:`output_words` marked as git's word diff marks it, or that both are empty."""
    return marked_words(output_words(a, b)) or EMPTY_OUTPUTS


def inline_call(name: str, arguments: Any, show: Show = _as_json) -> str:
    """A call inside a sentence: ``search(query="x", limit=5)``, its values as ``show``
    renders them (as JSON by default)."""
    if isinstance(arguments, dict):
        return f"{name}({', '.join(f'{key}={show(value)}' for key, value in arguments.items())})"
    return f"{name}({show(arguments)})"


# ── outputs' differences as sentences ─────────────────────────────────────────────────


def _call_pairs(a: Sequence[ToolCall], b: Sequence[ToolCall]) -> list[tuple[int | None, int | None]]:
    """Positions of ``a`` and ``b`` paired by name in order; None for a call on one side."""
    matcher = difflib.SequenceMatcher(None, [c[0] for c in a], [c[0] for c in b], autojunk=False)
    pairs: list[tuple[int | None, int | None]] = []
    for _, i1, i2, j1, j2 in matcher.get_opcodes():
        both = min(i2 - i1, j2 - j1)
        pairs += [(i1 + k, j1 + k) for k in range(both)]
        pairs += [(i, None) for i in range(i1 + both, i2)]
        pairs += [(None, j) for j in range(j1 + both, j2)]
    return pairs


def tool_call_sentences(
    a: Sequence[ToolCall], b: Sequence[ToolCall], names: tuple[str, str] = ORIGINAL_AND_RUN
) -> list[str]:
    """How the tool calls of ``b`` differ from those of ``a``, for a person: calls are
    numbered as ``b`` makes them (a removed call as ``a`` made it)."""
    sentences: list[str] = []
    for i, j in _call_pairs(a, b):
        if i is not None and j is not None:
            (old_name, old_args), (new_name, new_args) = a[i], b[j]
            where = f"tool call {j + 1}" + (f" ({i + 1} in {names[0]})" if i != j else "")
            if old_name != new_name:
                sentences.append(
                    f"{where} changed from {inline_call(old_name, old_args)} to {inline_call(new_name, new_args)}"
                )
            else:
                sentences += [f"{where} {new_name}: {s}" for s in argument_sentences(old_args, new_args)]
        elif j is not None:
            name, args = b[j]
            sentences.append(f"tool call {j + 1} {name} added: {inline_call(name, args)}")
        elif i is not None:
            name, args = a[i]
            sentences.append(f"tool call {i + 1} {name} removed (was {inline_call(name, args)})")
    return sentences


def text_sentence(a: str, b: str, names: tuple[str, str] = ORIGINAL_AND_RUN) -> str | None:
    """How the texts differ in a few words (None when both are empty)."""
    if not a.strip() and not b.strip():
        return None
    if a == b:
        return "text: the same"
    if not a.strip():
        return f"text added: {counted(len(b.split()), 'word')} ({names[0]} had no text)"
    if not b.strip():
        return f"text removed: {names[1]} has none ({names[0]} had {counted(len(a.split()), 'word')})"
    runs = word_diff(a, b)
    removed = sum(len(text.split()) for op, text in runs if op == "delete")
    added = sum(len(text.split()) for op, text in runs if op == "insert")
    if not removed and not added:
        return "text: the same words (only the spacing differs)"
    return f"text changed: {counted(removed, 'word')} removed, {added} added"


def output_sentences(a: Output, b: Output, names: tuple[str, str] = ORIGINAL_AND_RUN) -> list[str]:
    """Everything that differs between two outputs, in sentences (one when nothing does)."""
    if a.key() == b.key():
        if not a.text and not a.tool_calls:
            return [EMPTY_OUTPUTS]
        return [f"{names[1]} is the same as {names[0]}: the same text and tool calls"]
    sentences = [s for s in (text_sentence(a.text, b.text, names),) if s is not None]
    calls_a, calls_b = list(a.tool_calls), list(b.tool_calls)
    if calls_a or calls_b:
        if calls_a and calls_b and len(calls_a) != len(calls_b):  # with none on a side, the calls say it
            sentences.append(
                f"{names[1]} makes {counted(len(calls_b), 'tool call')}, {names[0]} made {len(calls_a)}"
            )
        changes = tool_call_sentences(calls_a, calls_b, names)
        sentences += changes or [f"tool calls: the same ({len(calls_a)})"]
    return sentences


# ── the rows of a context diff ────────────────────────────────────────────────────────


def _row_output(row: dict[str, Any] | None) -> Output:
    if row is None:
        return Output("")
    return Output(str(row["text"]), tuple((str(name), args) for name, args in row["tool_calls"]))


def row_changes(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str:
    """How one differing row of a context diff (:attr:`replay.ContextDiff.rows`) differs,
    in sentences (text and tool calls; a message on one side only says so)."""
    if a is None or b is None:
        return "only in B" if a is None else "only in A"
    left, right = _row_output(a), _row_output(b)
    changes = [f"role changed from {a['role']} to {b['role']}"] if a["role"] != b["role"] else []
    if left.key() != right.key():
        changes += output_sentences(left, right, ("A", "B"))
    elif not changes:
        changes.append(
            "same text and tool calls; other parts differ (tool definitions, a tool result, thinking or media)"
        )
    return "; ".join(changes)
