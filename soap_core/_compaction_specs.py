"""The one vocabulary of compaction strategies: ``KIND[:NUMBER[:NUMBER]]`` and its rule.

The runtime's hooks, the lab's simulated strategies, the pages and the CLI all name a
strategy by its spec (``rolling-tokens:60000:0.5``, ``rolling-messages:40``,
``summarize:1300:4``); the call log records the spec of the strategy in force. The
kinds, their numbers, their defaults and which messages each keeps (the rule of
``Context``'s windows, the runtime's hooks and the lab) are here and nowhere else.

Call records written before the spec (``soapwb.call/1``) hold the strategy's Python
repr; :func:`spec_of_repr` reads those once, when a record is upgraded.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

DEFAULTS: dict[str, tuple[float | int, ...]] = {
    "rolling-tokens": (60_000, 0.5),
    "rolling-messages": (40,),
    "summarize": (60_000, 4),
    "strip-thinking": (),
    "least-used": (60_000, 0.5),
    "none": (),
    "context-budget": (),
}
"""Each kind and the numbers it takes, at their defaults: a token threshold and the share
kept; a number of messages; a token threshold and the messages kept whole. ``least-used``
is the lab's alone (it drops by what the answers used, which only attributions tell)."""
_FLOATS = {("rolling-tokens", 1), ("least-used", 1)}
"""The numbers that are shares (the rest count tokens or messages)."""
GRAMMAR = (
    "rolling-tokens:T[:KEEP], rolling-messages:N, strip-thinking, summarize[:T[:KEEP_LAST]], "
    "least-used[:T[:KEEP]] or none"
)
T = TypeVar("T")
_Of = Callable[[T], int]
"""A number a rule reads off one message of a view: its tool group, its tokens."""


@dataclass(frozen=True)
class CompactionSpec:
    """A strategy by its kind and numbers (defaults filled in): ``str()`` is its spec,
    :meth:`kept` its rule."""

    kind: str
    numbers: tuple[float | int, ...] = ()

    def __str__(self) -> str:
        return spec_text(self.kind, self.numbers)

    @property
    def threshold(self) -> float | int | None:
        """The tokens a context must be over for the strategy to act (None: any size)."""
        return self.numbers[0] if self.kind in ("rolling-tokens", "summarize", "least-used") else None

    def kept(self, view: Sequence[T], group: _Of[T], cost: _Of[T], total: int, start: int = 0) -> int | None:
        """Where the part of ``view[start:]`` the strategy keeps starts, None when it
        leaves the view as it is. ``view``: the non-special messages oldest first, a tool
        group's together; ``total``: their tokens and the specials'. Over its threshold,
        whole groups go from the old end until at most ``int(T * KEEP)`` tokens (the
        newest group even over it) or N (KEEP_LAST) messages are left; only the dropped
        messages' costs are read, so a caller keeping its view and total pays once each."""
        if self.kind == "least-used":
            raise ValueError("least-used drops by the answers' attributions, not from the old end")
        threshold, by_tokens = self.threshold, self.kind == "rolling-tokens"
        if not self.numbers or (threshold is not None and total <= threshold):
            return None  # the kinds without numbers drop nothing
        limit = int(self.numbers[0] * self.numbers[1]) if by_tokens else int(self.numbers[-1])
        if limit < 0 and not by_tokens:
            raise ValueError(f"{self}: the number of messages kept must be >= 0")
        first, end = start, len(view)
        while first < end and (total if by_tokens else end - first) > limit:
            if by_tokens and group(view[first]) == group(view[end - 1]):
                break  # a model not asked the question is worse than one over budget
            after = next((i for i in range(first + 1, end) if group(view[i]) != group(view[first])), end)
            total -= sum(cost(view[i]) for i in range(first, after)) if by_tokens else 0
            first = after
        return first if first > start or (by_tokens and total > limit) else None


def spec_text(kind: str, numbers: tuple[float | int, ...] | list[float | int]) -> str:
    """``kind`` with its numbers: ``rolling-tokens:600:0.5`` (shares without a trailing 0)."""
    return ":".join([kind, *(f"{n:g}" if isinstance(n, float) else str(n) for n in numbers)])


def parse_spec(text: str) -> CompactionSpec:
    """The spec ``text`` names, its missing numbers at their defaults; ValueError saying
    what is wrong and what the grammar is."""
    kind, *args = text.split(":")
    defaults = DEFAULTS.get(kind)
    if defaults is None or len(args) > len(defaults):
        raise ValueError(f"unknown strategy {text!r}: use {GRAMMAR}")
    numbers: list[float | int] = list(defaults)
    try:
        for i, arg in enumerate(args):
            numbers[i] = float(arg) if (kind, i) in _FLOATS else int(arg)
    except ValueError:
        raise ValueError(f"bad numbers in strategy {text!r}") from None
    return CompactionSpec(kind, tuple(numbers))


_REPRS = (
    (re.compile(r"RollingTokenWindow\(threshold=(\d+), keep=([0-9.]+)\)"), "rolling-tokens"),
    (re.compile(r"RollingSequenceWindow\(n=(\d+)\)"), "rolling-messages"),
    (re.compile(r"Summarize\(.*threshold=(\d+), keep_last=(\d+)\)"), "summarize"),
    (re.compile(r"ContextBudget\(\)"), "context-budget"),
)
"""The reprs the runtime's strategies had in ``soapwb.call/1`` records."""


def spec_of_repr(recorded: str) -> str | None:
    """The spec of a strategy recorded by its repr (a ``soapwb.call/1`` record), or None
    for a strategy the runtime does not ship (a user's own hook)."""
    for pattern, kind in _REPRS:
        found = pattern.fullmatch(recorded)
        if found:
            numbers = [float(n) if "." in n else int(n) for n in found.groups()]
            return spec_text(kind, numbers)
    return None


def recorded_spec(recorded: str) -> CompactionSpec | None:
    """The spec a call record's ``compaction`` names: a spec, or an old record's repr
    of one of the runtime's strategies; None for anything else (a user's own hook)."""
    try:
        return parse_spec(recorded)
    except ValueError:
        old = spec_of_repr(recorded)
        return parse_spec(old) if old is not None else None
