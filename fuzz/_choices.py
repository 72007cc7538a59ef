"""Where the choices of a fuzz case come from.

A mutation is a handful of choices (which store, which file, which value, which
change). Drawn through a :class:`Chooser`, the same mutation code runs under hypothesis
(which then shrinks a failing case to a small one) and under a seeded
``random.Random`` (cheap, and replayable from the seed alone).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Chooser(Protocol):
    def integer(self, low: int, high: int) -> int:
        """An integer in ``[low, high]``; small ones are the simpler choice."""
        ...

    def choice(self, items: Sequence[T]) -> T: ...


class RandomChooser:
    """Choices from a seeded ``random.Random``."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def choice(self, items: Sequence[T]) -> T:
        return items[self.rng.randrange(len(items))]


class HypothesisChooser:
    """Choices drawn from hypothesis' ``st.data()``: a failure shrinks towards the first
    item of each list and the lowest integer."""

    def __init__(self, data: Any) -> None:
        from hypothesis import strategies as st

        self._data = data
        self._st = st

    def integer(self, low: int, high: int) -> int:
        return int(self._data.draw(self._st.integers(low, high)))

    def choice(self, items: Sequence[T]) -> T:
        return items[self.integer(0, len(items) - 1)]
