"""Importing an OpenPoke data dir into a sOAP store, idempotently.

What is written (see :mod:`importers.openpoke._mapping` for the message mapping):

* **The interaction session** (role ``OpenPokeInteraction``): a root context with every
  conversation-log entry. If the working memory holds a summary, a **fork** of the root
  (its compaction event) holds the summary as its first message (metadata tag
  ``conversation_summary`` with ``last_index`` and ``updated_at``) followed by copies of
  the entries after ``last_index``: the working memory as OpenPoke keeps it. That fork
  is the active context; the root keeps the full log. Its ``parent_mutation_counter``
  is the root's counter just after the last summarised entry, the point the summary
  covers. A later summary (OpenPoke keeps only its latest) becomes a new fork beside the
  older ones, which stay as they were.
* **One session per execution agent** (role ``OpenPokeExecution``): ``agent_request`` →
  user, ``agent_response`` → assistant, ``agent_action`` → assistant with a ``tool_use``
  part when it reads ``Calling <tool> with: <args>`` (the arguments are OpenPoke's first
  200 characters, not always valid JSON), and ``tool_response`` → a ``tool_result``
  message answering the oldest unanswered call of that tool (``<tool>: <result>``; a
  response with no such call stays a user message). Every such message is hidden.
* **Invocation records** linking them, one per turn of the interaction agent and one per
  hand-off to an execution agent (rules in :mod:`importers.openpoke._links`).

Ids are deterministic (uuid5 of the data dir and the entries), and soap_core's writer
leaves a file alone when its content is unchanged, so a second import of the same dir
writes nothing, and an import after the log grew appends the new entries to the same
contexts. Contexts the importer did not make (replay forks, say) are kept as they are.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from importers._errors import ImporterError
from importers._store import open_store, write_records
from importers.openpoke._links import Imported, link_records
from importers.openpoke._log import LogEntry, SkippedLine
from importers.openpoke._mapping import (
    EXECUTION_ROLE,
    INTERACTION_OBJECT,
    INTERACTION_ROLE,
    INTERACTION_ROLES,
    SOURCE,
    STATE_KEY,
    SUMMARY_TAG,
    UNKNOWN_TAG_ROLE,
    entry_key,
    entry_message,
    imported_message,
    openpoke_state,
    stable_id,
)
from importers.openpoke._reader import (
    CONVERSATION_LOG,
    WORKING_MEMORY_LOG,
    ExecutionLog,
    OpenPokeData,
    WorkingMemory,
    parse_local,
    read_openpoke,
)
from importers.openpoke._roster import roster_history
from soap_core import (
    DEFAULT_ANCHORS,
    MESSAGES_ANCHOR,
    SESSION_FILE,
    SOURCE_KEY,
    TOOL_RESULT_SUFFIX,
    Context,
    Message,
    Session,
    Store,
    TextPart,
    ToolResultPart,
    ToolUsePart,
)

_ACTION = re.compile(r"Calling (\S+) with: (.*)", re.DOTALL)


@dataclass
class SessionReport:
    """What one import did to one session."""

    role: str
    uuid: str
    name: str
    status: str
    """created, updated or unchanged."""
    messages: int
    appended: int
    """Messages new in the root context (all of them for a new session)."""
    rewritten_from: int | None = None
    """Set when the log no longer starts with what was imported before: the first entry
    index that differs (the context was rebuilt from there)."""
    files_written: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class SummaryReport:
    """The working memory's summary and the fork that holds it."""

    last_index: int
    updated_at: str | None
    unsummarised: int
    """Entries in the working memory's tail."""
    context_id: str | None
    """The fork holding it (None when no interaction session was written)."""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ImportReport:
    """What was read and what was written; ``as_dict`` is the ``--json`` output."""

    data_dir: Path
    store_dir: Path
    timezone: str
    entries: int
    """Conversation-log entries (lines that parse)."""
    skipped: list[SkippedLine]
    roster: list[str]
    execution_agents: dict[str, int]
    """Entries per execution-agent log, by agent name."""
    summary: SummaryReport | None
    sessions: list[SessionReport]
    interaction_session: str | None
    execution_sessions: dict[str, str]
    """Session uuid by agent name."""
    invocations: int
    invocations_written: int
    legacy_history: int | None
    notices: list[str]

    @property
    def files_written(self) -> list[str]:
        return [f for s in self.sessions for f in s.files_written]

    @property
    def changed(self) -> bool:
        return bool(self.files_written) or self.invocations_written > 0

    def as_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)  # every field, in its order
        data.update(
            data_dir=str(self.data_dir),
            store_dir=str(self.store_dir),
            skipped=[asdict(s) for s in self.skipped],
            summary=self.summary.as_dict() if self.summary else None,
            sessions=[s.as_dict() for s in self.sessions],
        )
        return {**data, "changed": self.changed}


# -- sessions -----------------------------------------------------------------------------


def _session_uuid(kind: str, data: OpenPokeData, first: LogEntry, *scope: object) -> str:
    """``YYYYMMDD-<uuid5>``: the date of the first entry, as peteos dates new sessions.
    The first entry is part of the identity: a log OpenPoke cleared and began again is a
    new conversation, so it becomes a new session."""
    base = stable_id(kind, data.data_dir, *scope, *entry_key(first))
    local = parse_local(first.timestamp)
    return f"{local:%Y%m%d}-{base}" if local else base


def _new_context(context_id: str) -> Context:
    """An empty context with the default anchors: a root, or a summary fork before its messages."""
    context = Context(context_id)
    for name in DEFAULT_ANCHORS:
        context.add_anchor(name, 0)
    return context


def _existing(store: Store, role: str, session_uuid: str) -> tuple[Session | None, Session, Context | None]:
    """The session as stored (None when new), the session to write (that one, else a new
    one) and its imported root context as it was (None when new)."""
    stored = (store.session_dir(role, session_uuid) / SESSION_FILE).is_file()
    existing = store.load_session(session_uuid, require_active=False) if stored else None
    session = existing or Session(role, session_uuid)
    return existing, session, session.contexts.get(stable_id(session_uuid, "root"))


def _compare(old: Context | None, new: Context) -> tuple[int, int | None]:
    """(messages appended, first differing index or None) of ``new`` against ``old``."""
    if old is None:
        return len(new.messages), None
    pairs = enumerate(zip(old.messages, new.messages, strict=False))
    common = next((i for i, (a, b) in pairs if a.id != b.id), min(len(old.messages), len(new.messages)))
    return len(new.messages) - common, common if common < len(old.messages) else None


def _save(
    store: Store,
    session: Session,
    existing: Session | None,
    name: str,
    root: Context,
    old_root: Context | None,
    state: dict[str, Any],
) -> tuple[Imported, SessionReport]:
    """Mark ``session`` as imported with ``state`` and write it."""
    session.state_data = {**session.state_data, SOURCE_KEY: SOURCE, STATE_KEY: state}
    appended, rewritten = _compare(old_root, root)
    written = store.save_session(session)
    status = "created" if existing is None else "updated" if written else "unchanged"
    root_dir = store.root
    directory = session.directory or store.session_dir(session.role, session.uuid)
    return Imported(session, root, directory), SessionReport(
        role=session.role,
        uuid=session.uuid,
        name=name,
        status=status,
        messages=len(root.messages),
        appended=appended,
        rewritten_from=rewritten,
        files_written=[
            str(p.relative_to(root_dir)) if p.is_relative_to(root_dir) else str(p) for p in written
        ],
    )


def _local_iso(moment: datetime | None, zone: ZoneInfo) -> str | None:
    """``moment`` as a naive local ISO time in ``zone``; None past the year 9999 there."""
    try:
        return moment.astimezone(zone).replace(tzinfo=None).isoformat() if moment else None
    except OverflowError:
        return None


def _summary_message(session_uuid: str, memory: WorkingMemory, zone: ZoneInfo) -> Message:
    meta = {
        "tag": SUMMARY_TAG,
        "last_index": memory.last_index,
        "updated_at": memory.updated_at_raw,
        "hidden": True,
    }
    message_id = stable_id(session_uuid, "summary-message", memory.last_index, memory.updated_at_raw)
    return imported_message(
        "user", [TextPart(memory.summary)], message_id, meta, _local_iso(memory.updated_at, zone)
    )


def _summary_fork(session_uuid: str, root: Context, memory: WorkingMemory, zone: ZoneInfo) -> Context:
    fork = _new_context(stable_id(session_uuid, "summary", memory.last_index, memory.updated_at_raw))
    fork.origin_context_id = root.id
    covered = len(DEFAULT_ANCHORS) + memory.last_index + 1  # anchors, then one value per entry
    fork.parent_mutation_counter = min(covered, root.mutation_counter)
    fork.append(_summary_message(session_uuid, memory, zone))
    for message in root.messages[memory.last_index + 1 :]:
        fork.append(message.copy())
    return fork


def _check_tail(data: OpenPokeData, memory: WorkingMemory, notices: list[str]) -> None:
    """The working memory mirrors the log after ``last_index``; say where it does not."""
    start = memory.last_index + 1
    expected = [(e.tag, e.timestamp, e.text) for e in data.entries[start:]]
    tail = [(e.tag, e.timestamp, e.text) for e in memory.entries]
    if start > len(data.entries):
        notices.append(
            f"{WORKING_MEMORY_LOG}: last_index {memory.last_index} lies beyond the log's "
            f"{len(data.entries)} entries (the log was cleared or replaced?)"
        )
    elif tail != expected:
        where = next((i for i, (a, b) in enumerate(zip(tail, expected, strict=False)) if a != b), None)
        detail = (
            f"first difference at tail entry {where}" if where is not None else "one is a prefix of the other"
        )
        notices.append(
            f"{WORKING_MEMORY_LOG}: its {len(tail)} entries differ from the log's {len(expected)} entries "
            f"after index {memory.last_index} ({detail}); materialization renders from the log"
        )


def _interaction_root(session_uuid: str, data: OpenPokeData, notices: list[str]) -> Context:
    root = _new_context(stable_id(session_uuid, "root"))
    unknown: dict[str, int] = {}
    for entry in data.entries:
        role, hidden = INTERACTION_ROLES.get(entry.tag, UNKNOWN_TAG_ROLE)
        if entry.tag not in INTERACTION_ROLES:
            unknown.setdefault(entry.tag, entry.line)
        root.append(entry_message(entry, role, hidden, stable_id(session_uuid, "entry", *entry_key(entry))))
    for tag, line in unknown.items():
        notices.append(f"{CONVERSATION_LOG}:{line}: unknown tag <{tag}> (kept as a hidden user-side entry)")
    untimed = [str(e.line) for e in data.entries if parse_local(e.timestamp) is None]
    if untimed:
        notices.append(
            f"{CONVERSATION_LOG}: line(s) {', '.join(untimed[:10])}{' …' if len(untimed) > 10 else ''} "
            "have no timestamp of the form YYYY-MM-DD HH:MM:SS (their messages have no creation time)"
        )
    return root


def _import_interaction(
    store: Store, data: OpenPokeData, openpoke_root: str | None, notices: list[str]
) -> tuple[Imported, SessionReport, SummaryReport | None]:
    session_uuid = _session_uuid("interaction", data, data.entries[0])
    existing, session, old_root = _existing(store, INTERACTION_ROLE, session_uuid)
    root = _interaction_root(session_uuid, data, notices)
    root.children = list(old_root.children) if old_root else []
    memory = data.working_memory
    fork: Context | None = None
    if memory is not None:
        _check_tail(data, memory, notices)
        if memory.has_summary:
            fork = _summary_fork(session_uuid, root, memory, data.zone)
            if fork.id not in root.children:
                root.children.append(fork.id)
            session.add_context(fork)
    session.add_context(root)
    session.active_context_id = (fork or root).id
    state = {
        "kind": "interaction",
        "data_dir": str(data.data_dir),
        "log": CONVERSATION_LOG,
        "timezone": data.timezone,
        "roster": list(data.roster),
        "roster_history": roster_history(data),
        "root_context_id": root.id,
        "openpoke_root": openpoke_root or openpoke_state(session).get("openpoke_root"),
    }
    imported, report = _save(store, session, existing, INTERACTION_OBJECT, root, old_root, state)
    summary = None
    if memory is not None and memory.has_summary:
        summary = SummaryReport(
            memory.last_index, memory.updated_at_raw, len(memory.entries), fork.id if fork else None
        )
    return imported, report, summary


def _pop_call(pending: dict[str, list[tuple[Message, str]]], text: str) -> tuple[Message, str] | None:
    tool, sep, _ = text.partition(": ")
    calls = pending.get(tool) if sep else None
    return calls.pop(0) if calls else None


def _execution_root(session_uuid: str, log: ExecutionLog) -> Context:
    root = _new_context(stable_id(session_uuid, "root"))
    pending: dict[str, list[tuple[Message, str]]] = {}
    for entry in log.log.entries:
        message_id = stable_id(session_uuid, "entry", *entry_key(entry))
        action = _ACTION.fullmatch(entry.text) if entry.tag == "agent_action" else None
        owner = _pop_call(pending, entry.text) if entry.tag == "tool_response" else None
        if action is not None:
            call_id = f"call_{entry.index}"
            parts = [TextPart(entry.text), ToolUsePart(call_id, action[1], action[2])]
            message = root.append(entry_message(entry, "assistant", True, message_id, parts))
            pending.setdefault(action[1], []).append((message, call_id))
        elif owner is not None:
            assistant, call_id = owner
            anchor = assistant.id + TOOL_RESULT_SUFFIX
            root.add_anchor(anchor, root.anchor_index(MESSAGES_ANCHOR), after_existing=False)
            result = [ToolResultPart(call_id, entry.text)]
            root.append(entry_message(entry, "tool_result", True, message_id, result), anchor)
        else:
            role = "assistant" if entry.tag in ("agent_action", "agent_response") else "user"
            root.append(entry_message(entry, role, True, message_id))
    return root


def _import_execution(
    store: Store, data: OpenPokeData, log: ExecutionLog, interaction: str | None
) -> tuple[Imported, SessionReport]:
    session_uuid = _session_uuid("execution", data, log.log.entries[0], log.slug)
    existing, session, old_root = _existing(store, EXECUTION_ROLE, session_uuid)
    root = _execution_root(session_uuid, log)
    root.children = list(old_root.children) if old_root else []
    session.add_context(root)
    session.active_context_id = root.id
    state = {
        "kind": "execution",
        "data_dir": str(data.data_dir),
        "log": log.log.file,
        "timezone": data.timezone,
        "agent": log.name,
        "slug": log.slug,
        "root_context_id": root.id,
        "interaction_session": interaction,
    }
    return _save(store, session, existing, log.name, root, old_root, state)


# -- the import ---------------------------------------------------------------------------


def _checkout(openpoke_root: Path | str | None) -> str | None:
    if openpoke_root is None:
        return None
    path = Path(openpoke_root).expanduser()
    if not path.is_dir():
        raise ImporterError(path, "--openpoke-root: no such directory (give an OpenPoke checkout)")
    return str(path.resolve())


def import_openpoke(
    data_dir: Path | str, store_dir: Path | str, *, openpoke_root: Path | str | None = None
) -> ImportReport:
    """Import the OpenPoke data dir ``data_dir`` (or ``data_dir/server/data``) into the
    store at ``store_dir`` (created if missing; a temporary folder works as well).

    ``openpoke_root``, an OpenPoke checkout, is remembered in the interaction session so
    that materialization can read the real system prompt; an import without it keeps
    the one given before.
    """
    data = read_openpoke(data_dir)
    checkout = _checkout(openpoke_root)
    store = open_store(store_dir)
    notices = list(data.notices)
    interaction: Imported | None = None
    reports: list[SessionReport] = []
    summary = None
    if data.entries:
        interaction, report, summary = _import_interaction(store, data, checkout, notices)
        reports.append(report)
    elif data.working_memory is not None and data.working_memory.has_summary:
        memory = data.working_memory
        summary = SummaryReport(memory.last_index, memory.updated_at_raw, len(memory.entries), None)
    executions: list[tuple[ExecutionLog, Imported]] = []
    for log in data.execution_logs:
        if log.log.entries:
            execution, report = _import_execution(
                store, data, log, interaction.session.uuid if interaction else None
            )
            executions.append((log, execution))
            reports.append(report)
    records = link_records(interaction, executions, data.entries, data.zone)
    return ImportReport(
        data_dir=data.data_dir,
        store_dir=store.root,
        timezone=data.timezone,
        entries=len(data.entries),
        skipped=data.skipped(),
        roster=list(data.roster),
        execution_agents={log.name: len(log.log.entries) for log in data.execution_logs},
        summary=summary,
        sessions=reports,
        interaction_session=interaction.session.uuid if interaction else None,
        execution_sessions={log.name: e.session.uuid for log, e in executions},
        invocations=len(records),
        invocations_written=write_records(records),
        legacy_history=data.legacy_history,
        notices=notices,
    )
