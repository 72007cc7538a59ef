"""Keeping API keys out of what the runtime stores and prints.

A server may echo a request's ``Authorization`` header in an error body (some proxies
and mock servers do), and the ``openai`` client puts that body into its exception's
message: a call record, an invocation record, ``session.json``'s last error or a line on
stderr would then hold the key. :func:`redact` removes from a text

* every key this process was configured with (:func:`remember_secret`; an
  :class:`~soap_core.runtime.LLMEndpoint` registers its own), also in the encoded forms
  an echo may give it: in any case (upper, lower, mixed) and reversed, with any of its
  characters URL-encoded (``%2D``), written as an HTML entity (``&#45;``, ``&#x2d;``,
  ``&period;``) or as a JSON escape (``\\u002d``), and base64-encoded (standard and
  URL-safe alphabets, padded or not, and at each of the three byte offsets, so the key
  is found inside the base64 of a larger text such as ``Authorization: Bearer <key>``),
  and
* the value of any ``Authorization`` header or ``Bearer`` credential, whoever's it is.

The forms of a set of keys are built once for that set (:func:`_forms_of`): one
expression per key and direction, which the regular expression engine scans for at C
speed, and a few base64 pieces found by substring search.

Keys are kept in memory only, in this module.
"""

from __future__ import annotations

import base64
import functools
import html.entities
import re
import threading
from dataclasses import dataclass
from typing import Any

REDACTED = "[REDACTED]"
_MIN_SECRET = 6
"""Shorter "keys" (a placeholder such as ``none``) would blank out ordinary words."""
_MIN_BASE64 = 8
"""Base64 pieces shorter than this (a key of 6 bytes at an odd offset) are left out:
they would match inside unrelated base64 data (an image)."""
_ENTITY_NAMES: dict[str, list[str]] = {}
for _name, _char in html.entities.html5.items():
    _ENTITY_NAMES.setdefault(_char, []).append(_name)

_secrets: set[str] = set()
_lock = threading.Lock()

_HEADER = re.compile(
    r"""(?ix)
    (\bauthorization\b \\?["']? \s* [:=] \s* \\?["']? \s*)   # the header name and separator
    (?:(bearer|basic|token)\s+)?                            # a scheme, kept
    ([^\s"'\\,;}\]]+)                                       # the credential
    """
)
_BEARER = re.compile(r"(?i)\b(bearer)(\s+)([A-Za-z0-9._~+/=:-]{6,})")


def remember_secret(secret: str | None) -> None:
    """Redact ``secret`` from every text :func:`redact` sees in this process."""
    if secret and len(secret) >= _MIN_SECRET:
        with _lock:
            _secrets.add(secret)


def _cases(char: str) -> list[str]:
    return [v for v in dict.fromkeys((char, char.lower(), char.upper())) if len(v) == 1]


def _anycase(text: str) -> str:
    """A pattern for ``text`` in any case, character by character."""
    out = []
    for char in text:
        cases = _cases(char)
        out.append(re.escape(char) if len(cases) == 1 else f"[{''.join(map(re.escape, cases))}]")
    return "".join(out)


def _char_forms(char: str) -> str:
    """A pattern for one character of a key: itself in any case, URL-encoded, an HTML
    entity (decimal, hex or named) or a JSON escape. Each alternative starts with one
    literal character, so the engine skips, at C speed, every position where none of
    them can start (a ``(?i)`` flag would stop it doing that)."""
    point = ord(char)
    forms = [re.escape(case) for case in _cases(char)]
    forms.append("".join(f"%{_anycase(f'{byte:02x}')}" for byte in char.encode("utf-8", "surrogatepass")))
    forms += [f"&\\#0*{point};?", f"&\\#[xX]0*{_anycase(f'{point:x}')};?"]
    forms += [re.escape(f"&{name}") for name in _ENTITY_NAMES.get(char, ())]
    units = char.encode("utf-16-be", "surrogatepass").hex()
    forms.append("".join(f"\\\\[uU]{_anycase(units[i : i + 4])}" for i in range(0, len(units), 4)))
    if char in '"\\/':
        forms.append(re.escape(f"\\{char}"))
    if char == " ":
        forms.append(r"\+")
    return f"(?:{'|'.join(forms)})"


_URLSAFE = str.maketrans("+/", "-_")


def _base64_forms(secret: str) -> set[str]:
    """The base64 text of ``secret`` wherever it starts in a larger text: for each of
    the three byte offsets, the characters that encode the key's bytes alone (and the
    whole encoding with its padding, for the key at the end); both alphabets."""
    data = secret.encode("utf-8", "surrogatepass")
    forms: set[str] = set()
    for offset, first in ((0, 0), (1, 2), (2, 3)):  # the first character owing nothing to the prefix
        encoded = base64.b64encode(b"\0" * offset + data).decode("ascii")
        full_groups = 4 * ((offset + len(data)) // 3)
        for form in (encoded[first:full_groups], encoded[first:], encoded[first:].rstrip("=")):
            if len(form.rstrip("=")) >= _MIN_BASE64:
                forms.update((form, form.translate(_URLSAFE)))
    return forms


@dataclass(frozen=True)
class _Forms:
    """Every form of a set of keys, built once for that set: one expression per key and
    direction (forwards, reversed), the base64 pieces (longest first, found by substring
    search), and, when every key is plain ASCII, the keys lower-cased: a text with no
    ``%``, ``&`` or backslash can only hold a key as it is, in some case, which a
    substring search of the lower-cased text rules out without the expressions."""

    patterns: tuple[re.Pattern[str], ...]
    pieces: tuple[str, ...]
    lowered: tuple[str, ...] | None

    def sub(self, text: str) -> str:
        encoded = "%" in text or "&" in text or "\\" in text
        if encoded or self.lowered is None or any(k in text.lower() for k in self.lowered):
            for pattern in self.patterns:
                text = pattern.sub(REDACTED, text)
        for piece in self.pieces:
            if piece in text:
                text = text.replace(piece, REDACTED)
        return text


@functools.lru_cache(maxsize=64)
def _forms_of(secrets: frozenset[str]) -> _Forms:
    ordered = sorted(secrets, key=lambda s: (-len(s), s))
    directions = [chars for secret in ordered for chars in dict.fromkeys((secret, secret[::-1]))]
    patterns = tuple(re.compile("".join(_char_forms(c) for c in chars)) for chars in directions)
    pieces = sorted({f for secret in ordered for f in _base64_forms(secret)}, key=lambda f: (-len(f), f))
    plain = all(secret.isascii() and " " not in secret for secret in ordered)
    lowered = tuple(chars.lower() for chars in directions) if plain else None
    return _Forms(patterns, tuple(pieces), lowered)


def _secret_forms(extra: tuple[str | None, ...]) -> _Forms | None:
    with _lock:
        secrets = set(_secrets)
    secrets.update(s for s in extra if s and len(s) >= _MIN_SECRET)
    return _forms_of(frozenset(secrets)) if secrets else None


def redact(text: str, *extra: str | None) -> str:
    """``text`` without any remembered key, any of ``extra``, or any credential value
    following ``Authorization`` or ``Bearer``."""
    forms = _secret_forms(extra)
    if forms is not None:
        text = forms.sub(text)
    lowered = text.lower()  # the two case-blind expressions cannot skip ahead: looked for first
    if "authorization" in lowered:
        text = _HEADER.sub(lambda m: f"{m[1]}{m[2] + ' ' if m[2] else ''}{REDACTED}", text)
    if "bearer" in lowered:
        text = _BEARER.sub(lambda m: f"{m[1]}{m[2]}{REDACTED}" if m[3] != REDACTED else m[0], text)
    return text


def redact_value(value: Any, *extra: str | None) -> Any:
    """A JSON value with every remembered key (and ``extra``) removed from its strings;
    only exact keys, not credential patterns (a model's answer may discuss "Bearer
    tokens"). The value itself is returned when nothing had to change."""
    forms = _secret_forms(extra)
    if forms is None:
        return value

    def clean(item: Any) -> Any:
        if isinstance(item, str):
            return forms.sub(item)
        if isinstance(item, list):
            return [clean(v) for v in item]
        if isinstance(item, dict):
            return {clean(k) if isinstance(k, str) else k: clean(v) for k, v in item.items()}
        return item

    return clean(value)
