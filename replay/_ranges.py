"""Message numbers as a person types and reads them: ``0, 3-9, 14990-``.

A replay of a long request edits or drops messages by display index; naming fifteen
thousand of them one by one is no way to leave out the old history of a 100,000-message
context. The page, the command line and the names of replay forks all read and write
indices through this one notation, so what one of them prints another accepts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from soap_core import SoapError

_ITEM = re.compile(r"^(\d+)(?:-(\d*))?$")


class MessageRangeError(SoapError):
    """A message range that names no messages of the request (with which item and why)."""


def parse_message_ranges(
    spec: str, count: int, *, noun: str = "message", holder: str = "the request"
) -> list[int]:
    """The indices ``spec`` names among ``count`` messages, ascending and once each.

    Items are separated by commas or spaces: ``N`` one message, ``A-B`` both ends
    included, ``A-`` from A to the last message. A ``#`` before a number is allowed, as
    the page and the fork names print them. An empty spec names nothing. Anything else,
    a reversed range or a message past the last, raises :class:`MessageRangeError`
    (``noun`` and ``holder`` name what is numbered in it: calls of the session, say).
    """
    chosen: set[int] = set()
    tidy = re.sub(r"\s*[-–]\s*", "-", spec.replace("#", ""))
    for item in re.split(r"[,\s]+", tidy):
        if not item:
            continue
        match = _ITEM.match(item) if item.isascii() else None
        if match is None:
            raise MessageRangeError(f"{item!r} is not a {noun} number or a range like 3-9")
        first = int(match[1])
        last = first if match[2] is None else (int(match[2]) if match[2] else count - 1)
        if max(first, last) >= count:
            raise MessageRangeError(f"{item!r}: {holder} has {count:,} {noun}s, numbered 0 to {count - 1:,}")
        if last < first:
            raise MessageRangeError(f"{item!r} runs backwards: write the smaller number first")
        chosen.update(range(first, last + 1))
    return sorted(chosen)


def message_ranges_text(indices: Iterable[int], mark: str = "#") -> str:
    """``indices`` as the fewest items :func:`parse_message_ranges` reads back:
    ``#0, #3-#9`` (``0, 3-9`` with no ``mark``). Runs of three or more become a range."""
    ordered = sorted(set(indices))
    items: list[str] = []
    start = 0
    for end in range(len(ordered)):
        if end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            continue
        run = ordered[start : end + 1]
        if len(run) >= 3:
            items.append(f"{mark}{run[0]}-{mark}{run[-1]}")
        else:
            items.extend(f"{mark}{i}" for i in run)
        start = end + 1
    return ", ".join(items)
