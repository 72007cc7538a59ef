"""The two tracks of an imported OpenPoke conversation at one entry.

OpenPoke keeps an append-only log and a working memory (summary + unsummarised tail),
and the model sees only the latter, rendered into one user message. This module gives,
for an imported interaction session and an entry index, what the working memory held
when that entry arrived, and the raw log lines up to it: what the Context page shows
side by side and what :mod:`importers.openpoke._materialize` renders into the request.

**Which working memory an entry saw.** OpenPoke renders the transcript *before* it
records the incoming entry, so entry ``i`` sees entries before ``i`` only. OpenPoke keeps
only its latest summary, but every summary an import has seen is kept as a fork of the
session, so the states known are: "no summary" and each of those summaries. Entry ``i``
saw summary S when

* ``i > S.last_index`` (S covers only entries before ``i``), and
* the entry's local time, read in the session's time zone (in a DST fall-back's
  repeated hour, the instant the log's order gives: the entry's ``fold``), is strictly
  after ``S.updated_at`` (UTC): summarisation runs in the background once 110 entries are
  unsummarised, and entries that arrive while it runs still see the old state. Entry
  times have whole seconds, so an entry within the same second as ``updated_at`` counts
  as before it.

The latest such summary wins, and the transcript is that summary plus the entries from
``S.last_index + 1`` to ``i - 1``. With no such summary it is every entry before ``i``
(OpenPoke's working memory then mirrors the whole log, and its fallback, the log itself,
renders the same text).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from importers._errors import ImporterError
from importers.openpoke._log import RawLine, format_line, parse_log, render_transcript
from importers.openpoke._mapping import SUMMARY_TAG, is_openpoke_session, openpoke_meta, openpoke_state
from importers.openpoke._reader import CONVERSATION_LOG, parse_updated_at, to_utc, zone_named
from soap_core import Context, Session, inside

_THRESHOLD = 100
"""OpenPoke's default ``conversation_summary_threshold``."""


@dataclass(frozen=True)
class TranscriptEntry:
    """One conversation-log entry as imported."""

    index: int
    tag: str
    timestamp: str
    text: str
    message_id: str
    fold: int = 0
    """1 for a time in the second pass of a DST fall-back's repeated hour (see
    :func:`importers.openpoke._reader.resolve_folds`)."""

    def instant(self, zone: ZoneInfo) -> datetime | None:
        """When the entry was logged, in UTC (None without a readable timestamp)."""
        return to_utc(self.timestamp, zone, self.fold)


@dataclass(frozen=True)
class KnownSummary:
    """A summary an import saw in the working memory, and the fork that holds it."""

    last_index: int
    updated_at: datetime | None
    updated_at_raw: str | None
    text: str
    context_id: str


@dataclass(frozen=True)
class WorkingMemoryState:
    """The working memory as the model saw it when entry ``entry_index`` arrived."""

    entry_index: int
    summary: KnownSummary | None
    entries: tuple[TranscriptEntry, ...]
    """The entries the transcript holds (after the summary's ``last_index``, before the entry)."""
    transcript: str
    """As OpenPoke's ``render_transcript`` gives it (``""`` for an empty memory)."""
    rule: str
    """Why this state, in one sentence."""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class OpenPokeTracks:
    """The raw log and the working memory at one entry."""

    entry_index: int
    raw_lines: tuple[RawLine, ...]
    """The conversation log's lines up to and including the entry's line."""
    raw_lines_source: str
    """The file read, or a note that the lines were re-encoded from the store."""
    working_memory: WorkingMemoryState


def _root(session: Session) -> Context:
    if not is_openpoke_session(session) or openpoke_state(session).get("kind") != "interaction":
        raise ImporterError(session.session_file, "not an imported OpenPoke interaction session")
    root_id = openpoke_state(session).get("root_context_id")
    if not isinstance(root_id, str) or root_id not in session.contexts:
        raise ImporterError(session.session_file, "the imported root context is missing")
    return session.contexts[root_id]


def conversation_entries(session: Session) -> list[TranscriptEntry]:
    """Every imported conversation-log entry of an interaction session, in log order."""
    entries = []
    for message in _root(session).messages:
        meta = openpoke_meta(message)
        if meta is None or not isinstance(meta.get("index"), int):
            continue
        fold = meta.get("fold")
        entries.append(
            TranscriptEntry(
                meta["index"],
                meta["tag"],
                str(meta.get("timestamp", "")),
                message.text(),
                message.id,
                fold if fold in (0, 1) else 0,
            )
        )
    return sorted(entries, key=lambda e: e.index)


def known_summaries(session: Session) -> list[KnownSummary]:
    """Every summary kept in the session (one fork each), oldest first."""
    found = []
    for context in session.contexts.values():
        first = next((m for m in context.messages if not m.is_special), None)
        meta = openpoke_meta(first) if first is not None else None
        if first is None or meta is None or meta["tag"] != SUMMARY_TAG:
            continue
        raw = meta.get("updated_at")
        raw_text = raw if isinstance(raw, str) else None
        updated = parse_updated_at(raw_text) if raw_text else None
        last_index = meta.get("last_index")
        if isinstance(last_index, int):
            found.append(KnownSummary(last_index, updated, raw_text, first.text(), context.id))
    return sorted(found, key=lambda s: (s.updated_at is None, s.updated_at or datetime.min, s.last_index))


def session_zone(session: Session) -> ZoneInfo:
    """The time zone the imported entries' timestamps are in."""
    name = openpoke_state(session).get("timezone")
    return (zone_named(name) if isinstance(name, str) and name else None) or ZoneInfo("UTC")


def _seen(summary: KnownSummary, entry: TranscriptEntry, zone: ZoneInfo) -> bool:
    arrived = entry.instant(zone)  # with the fold the log's order gives (DST fall-back)
    return (
        entry.index > summary.last_index
        and summary.updated_at is not None
        and arrived is not None
        and arrived > summary.updated_at
    )


def _pass(entry: TranscriptEntry, zone: ZoneInfo) -> str:
    """`, the second pass (EST)` for a time in the second pass of a repeated hour."""
    instant = entry.instant(zone)
    if not entry.fold or instant is None:
        return ""
    try:
        name = instant.astimezone(zone).tzname()
    except OverflowError:
        name = None
    return f", its second pass ({name or zone.key}, {instant:%H:%M:%S} UTC)"


def working_memory_at(session: Session, entry_index: int) -> WorkingMemoryState:
    """What OpenPoke's working memory held when entry ``entry_index`` arrived (see the
    module docstring for the rule)."""
    entries = conversation_entries(session)
    by_index = {e.index: e for e in entries}
    if entry_index not in by_index:
        raise ImporterError(session.session_file, f"no imported entry {entry_index}")
    entry = by_index[entry_index]
    zone = session_zone(session)
    summaries = known_summaries(session)
    seen = [s for s in summaries if _seen(s, entry, zone)]
    notes: list[str] = []
    summary = seen[-1] if seen else None
    if summary is not None:
        held = [e for e in entries if summary.last_index < e.index < entry_index]
        rule = (
            f"the summary of entries 0..{summary.last_index} (written {summary.updated_at_raw}, before "
            f"entry {entry_index} arrived at {entry.timestamp} {zone.key}{_pass(entry, zone)}) and the entries after it"
        )
    else:
        held = [e for e in entries if e.index < entry_index]
        rule = f"no summary existed when entry {entry_index} arrived: every entry before it"
        if summaries and entry.instant(zone) is None:
            notes.append(
                f"entry {entry_index} has no readable timestamp: no summary could be placed before it"
            )
        earliest = summaries[0] if summaries else None
        if earliest is not None and earliest.last_index >= 2 * _THRESHOLD - 1 and entry_index > _THRESHOLD:
            notes.append(
                "OpenPoke keeps only its latest summary: an earlier one, not known here, was probably in "
                "effect at this entry; the full log before it is used instead"
            )
    transcript = render_transcript(
        summary.text if summary else None, [(e.tag, e.timestamp, e.text) for e in held]
    )
    return WorkingMemoryState(entry_index, summary, tuple(held), transcript, rule, tuple(notes))


def raw_log_path(session: Session) -> tuple[Path | None, str | None]:
    """The conversation log an interaction session was imported from, or None and why it
    is not read: the session file names the data dir and the log, and only the
    conversation log inside that dir (links followed) is ever opened, whatever the file
    says (a session naming ``/etc`` and ``passwd`` is refused, not shown)."""
    state = openpoke_state(session)
    data_dir, log = state.get("data_dir"), state.get("log")
    if not isinstance(data_dir, str) or not data_dir or not Path(data_dir).is_absolute():
        return None, f"the imported data_dir {data_dir!r} is not an absolute path: refused"
    if log != CONVERSATION_LOG:
        return None, f"the imported log {log!r} is not OpenPoke's {CONVERSATION_LOG}: refused"
    path = Path(data_dir) / CONVERSATION_LOG
    if not inside(data_dir, path):
        return None, f"{path} leads outside the imported directory {data_dir}: refused"
    return path, None


def _raw_lines(session: Session, entries: list[TranscriptEntry]) -> tuple[tuple[RawLine, ...], str]:
    path, refused = raw_log_path(session)
    text = None
    if path is not None:
        try:
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            refused = f"{path} is not readable"
    if path is None or text is None:
        lines = tuple(
            RawLine(e.index + 1, format_line(e.tag, e.text, e.timestamp or None).rstrip("\n"), e.index)
            for e in entries
        )
        return lines, f"{refused}: the lines are re-encoded from the imported entries"
    return parse_log(text, CONVERSATION_LOG).lines, str(path)


def tracks_at(session: Session, entry_index: int) -> OpenPokeTracks:
    """The raw conversation log up to entry ``entry_index`` (from the data dir the session
    was imported from) beside the working memory as the model saw it then."""
    memory = working_memory_at(session, entry_index)
    lines, source = _raw_lines(session, conversation_entries(session))
    end = next((i for i, line in enumerate(lines) if line.entry_index == entry_index), len(lines) - 1)
    return OpenPokeTracks(entry_index, lines[: end + 1], source, memory)
