"""Names and text as a terminal can safely show them, and names as a user types them back.

* **Control characters are shown, never sent.** A message, a file name or an id may hold
  ESC, BEL, DEL or a C1 control (U+0080..U+009F, ``U+009B`` being a one-character CSI):
  written raw they clear the screen, recolour it, set the window title or plant a link.
  :func:`escape_controls` shows each one as a visible ``\\xHH`` instead; tab and newline
  are kept, since they only lay text out.
* **Twin names are told apart.** Two role folders may be different strings that print
  the same (``Café`` composed and ``Cafe`` + U+0301 decomposed, a name with a zero-width
  character): :func:`distinct_names` shows such twins with their combining marks and
  invisible characters escaped (``Cafe\\u0301``), and a backslash as ``\\\\``, so no two
  twins print alike.
* **What is shown can be typed back.** :func:`unescape` reads those escapes, and
  :func:`pick_role` takes a role as typed, as the output showed it, or in another
  Unicode normalization when that names one role only.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection, Iterable

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""C0 but tab and newline, DEL, C1: what :func:`escape_controls` shows escaped."""
_ESCAPE = re.compile(r"\\(?:\\|x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8})")
_SHOWN_ASCII = bytes([0x09, 0x0A, *range(0x20, 0x7F)])
"""The ASCII bytes :func:`escape_controls` leaves as they are."""
_HIDDEN_CATEGORIES = ("M", "C", "Z")
"""Marks, controls/format characters, separators: what can make two names look alike."""


def _hex(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def escape_controls(text: str) -> str:
    """``text`` with every control character but tab and newline (C0, DEL, C1) shown as
    a visible ``\\xHH`` escape; the same string when it holds none.

    ASCII text is checked by deleting the bytes it may hold (a listing's 4 MB of JSON in
    1 ms, where the pattern's scan takes 15)."""
    if text.isascii() and not text.encode("ascii").translate(None, _SHOWN_ASCII):
        return text
    return _CONTROL.sub(_hex, text) if _CONTROL.search(text) else text


def _code(char: str) -> str:
    point = ord(char)
    return f"\\x{point:02x}" if point < 0x100 else f"\\u{point:04x}" if point < 0x10000 else f"\\U{point:08x}"


def _look(name: str) -> str:
    """What a terminal shows of ``name``, near enough: composed, controls escaped,
    invisible (format) characters gone."""
    shown = unicodedata.normalize("NFC", escape_controls(name))
    return "".join(c for c in shown if unicodedata.category(c) != "Cf")


def _marked(name: str, *, every_non_ascii: bool = False) -> str:
    """``name`` with a backslash doubled and each mark, control, format character or
    unusual separator (or, ``every_non_ascii``, each character past ASCII) escaped:
    an injective form, which :func:`unescape` reads back."""
    out = []
    for char in name:
        if char == "\\":
            out.append("\\\\")
        elif char.isascii():
            out.append(char if char.isprintable() else _code(char))
        elif every_non_ascii or unicodedata.category(char)[0] in _HIDDEN_CATEGORIES:
            out.append(_code(char))
        else:
            out.append(char)
    return "".join(out)


def distinct_names(names: Iterable[str]) -> dict[str, str]:
    """Each of ``names`` -> how text output shows it: the name itself, unless another of
    ``names`` would print the same way; then both are shown marked (``Cafe\\u0301``)."""
    groups: dict[str, list[str]] = {}
    for name in dict.fromkeys(names):
        groups.setdefault(_look(name), []).append(name)
    shown: dict[str, str] = {}
    for twins in groups.values():
        if len(twins) == 1:
            shown[twins[0]] = twins[0]
            continue
        marked = {name: _marked(name) for name in twins}
        if len({_look(m) for m in marked.values()}) < len(twins):  # alike even so (U+212B, U+00C5)
            marked = {name: _marked(name, every_non_ascii=True) for name in twins}
        shown.update(marked)
    return shown


def unescape(text: str) -> str:
    """``text`` with the escapes the output uses (``\\\\``, ``\\xHH``, ``\\uHHHH``,
    ``\\UHHHHHHHH``) read back; any other backslash is kept as it is."""

    def one(match: re.Match[str]) -> str:
        code = match.group()
        return "\\" if code == "\\\\" else chr(min(int(code[2:], 16), 0x10FFFF))

    return _ESCAPE.sub(one, text) if "\\" in text else text


def pick_role(spelled: str, roles: Collection[str]) -> str | None:
    """The one of ``roles`` that ``spelled`` names: exactly, as the text output shows it
    (escapes read back), or else the only role equal to it once both are in NFC."""
    if spelled in roles:
        return spelled
    typed = unescape(spelled)
    if typed in roles:
        return typed
    wanted = unicodedata.normalize("NFC", typed)
    same = [r for r in roles if unicodedata.normalize("NFC", r) == wanted]
    return same[0] if len(same) == 1 else None
