"""Reading and writing the JSON files of a store.

Reading is lenient: peteos reads with json5/jsonc, so hand-edited files with comments or
trailing commas load too (stdlib json is tried first because it is fast and exact).
Writing is strict: ``json.dumps(obj, indent=2)`` with ASCII escapes and no trailing
newline, exactly what peteos' ``json.dump(obj, f, indent=2)`` writes, replaced
atomically so that a crash never leaves half a file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import json5
import orjson

from soap_core._errors import FormatError, StoreError
from soap_core._tempfiles import in_flight, sweep_after_write, temp_prefix
from soap_core._write_hooks import file_written

_BOM = b"\xef\xbb\xbf"
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 19


def read_json(path: Path) -> Any:
    """The JSON value in ``path``; FormatError saying where and why if it is not JSON."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise StoreError(path, f"cannot read: {exc.strerror or exc}") from exc
    return parse_json_bytes(path, raw)


def parse_json_bytes(path: Path, raw: bytes) -> Any:
    """Parse a file's bytes: orjson first (several times faster), then the standard
    library (NaN, huge integers, lone surrogates), then what peteos's json5 reader also
    accepts (:func:`_lenient`). Every step is linear in the file's size except json5
    itself, which only sees small files that use its syntax, so a damaged file costs
    about what an intact one of the same size does."""
    if _LONG_NUMBER not in raw.translate(_DIGITS_AS_ZERO):  # orjson reads integers past 64 bits as floats
        try:
            return orjson.loads(raw[3:] if raw.startswith(_BOM) else raw)
        except orjson.JSONDecodeError:
            pass  # not strict JSON, or JSON orjson refuses: the slower readers decide
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FormatError(path, "$", f"not UTF-8 text (byte {exc.start})") from exc
    if not text.strip():
        raise FormatError(path, "$", "empty file (truncated?)")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as strict_error:  # also nesting and int-size limits
        return _lenient(path, text, strict_error)


def loads_plain(raw: bytes) -> Any | None:
    """orjson's reading alone, or None where it refuses the bytes (then
    :func:`parse_json_bytes` decides). Integers past 64 bits come back as floats: for a
    reader that takes no number from the file (a listing's ids and times)."""
    try:
        return orjson.loads(raw[3:] if raw.startswith(_BOM) else raw)
    except orjson.JSONDecodeError:
        return None


JSON5_LIMIT = 64 * 1024
"""Largest file (in characters) handed to the json5 reader, which is pure Python
(about 0.1 MB/s): past it, only comments and trailing commas are accepted beyond JSON."""

_STRING = r'"[^"\\\n]*(?:\\[\s\S][^"\\\n]*)*"'  # unrolled: a tight loop over plain characters
_COMMENT = re.compile(rf"({_STRING})|//[^\n]*|/\*[\s\S]*?\*/")
_TRAILING_COMMA = re.compile(rf"({_STRING})|,(?=\s*[\]}}])")
_MAYBE_TRAILING_COMMA = re.compile(r",\s*[\]}]")
_STRINGS = re.compile(_STRING)
_BROKEN_STRING = re.compile(r'"[^\n]*')
_WORDS = ("true", "false", "null", "NaN", "Infinity")
_STRICT_CHARACTERS = str.maketrans("", "", "0123456789 \t\r\n,:[]{}-")
_WORD_START = frozenset("'_$ABCDFGHIJKLMNOPQRSTUVWXYZabcdfghijklmnopqrstuvwxyz")
"""Characters that start JSON5-only syntax outside strings: a single quote, an unquoted
key or word, a hex number (e and E are left out: they are exponents, checked apart)."""
_JSON5_NUMBERS = {
    "e": re.compile(r"(?<![\d.])[eE]"),  # a word of e's, not an exponent
    "E": re.compile(r"(?<![\d.])[eE]"),
    "+": re.compile(r"(?<![eE])\+"),  # a leading +
    ".": re.compile(r"(?<!\d)\.|\.(?!\d)"),  # .5 and 5.
}


def _without_comments(text: str) -> str:
    """``text`` with JSON5 comments turned into spaces and trailing commas dropped
    (strings untouched), as json5 reads them: linear, the matching done in C."""
    if "//" in text or "/*" in text:
        text = _COMMENT.sub(lambda m: m.group(1) or " ", text)
    if _MAYBE_TRAILING_COMMA.search(text):
        text = _without_trailing_commas(text)
    return text


def _without_trailing_commas(text: str) -> str:
    """``text`` without the commas that close a list or an object. Each ``, ]`` found may
    be inside a string; a JSON string does not span lines, so only the lines from its
    comma to its bracket are looked at closely, whole (a line starts outside any string;
    overlapping spans are merged): the cost is the lines with a candidate, not every
    string of the file."""
    spans: list[list[int]] = []
    for found in _MAYBE_TRAILING_COMMA.finditer(text):
        start = text.rfind("\n", 0, found.start()) + 1
        end = text.find("\n", found.end())
        end = len(text) if end < 0 else end
        if spans and start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    pieces: list[str] = []
    last = 0
    for start, end in spans:
        pieces += [text[last:start], _TRAILING_COMMA.sub(lambda m: m.group(1) or "", text[start:end])]
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def _has_json5_syntax(text: str) -> bool:
    """Whether ``text`` (comments removed) may use JSON5 syntax that strict JSON lacks:
    single quotes, unquoted keys, hex numbers, a leading ``+``, ``.5`` or ``5.``, a string
    continued on the next line. Strings are blanked first (a broken one to the end of its
    line), so their content never counts; then whatever strict JSON is made of is
    deleted (``str.translate``, in C), and what is left is looked at: for a damaged file
    of strict JSON, nothing or a few numbers' dots and exponents."""
    if "\\\n" in text:
        return True
    skeleton = _BROKEN_STRING.sub("", _STRINGS.sub("0", text))
    for word in _WORDS:
        skeleton = skeleton.replace(word, "0")
    rest = set(skeleton.translate(_STRICT_CHARACTERS))
    if rest & _WORD_START:
        return True
    return any(_JSON5_NUMBERS[c].search(skeleton) is not None for c in rest if c in _JSON5_NUMBERS)


def _lenient(path: Path, text: str, strict_error: Exception) -> Any:
    """What is left after strict JSON failed. Comments and trailing commas (how people
    edit a file by hand) are removed and the rest read strictly again. Only a small file
    with other JSON5 syntax goes to the json5 reader; otherwise the strict error stands,
    with its line and column: a truncated or damaged file is reported at once."""
    cleaned = _without_comments(text)
    if cleaned != text:
        try:
            return json.loads(cleaned)
        except (ValueError, RecursionError):
            pass
    if not _has_json5_syntax(cleaned):
        raise FormatError(path, "$", f"not valid JSON: {_describe(strict_error)}") from None
    depth = _nesting(cleaned)
    if depth > JSON5_DEPTH:
        problem = f"not valid JSON: {_describe(strict_error)} (and nested {depth} deep, too deep for JSON5)"
        raise FormatError(path, "$", problem)
    if len(text) > JSON5_LIMIT:
        raise FormatError(
            path,
            "$",
            f"not valid JSON: {_describe(strict_error)} (JSON5 syntax other than comments and "
            f"trailing commas is read only in files up to {JSON5_LIMIT // 1024} KiB)",
        ) from None
    try:
        return json5.loads(text)
    except Exception:  # json5 raises ValueError and, on some inputs, others
        raise FormatError(path, "$", f"not valid JSON or JSON5: {_describe(strict_error)}") from None


JSON5_DEPTH = 200
"""Deepest nesting handed to json5: its parser recurses through C for every level, and
a deep enough file would overflow the C stack (a crash, not an error) before Python's
recursion limit noticed."""
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


def _nesting(text: str) -> int:
    """How deep the brackets of ``text`` go, strings left out (``text`` is small: only
    files for json5 get here)."""
    depth = deepest = 0
    for bracket in _NOT_BRACKETS.sub("", _BROKEN_STRING.sub("", _STRINGS.sub("0", text))):
        depth = depth + 1 if bracket in "[{" else max(depth - 1, 0)
        deepest = max(deepest, depth)
    return deepest


def _describe(error: Exception) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"{error.msg} at line {error.lineno} column {error.colno}"
    if isinstance(error, RecursionError):
        return "nested too deeply"
    return str(error)


def fingerprint(value: Any) -> bytes | None:
    """A digest of a JSON value, key order included, to tell cheaply whether a value
    changed since it was read or written; None where orjson cannot encode it."""
    try:
        return hashlib.blake2b(orjson.dumps(value), digest_size=16).digest()
    except (TypeError, orjson.JSONEncodeError):
        return None


_PLAIN = (str, int, bool, type(None))
"""The leaf types orjson and Python's ``json`` write alike (floats they spell apart:
``0.00001`` against ``1e-05``; NaN orjson writes as null)."""


def _plain(value: Any) -> bool:
    """Whether ``value`` is built only of dicts with string keys, lists and tuples, and
    :data:`_PLAIN` leaves, exactly those types: what both encoders write the same."""
    stack = [value]
    pop, push = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is dict:
            if not all(type(key) is str for key in item):
                return False
            push(item.values())
        elif kind is list or kind is tuple:
            push(item)
        elif kind not in _PLAIN:
            return False
    return True


def dump_json(value: Any) -> str:
    """The text peteos writes for ``value``: ``json.dumps(value, indent=2)``.

    Python's encoder with an indent is its pure-Python one (1.4 s for a context of
    25,000 messages); orjson writes the same layout in a few milliseconds. Its text is
    taken only where it must be the same: a value of plain types only (no float: the
    two spell some apart; no subclass or object orjson writes and Python refuses), and
    ASCII throughout (Python escapes the rest, DEL included)."""
    if not _plain(value):
        return json.dumps(value, indent=2)
    try:
        raw = orjson.dumps(value, option=orjson.OPT_INDENT_2)
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value, indent=2)
    if not raw.isascii() or b"\x7f" in raw:
        return json.dumps(value, indent=2)
    return raw.decode("ascii")


def write_json_atomic(path: Path, value: Any, before_write: Callable[[], None] | None = None) -> bool:
    """Write ``value`` to ``path`` unless the file already holds it; True if written.

    A file whose parsed content already equals ``value`` is left alone, so loading and
    saving never rewrites a file (hand-edited comments and all) that nothing changed.
    ``before_write`` runs just before the file is replaced, if it is.
    """
    text = dump_json(value)
    if path.exists() and not path.is_symlink():  # a link is replaced, never read through
        try:
            if path.read_text("utf-8") == text or read_json(path) == value:
                return False
        except (OSError, UnicodeDecodeError, FormatError, StoreError):
            pass  # unreadable or broken: replacing it is the point of this write
    if before_write is not None:
        before_write()
    write_text_atomic(path, text)
    return True


def _mode_for(path: Path) -> int:
    """Keep an existing file's permissions; a new file gets 0o666 less the umask."""
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


_unsynced = 0
"""How many :func:`unsynced_writes` blocks are running in this process."""


@contextlib.contextmanager
def unsynced_writes() -> Iterator[None]:
    """Atomic writes without their fsyncs while this runs, in the whole process: only for
    stores that can be made again (the generator, in processes of its own), never for a
    user's data, which must survive a crash."""
    global _unsynced
    _unsynced += 1
    try:
        yield
    finally:
        _unsynced -= 1


def syncing() -> bool:
    """Whether writes are fsynced (no :func:`unsynced_writes` block is running)."""
    return not _unsynced


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``: temp file in the same folder, fsync, rename.

    The temp file's name says which process wrote it, so that a writer killed before the
    rename leaves a file that the next writing process's first write into this folder (or
    a listing) removes (:mod:`soap_core._tempfiles`); a link at ``path`` is replaced, never
    written through.
    """
    write_bytes_atomic(path, [text.encode("utf-8")])


def write_bytes_atomic(path: Path, pieces: Sequence[bytes | memoryview]) -> str:
    """Replace ``path`` with the bytes ``pieces`` (written one after the other, never
    joined: the messages of a long context are tens of megabytes) as
    :func:`write_text_atomic` does; the :func:`bytes_digest` of what was written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    size = sum(len(piece) for piece in pieces)
    hasher = _digest_of_length(size)
    tmp_name = os.path.join(path.parent, f"{temp_prefix(path)}{secrets.token_hex(4)}.tmp")
    with in_flight(tmp_name):
        fd = os.open(tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, _mode_for(path))
            with os.fdopen(fd, "wb") as handle:
                if size >= DIGEST_BESIDE_BYTES:
                    with ThreadPoolExecutor(1) as digesting:  # both release the GIL
                        digested = digesting.submit(_update_all, hasher, pieces)
                        for piece in pieces:
                            handle.write(piece)
                        digested.result()
                else:
                    for piece in pieces:
                        handle.write(piece)
                        hasher.update(piece)
                handle.flush()
                if not _unsynced:
                    os.fsync(handle.fileno())
            replaced = _held_open(path) if size >= DIGEST_BESIDE_BYTES else None
            try:
                os.replace(tmp_name, path)
            finally:
                if replaced is not None:
                    _close_behind(replaced)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
            raise
    if not _unsynced:
        with contextlib.suppress(OSError):  # not every file system lets a folder be fsynced
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        sweep_after_write(path.parent)
    file_written(path)  # a remote store's mirror uploads it (soap_core._write_hooks)
    digest: str = hasher.hexdigest()[:32]
    return digest


DIGEST_BESIDE_BYTES = 4 * 1024 * 1024
"""From this size on, :func:`write_bytes_atomic` digests the bytes in a thread while it
writes them (SHA-256 and the writes both release the GIL): a save of a fork rewrites its
58 MB parent for the new ``children`` entry, and its digest was a fifth of that save."""


def _held_open(path: Path) -> int | None:
    """A descriptor of the regular file ``path`` of :data:`DIGEST_BESIDE_BYTES` or more
    that a write is about to replace (None for anything else): while it is open, the
    rename does not free the old file's blocks, which ext4 does in the rename itself
    (13 ms for the 58 MB parent a fork's save rewrites); :func:`_close_behind` frees
    them in a thread. Never a link (``O_NOFOLLOW``), never a FIFO or device (``lstat``
    first: opening one could block or act)."""
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size < DIGEST_BESIDE_BYTES:
            return None
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None


def _close_behind(fd: int) -> None:
    """Close ``fd`` in a thread of its own (the kernel frees a replaced file's blocks
    at its last close; the call releases the GIL)."""
    threading.Thread(target=os.close, args=(fd,), name="soapwb-free-replaced", daemon=True).start()


def _update_all(hasher: Any, pieces: Sequence[bytes | memoryview]) -> None:
    for piece in pieces:
        hasher.update(piece)


def _digest_of_length(length: int) -> Any:
    hasher = hashlib.sha256()
    hasher.update(length.to_bytes(8, "little"))
    return hasher


def bytes_digest(*parts: bytes | memoryview) -> str:
    """A digest of byte strings, each with its length (SHA-256, which the CPU computes:
    twice as fast as BLAKE2b here, and a first indexing digests every file); of one
    file's bytes, the digest :func:`write_bytes_atomic` returns for writing them."""
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(len(part).to_bytes(8, "little"))
        hasher.update(part)
    return hasher.hexdigest()[:32]
