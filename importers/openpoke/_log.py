"""OpenPoke's line format: one ``<tag timestamp="...">payload</tag>`` record per line.

All three of OpenPoke's logs (the conversation log, the working memory, the execution
agents' journals) use it, and every reader here goes through :func:`parse_log`, which
takes a line exactly as OpenPoke's ``_parse_line`` does (FORMATS.md §2.2) and, where
OpenPoke silently skips a line, says which line and why.

Facts of the format that the functions below keep on purpose:

* Encoding turns ``\\r\\n`` and ``\\r`` into ``\\n``, every newline into the two characters
  backslash-n, and then applies ``html.escape(quote=False)``. Decoding is
  ``html.unescape`` followed by backslash-n → newline, so a literal backslash-n in the
  original text (``C:\\new``) comes back as a newline. That loss is OpenPoke's.
* OpenPoke splits a file with ``str.splitlines()``, which also breaks at characters the
  writer does not escape (U+2028, U+2029, U+0085, \\x0b, \\x0c, \\x1c-\\x1e). A payload
  holding one of them is cut into fragments that do not parse, and the entry is lost.
  We split the same way, so the entry indices agree with OpenPoke's, and report the
  fragments.
* The tag ends at the first space of the opening tag and the closing tag must match it.
  The legacy format (``<user message>…</user message>``, OpenPoke 8b724a2) therefore does
  not parse, except its ``<replies>`` lines, whose tag has no space: OpenPoke reads those
  as entries with tag ``replies`` and no timestamp, and so do we (flagged as legacy).
* Line numbers in reports are physical lines (counted at ``\\n``, as an editor counts);
  the fragments of a line cut at another break character share its number.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Literal

TimestampRule = Literal["conversation", "working_memory"]

# ConversationLog and the execution journals read every attribute with this pattern and
# take the last "timestamp"; WorkingMemoryLog searches for the first timestamp="...".
_ATTR_PATTERN = re.compile(r"(\w+)\s*=\s*\"([^\"]*)\"")
_WM_TIMESTAMP = re.compile(r'timestamp="([^"]*)"')
LEGACY_TAGS = frozenset({"replies"})
"""Tags of the legacy format that OpenPoke's parser still accepts (they have no space)."""


@dataclass(frozen=True)
class LogEntry:
    """One record that OpenPoke's parser accepts."""

    index: int
    """0-based, counted over the lines that parse (OpenPoke's ``last_index`` counts so)."""
    tag: str
    timestamp: str
    """As in the log: naive local time ``YYYY-MM-DD HH:MM:SS``; ``""`` when absent."""
    text: str
    """The decoded payload, as OpenPoke's readers return it."""
    line: int
    """Physical line number (1-based) in its file."""
    fold: int = 0
    """Which of the two instants a timestamp in a DST fall-back's repeated hour names
    (``datetime.fold``): 1 for the second pass. The parser cannot know (it has no zone);
    :func:`importers.openpoke._reader.resolve_folds` sets it from the log's order."""


@dataclass(frozen=True)
class SkippedLine:
    """A line OpenPoke's parser skips without a word."""

    file: str
    """The file, relative to the data dir (``conversation/poke_conversation.log``)."""
    line: int
    reason: str
    text: str

    def describe(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


@dataclass(frozen=True)
class RawLine:
    """One line of a log as it is on disk, and what the parser made of it."""

    number: int
    text: str
    entry_index: int | None
    """The entry it holds; None for a skipped line."""
    skipped_reason: str | None = None


@dataclass(frozen=True)
class ParsedLog:
    """A whole log file: its entries, the lines OpenPoke skips, every raw line."""

    file: str
    entries: tuple[LogEntry, ...]
    skipped: tuple[SkippedLine, ...]
    lines: tuple[RawLine, ...]
    legacy_lines: tuple[int, ...] = ()
    """Lines parsed as entries although they are in the legacy format (``<replies>``)."""


def encode_payload(text: str) -> str:
    """A payload as OpenPoke writes it: one line, newlines as backslash-n, ``&<>`` escaped."""
    normalized = text.replace("\r\n", "\n").replace("\r", "\n")
    return html.escape(normalized.replace("\n", "\\n"), quote=False)


def decode_payload(payload: str) -> str:
    """A payload as OpenPoke reads it (lossy: a literal backslash-n becomes a newline)."""
    return html.unescape(payload).replace("\\n", "\n")


def _record(tag: str, timestamp: str | None, payload: str) -> str:
    """``payload`` between the tags, the opening one with the timestamp if there is one."""
    opening = f'{tag} timestamp="{timestamp}"' if timestamp else tag
    return f"<{opening}>{payload}</{tag}>"


def format_line(tag: str, text: str, timestamp: str | None = None) -> str:
    """One record with its line break, as OpenPoke appends it."""
    return _record(tag, timestamp, encode_payload(text)) + "\n"


def render_entry(tag: str, timestamp: str, text: str) -> str:
    """One entry as OpenPoke's transcripts show it to the model: the payload re-escaped
    with ``html.escape(quote=False)`` and real newlines (so it may span several lines)."""
    return _record(tag, timestamp, html.escape(text, quote=False))


def _timestamp(attr_string: str, rule: TimestampRule) -> str:
    if rule == "working_memory":
        found = _WM_TIMESTAMP.search(attr_string) if attr_string else None
        return found.group(1) if found else ""
    attributes = {m.group(1): m.group(2) for m in _ATTR_PATTERN.finditer(attr_string)}
    return attributes.get("timestamp", "")


def parse_line(line: str, rule: TimestampRule = "conversation") -> tuple[str, str, str] | str:
    """``(tag, timestamp, text)`` for a line OpenPoke accepts, else why it skips it.

    The steps are OpenPoke's ``_parse_line``, in its order, including its quirks (the
    payload runs to the *last* ``</``; the closing tag is what lies between that and the
    last ``>``).
    """
    stripped = line.strip()
    if not stripped:
        return "blank line"
    if not stripped.startswith("<"):
        start = (
            "starts with a byte-order mark" if stripped.startswith("\ufeff") else "does not start with '<'"
        )
        return f"{start}, so it is not a record"
    if "</" not in stripped:
        return "no closing tag ('</' is missing)"
    open_end = stripped.find(">")
    if open_end == -1:
        return "the opening tag has no '>'"
    open_tag_content = stripped[1:open_end]
    if " " in open_tag_content:
        tag, attr_string = open_tag_content.split(" ", 1)
    else:
        tag, attr_string = open_tag_content, ""
    close_start = stripped.rfind("</")
    close_end = stripped.rfind(">")
    closing_tag = stripped[close_start + 2 : close_end]
    if closing_tag != tag:
        if " " in open_tag_content and closing_tag == open_tag_content and "=" not in open_tag_content:
            return (
                f"legacy tag format <{open_tag_content}> (a tag with a space and no timestamp, "
                f"as OpenPoke wrote at 8b724a2): the tag ends at the first space, so "
                f"</{closing_tag}> does not close <{tag}>"
            )
        return f"closing tag </{closing_tag}> does not match the opening tag <{tag}>"
    payload = stripped[open_end + 1 : close_start]
    return tag, _timestamp(attr_string, rule), decode_payload(payload)


def physical_lines(text: str) -> list[tuple[int, str, str]]:
    """``(line number, line, break)`` for each piece ``str.splitlines`` gives, as OpenPoke
    reads a file (``read_text`` turns ``\\r\\n`` and ``\\r`` into ``\\n`` first). ``break``
    is the character that ended the piece (``""`` at the end of the file)."""
    translated = text.replace("\r\n", "\n").replace("\r", "\n")
    pieces: list[tuple[int, str, str]] = []
    number = 1
    for piece in translated.splitlines(keepends=True):
        body = piece.rstrip("\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
        ending = piece[len(body) :]
        pieces.append((number, body, ending))
        if ending == "\n":
            number += 1
    return pieces


def _fragment_note(before: str, after: str) -> str:
    cuts = [f"U+{ord(c):04X}" for c in (before, after) if c and c != "\n"]
    if not cuts:
        return ""
    return (
        f" (a fragment: the line is cut at {' and '.join(cuts)}, a line break for str.splitlines "
        "that OpenPoke's writer does not escape, so the record it belonged to is lost)"
    )


def parse_log(text: str, file: str, rule: TimestampRule = "conversation") -> ParsedLog:
    """Every line of a log: entries indexed over the lines that parse, the rest reported."""
    entries: list[LogEntry] = []
    skipped: list[SkippedLine] = []
    raw: list[RawLine] = []
    legacy: list[int] = []
    previous_break = "\n"
    for number, line, ending in physical_lines(text):
        parsed = parse_line(line, rule)
        if isinstance(parsed, str):
            reason = parsed + _fragment_note(previous_break, ending)
            skipped.append(SkippedLine(file, number, reason, line))
            raw.append(RawLine(number, line, None, reason))
        else:
            tag, timestamp, payload = parsed
            entries.append(LogEntry(len(entries), tag, timestamp, payload, number))
            raw.append(RawLine(number, line, len(entries) - 1))
            if tag in LEGACY_TAGS and not timestamp:
                legacy.append(number)
        previous_break = ending
    return ParsedLog(file, tuple(entries), tuple(skipped), tuple(raw), tuple(legacy))


def render_transcript(summary: str | None, entries: list[tuple[str, str, str]]) -> str:
    """The transcript OpenPoke renders from a working-memory state (``render_transcript``):
    the summary (stripped, escaped; left out when empty) and then each ``(tag, timestamp,
    text)`` entry, joined by newlines."""
    parts: list[str] = []
    summary_text = (summary or "").strip()
    if summary_text:
        parts.append(f"<conversation_summary>{html.escape(summary_text, quote=False)}</conversation_summary>")
    parts.extend(render_entry(tag, timestamp, text) for tag, timestamp, text in entries)
    return "\n".join(parts)
