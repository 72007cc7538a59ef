"""Reading an OpenPoke ``server/data`` directory, the way OpenPoke itself reads it.

What is read (FORMATS.md §2.1-§2.6):

* ``conversation/poke_conversation.log``: the append-only log. Entry indices count only
  the lines that parse, as OpenPoke's ``last_index`` does.
* ``conversation/poke_working_memory.log``: ``summary_info`` (``last_index`` and
  ``updated_at``, an aware UTC time), the summary and the entries not yet summarised.
  Several ``summary_info`` lines: the last wins, as in ``load_summary_state``.
* ``execution_agents/<slug>.log`` and ``roster.json`` (a JSON array of names; the older
  array of ``{"name", "recent_actions"}`` objects is read too).
* ``timezone.txt``: the IANA zone of every entry timestamp (default UTC, also for a
  name zoneinfo does not know, as OpenPoke falls back).
* ``chat_history.json``, the pre-log format, is noticed and reported, not imported.

Entry timestamps are naive local wall-clock times in that zone, written by
``now_in_user_timezone("%Y-%m-%d %H:%M:%S")`` (OpenPoke's ``server/utils/timezones.py``),
which drops the offset: in the repeated hour of a DST fall-back (2025-11-02 01:00-02:00 in
America/New_York) one text names two instants. The logs are append-only and each record's
time is taken just before it is written (``ConversationLog._append``,
``ExecutionAgentLogStore._append``, both synchronous on OpenPoke's one event loop), so a
log's order is its time order: :func:`resolve_folds` reads a timestamp that goes back
(by at most the repeated span) inside that hour as the second pass (``fold=1``), and so
every later one in that hour. It runs here, once per log, and every reader of times
(summary placement, hand-offs, the roster, the records) uses the entry's ``fold`` through
:func:`entry_instant`. A file OpenPoke could not read either (not UTF-8, a folder where a
file belongs) raises :class:`ImporterError`; everything OpenPoke would shrug off is a
notice.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from importers._errors import ImporterError
from importers.openpoke._log import LogEntry, ParsedLog, SkippedLine, parse_log
from soap_core import inside

CONVERSATION_LOG = "conversation/poke_conversation.log"
WORKING_MEMORY_LOG = "conversation/poke_working_memory.log"
EXECUTION_DIR = "execution_agents"
ROSTER_FILE = "execution_agents/roster.json"
TIMEZONE_FILE = "timezone.txt"
LEGACY_HISTORY = "chat_history.json"
LOCAL_FORMAT = "%Y-%m-%d %H:%M:%S"
_MARKERS = ("conversation", EXECUTION_DIR, LEGACY_HISTORY)


@dataclass(frozen=True)
class WorkingMemory:
    """``poke_working_memory.log`` as ``load_summary_state`` reads it."""

    last_index: int
    """Index of the last summarised entry of the conversation log; -1: no summary yet."""
    updated_at: datetime | None
    """When the summary was written: aware, UTC in every file OpenPoke writes."""
    updated_at_raw: str | None
    summary: str
    entries: tuple[LogEntry, ...]
    """The unsummarised tail (indices here count within this file, not the log)."""
    log: ParsedLog

    @property
    def has_summary(self) -> bool:
        return bool(self.summary.strip())


@dataclass(frozen=True)
class ExecutionLog:
    """One execution agent's journal."""

    slug: str
    name: str
    """The roster name whose slug is this file's; the slug itself when none matches."""
    log: ParsedLog


@dataclass(frozen=True)
class OpenPokeData:
    """Everything read from one data dir."""

    data_dir: Path
    timezone: str
    conversation: ParsedLog
    working_memory: WorkingMemory | None
    execution_logs: tuple[ExecutionLog, ...]
    roster: tuple[str, ...]
    legacy_history: int | None
    """Messages in ``chat_history.json`` (the pre-log format), None when it is absent."""
    notices: tuple[str, ...]

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def entries(self) -> tuple[LogEntry, ...]:
        return self.conversation.entries

    def skipped(self) -> list[SkippedLine]:
        """Every line OpenPoke would skip, in all the logs read."""
        logs = [self.conversation]
        if self.working_memory is not None:
            logs.append(self.working_memory.log)
        logs.extend(e.log for e in self.execution_logs)
        return [line for log in logs for line in log.skipped]


def slugify(name: str) -> str:
    """OpenPoke's file name for an agent: lower case, other characters → ``-``, runs
    collapsed, ends stripped, ``agent`` if nothing is left."""
    slug = "".join(ch.lower() if ch.isalnum() else "-" for ch in name.strip()).strip("-")
    while "--" in slug:
        slug = slug.replace("--", "-")
    return slug or "agent"


def parse_local(timestamp: str) -> datetime | None:
    """An entry timestamp as a naive datetime, None if it is not ``YYYY-MM-DD HH:MM:SS``."""
    try:
        return datetime.strptime(timestamp, LOCAL_FORMAT)
    except ValueError:
        return None


def to_utc(timestamp: str, zone: ZoneInfo, fold: int = 0) -> datetime | None:
    """The instant an entry timestamp names, in UTC (None when it does not parse).

    ``fold`` picks one of the two instants a time in a DST fall-back's repeated hour
    names (0: the first pass, 1: the second); an entry carries the one its log's order
    shows (:func:`resolve_folds`), so pass ``entry.fold`` or use :func:`entry_instant`.
    """
    local = parse_local(timestamp)
    return None if local is None else _instant(local, zone, fold)


def _instant(local: datetime, zone: ZoneInfo, fold: int) -> datetime | None:
    """The UTC instant of a naive local time; None for one whose UTC instant lies
    outside the years 1-9999 (``0001-01-01 00:00:00`` east of UTC, ``9999-12-31`` west)."""
    try:
        return local.replace(tzinfo=zone, fold=fold).astimezone(UTC)
    except OverflowError:
        return None


def zone_named(name: str) -> ZoneInfo | None:
    """The IANA zone ``name``, None where zoneinfo has none: an unknown or malformed key,
    a folder of the zone database (``America``), a name longer than a file name may be."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


def entry_instant(entry: LogEntry, zone: ZoneInfo) -> datetime | None:
    """The instant of an entry, in UTC, with the fold its log's order gives."""
    return to_utc(entry.timestamp, zone, entry.fold)


def is_repeated(local: datetime, zone: ZoneInfo) -> bool:
    """True when the naive ``local`` lies in a repeated span (a DST fall-back) of ``zone``:
    its second pass is later than its first. (A time in a spring-forward gap also has two
    readings, the other way round; OpenPoke never writes one, and it keeps fold 0.)"""
    first, second = _instant(local, zone, 0), _instant(local, zone, 1)
    return first is not None and second is not None and second > first


def resolve_folds(
    entries: Iterable[LogEntry], zone: ZoneInfo, after: datetime | None = None
) -> tuple[LogEntry, ...]:
    """The entries with ``fold`` set from the log's order.

    A log is in time order (see the module docstring), so an entry in a repeated span is
    in the second pass when its first-pass instant lies before the previous timed entry's
    instant and its second-pass instant does not: its time went back, by at most the
    repeated span. Every later entry of that span then follows the same way, being after
    a second-pass entry. When the order shows nothing (no time goes back), the first pass
    is taken. ``after`` is the instant of the entry just before the first one (for a tail
    of a log whose head is elsewhere).
    """
    previous = after
    resolved: list[LogEntry] = []
    for entry in entries:
        local = parse_local(entry.timestamp)
        if local is None:
            resolved.append(entry)
            continue
        fold = 0
        if previous is not None and is_repeated(local, zone):
            first, second = _instant(local, zone, 0), _instant(local, zone, 1)
            if first is not None and second is not None and first < previous <= second:
                fold = 1
        resolved.append(replace(entry, fold=fold) if fold != entry.fold else entry)
        previous = _instant(local, zone, fold) or previous
    return tuple(resolved)


def _with_folds(log: ParsedLog, zone: ZoneInfo, after: datetime | None = None) -> ParsedLog:
    return replace(log, entries=resolve_folds(log.entries, zone, after))


def _fold_notice(log: ParsedLog, zone: ZoneInfo) -> str | None:
    """What the import made of entries in a repeated hour, or None when there are none."""
    repeated = [
        e for e in log.entries if (local := parse_local(e.timestamp)) is not None and is_repeated(local, zone)
    ]
    if not repeated:
        return None
    local = parse_local(repeated[0].timestamp)
    assert local is not None
    names = [local.replace(tzinfo=zone, fold=f).tzname() or "?" for f in (0, 1)]
    second = [e for e in repeated if e.fold == 1]
    lines = f"line {repeated[0].line}" + (f"-{repeated[-1].line}" if len(repeated) > 1 else "")
    how = (
        f"{len(second)} of them in the second pass ({names[1]}, from line {second[0].line}: the time goes back there)"
        if second
        else f"all read as the first pass ({names[0]}): no time goes back, so the order cannot show a second pass"
    )
    return (
        f"{log.file}: {len(repeated)} entries ({lines}) have a time that {zone.key} repeats when DST ends "
        f"(naive local times name two instants there); by the log's order {how}"
    )


def parse_updated_at(raw: str) -> datetime | None:
    """``updated_at`` as an aware datetime; a value without offset is taken as UTC."""
    try:
        value = datetime.fromisoformat(raw)
        value = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        value.astimezone(UTC)  # 0001-01-01T00:00:00+05:00 names no instant a datetime holds
    except (ValueError, OverflowError):
        return None
    return value


def find_data_dir(path: Path | str) -> Path:
    """The OpenPoke data dir at ``path`` or at ``path/server/data``."""
    given = Path(path).expanduser()
    if not given.exists():
        raise ImporterError(given, "no such directory")
    if not given.is_dir():
        raise ImporterError(given, "not a directory (give an OpenPoke checkout or its server/data)")
    for candidate in (given, given / "server" / "data"):
        if any((candidate / marker).exists() for marker in _MARKERS):
            return candidate.resolve()
    raise ImporterError(
        given,
        f"not an OpenPoke data dir: no {CONVERSATION_LOG}, {EXECUTION_DIR}/ or {LEGACY_HISTORY} "
        "here or under server/data",
    )


def _read_text(path: Path, data_dir: Path) -> str | None:
    """A file's text as OpenPoke reads it (UTF-8, no BOM handling); None if absent. A file
    that a link leads outside the data dir to is refused, never read."""
    if not inside(data_dir, path):
        raise ImporterError(path, f"a symlink leading outside the imported directory {data_dir}: not read")
    if not path.exists():
        return None
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ImporterError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ImporterError(
            path, f"not UTF-8 text (byte {exc.start}): OpenPoke cannot read this file either"
        ) from None


def _parse_json(text: str) -> tuple[Any, str | None]:
    """The JSON value of ``text``, or None and why not: also for what the standard
    library refuses other than by a syntax error (an integer of 5,000 digits, nesting
    past the recursion limit), which OpenPoke's readers shrug off the same way."""
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, f"{exc.msg} at line {exc.lineno}"
    except (ValueError, RecursionError) as exc:
        return None, "nested too deeply" if isinstance(exc, RecursionError) else str(exc)


def _read_timezone(data_dir: Path, notices: list[str]) -> str:
    text = _read_text(data_dir / TIMEZONE_FILE, data_dir)
    name = (text or "").strip()
    if not name:
        return "UTC"
    if zone_named(name) is None:
        shown = name if len(name) <= 80 else name[:80] + "…"
        notices.append(f"{TIMEZONE_FILE}: unknown time zone {shown!r}: UTC is used, as OpenPoke does")
        return "UTC"
    return name


def _read_working_memory(
    data_dir: Path, conversation: ParsedLog, zone: ZoneInfo, notices: list[str]
) -> WorkingMemory | None:
    text = _read_text(data_dir / WORKING_MEMORY_LOG, data_dir)
    if text is None:
        notices.append(
            f"{WORKING_MEMORY_LOG}: absent (OpenPoke creates it at start-up): no summary to import"
        )
        return None
    log = parse_log(text, WORKING_MEMORY_LOG, "working_memory")
    last_index, updated_at, updated_raw, summary = -1, None, None, ""
    entries: list[LogEntry] = []
    for entry in log.entries:
        if entry.tag == "summary_info":
            info, problem = _parse_json(entry.text)
            if problem is not None:
                notices.append(
                    f"{WORKING_MEMORY_LOG}:{entry.line}: summary_info is not JSON (ignored, as OpenPoke does)"
                )
                continue
            if not isinstance(info, dict):
                continue
            if isinstance(info.get("last_index"), int):
                last_index = info["last_index"]
            raw = info.get("updated_at")
            if isinstance(raw, str) and raw:
                updated_raw, updated_at = raw, parse_updated_at(raw)
                if updated_at is None:
                    notices.append(
                        f"{WORKING_MEMORY_LOG}:{entry.line}: updated_at {raw!r} is not an ISO time"
                    )
        elif entry.tag == "conversation_summary":
            summary = entry.text
        else:
            entries.append(entry)
    # The tail continues the conversation log after last_index: its folds follow on from
    # that entry (the tail alone may start in a second pass whose first is summarised).
    head = conversation.entries[last_index] if 0 <= last_index < len(conversation.entries) else None
    tail = resolve_folds(entries, zone, entry_instant(head, zone) if head is not None else None)
    return WorkingMemory(last_index, updated_at, updated_raw, summary, tail, log)


def _read_roster(data_dir: Path, notices: list[str]) -> tuple[str, ...]:
    text = _read_text(data_dir / ROSTER_FILE, data_dir)
    if text is None:
        return ()
    data, problem = _parse_json(text)
    if problem is not None:
        notices.append(f"{ROSTER_FILE}: not JSON ({problem}): no active agents")
        return ()
    if not isinstance(data, list):
        notices.append(f"{ROSTER_FILE}: not a JSON array: no active agents")
        return ()
    names: list[str] = []
    for item in data:
        if isinstance(item, str):
            names.append(item)
        elif isinstance(item, dict) and isinstance(item.get("name"), str):
            names.append(item["name"])  # the older roster: [{"name", "recent_actions"}]
    return tuple(names)


def _read_execution_logs(
    data_dir: Path, roster: tuple[str, ...], zone: ZoneInfo, notices: list[str]
) -> tuple[ExecutionLog, ...]:
    folder = data_dir / EXECUTION_DIR
    if not folder.is_dir():
        return ()
    by_slug = {slugify(name): name for name in roster}
    logs = []
    for path in sorted(folder.glob("*.log")):
        text = _read_text(path, data_dir)
        slug = path.stem
        name = by_slug.get(slug)
        if name is None:
            notices.append(
                f"{EXECUTION_DIR}/{path.name}: no roster name has this slug: the agent is named {slug!r}"
            )
            name = slug
        log = _with_folds(parse_log(text or "", f"{EXECUTION_DIR}/{path.name}"), zone)
        logs.append(ExecutionLog(slug, name, log))
    return tuple(logs)


def _read_legacy_history(data_dir: Path, notices: list[str]) -> int | None:
    text = _read_text(data_dir / LEGACY_HISTORY, data_dir)
    if text is None:
        return None
    data, _problem = _parse_json(text)
    count = len(data) if isinstance(data, list) else 0
    notices.append(
        f"{LEGACY_HISTORY}: the pre-log history format ({count} messages, a JSON array of "
        "{role, content}, used before the conversation log existed): noticed, not imported"
    )
    return count


def read_openpoke(path: Path | str) -> OpenPokeData:
    """Read the data dir at ``path`` (or ``path/server/data``)."""
    data_dir = find_data_dir(path)
    notices: list[str] = []
    timezone = _read_timezone(data_dir, notices)
    zone = ZoneInfo(timezone)
    log_text = _read_text(data_dir / CONVERSATION_LOG, data_dir)
    if log_text is None:
        notices.append(f"{CONVERSATION_LOG}: absent: no conversation to import")
    conversation = _with_folds(parse_log(log_text or "", CONVERSATION_LOG), zone)
    if conversation.legacy_lines:
        lines = ", ".join(str(n) for n in conversation.legacy_lines)
        notices.append(
            f"{CONVERSATION_LOG}: line(s) {lines} use the legacy <replies> tag (no timestamp); OpenPoke's "
            "parser accepts them as entries with tag 'replies', so they count as entries here too"
        )
    roster = _read_roster(data_dir, notices)
    execution_logs = _read_execution_logs(data_dir, roster, zone, notices)
    for log in (conversation, *(e.log for e in execution_logs)):
        notice = _fold_notice(log, zone)
        if notice is not None:
            notices.append(notice)
    return OpenPokeData(
        data_dir=data_dir,
        timezone=timezone,
        conversation=conversation,
        working_memory=_read_working_memory(data_dir, conversation, zone, notices),
        execution_logs=execution_logs,
        roster=roster,
        legacy_history=_read_legacy_history(data_dir, notices),
        notices=tuple(notices),
    )
