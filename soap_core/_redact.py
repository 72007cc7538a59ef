"""Keeping API keys out of what the runtime stores and prints.

A server may echo a request's ``Authorization`` header in an error body (some proxies
and mock servers do), and the ``openai`` client puts that body into its exception's
message: a call record, an invocation record, ``session.json``'s last error or a line on
stderr would then hold the key. :func:`redact` removes from a text

* every key this process was configured with (:func:`remember_secret`; an
  :class:`~soap_core.runtime.LLMEndpoint` registers its own), also in the escaped forms
  a JSON or URL echo gives it, and
* the value of any ``Authorization`` header or ``Bearer`` credential, whoever's it is.

Keys are kept in memory only, in this module.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from typing import Any

REDACTED = "[REDACTED]"
_MIN_SECRET = 6
"""Shorter "keys" (a placeholder such as ``none``) would blank out ordinary words."""

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


def _forms(secret: str) -> set[str]:
    """The ways a key shows up in an echo: as is, JSON-escaped, URL-encoded."""
    return {secret, json.dumps(secret)[1:-1], urllib.parse.quote(secret, safe=""), urllib.parse.quote(secret)}


def redact(text: str, *extra: str | None) -> str:
    """``text`` without any remembered key, any of ``extra``, or any credential value
    following ``Authorization`` or ``Bearer``."""
    with _lock:
        secrets = set(_secrets)
    secrets.update(s for s in extra if s and len(s) >= _MIN_SECRET)
    for secret in sorted(secrets, key=len, reverse=True):
        for form in sorted(_forms(secret), key=len, reverse=True):
            if form in text:
                text = text.replace(form, REDACTED)
    text = _HEADER.sub(lambda m: f"{m[1]}{m[2] + ' ' if m[2] else ''}{REDACTED}", text)
    return _BEARER.sub(lambda m: f"{m[1]}{m[2]}{REDACTED}" if m[3] != REDACTED else m[0], text)


def redact_value(value: Any, *extra: str | None) -> Any:
    """A JSON value with every remembered key (and ``extra``) removed from its strings;
    only exact keys, not credential patterns (a model's answer may discuss "Bearer
    tokens"). The value itself is returned when nothing had to change."""
    with _lock:
        secrets = [s for s in (*_secrets, *(e for e in extra if e)) if len(s) >= _MIN_SECRET]
    if not secrets:
        return value
    forms = sorted({f for s in secrets for f in _forms(s)}, key=len, reverse=True)

    def clean(item: Any) -> Any:
        if isinstance(item, str):
            for form in forms:
                if form in item:
                    item = item.replace(form, REDACTED)
            return item
        if isinstance(item, list):
            return [clean(v) for v in item]
        if isinstance(item, dict):
            return {clean(k) if isinstance(k, str) else k: clean(v) for k, v in item.items()}
        return item

    return clean(value)
