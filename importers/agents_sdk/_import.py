"""An OpenAI Agents SDK ``SQLiteSession`` database into a sOAP store.

* **Sessions**: one per ``session_id``. Its key is the session id, the time
  ``agent_sessions`` says it was created and its first item: a copy of the database
  (another path, the same rows) imports into the same session, while two databases that
  both use the SDK's usual ids (``"default"``, a user id) do not meet by name alone.
* **Messages**: a user item is a user message, one model answer (its ``message``,
  ``function_call`` and ``reasoning`` items) an assistant message, each
  ``function_call_output`` a tool result. Every message keeps the items and rows it came
  from; handoffs (an output ``{"assistant": "X"}``) are marked on the call and its result,
  and each answer after a handoff names the agent that gave it.
* **Recorded calls**: one per model answer, its request rebuilt as the SDK builds it
  (:mod:`importers.agents_sdk._source`), its model from the answer's provider data.

Ids come from the session's key and the row ids (``AUTOINCREMENT``: the SDK never reuses
one), so importing the database again writes nothing and a grown database appends. A
database whose history was rewritten (``pop_item`` and a run again) keeps both: the new
rows become a fork at the last message the two histories share.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from importers._errors import ImporterError
from importers._store import open_store, write_records
from importers.agents_sdk._chat import items_to_messages
from importers.agents_sdk._items import (
    META_KEY,
    SOURCE,
    Row,
    append_message,
    call_id,
    check_item,
    messages_of,
    meta_of,
    stable_id,
    utc_text,
)
from importers.agents_sdk._requests import code_of_agent, request_at
from importers.agents_sdk._turns import turn_records
from replay import FRAMEWORK_CODE_KEY
from soap_core import (
    DEFAULT_ANCHORS,
    SOURCE_KEY,
    CallRecord,
    Context,
    Message,
    Session,
    SoapError,
    Store,
    is_marked,
    request_hash,
    write_call,
)

STATE_KEY = "openai_agents"
DEFAULT_ROLE = "openai-agents"


@dataclass
class DbSession:
    """One ``session_id`` of the database and its readable rows, in order."""

    session_id: str
    created_at: str
    rows: list[Row] = field(default_factory=list)

    @property
    def key(self) -> str:
        first = json.dumps(self.rows[0].item, sort_keys=True) if self.rows else ""
        return "\x1f".join((self.session_id, self.created_at, first))


def read_database(path: Path, notices: list[str]) -> list[DbSession]:
    """The sessions of the database at ``path``, read-only; a row that cannot be read is
    left out with a notice naming it (ImporterError: not such a database at all)."""
    if not path.is_file():
        raise ImporterError(path, "no such file")
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as connection:
            tables = {r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not {"agent_sessions", "agent_messages"} <= tables:
                raise ImporterError(
                    path,
                    "not an OpenAI Agents SDK session database (no agent_sessions/agent_messages tables)",
                )
            created = dict(connection.execute("SELECT session_id, created_at FROM agent_sessions"))
            rows = list(
                connection.execute(
                    "SELECT id, session_id, message_data, created_at FROM agent_messages ORDER BY id"
                )
            )
    except sqlite3.DatabaseError as exc:
        raise ImporterError(path, f"cannot be read as an SQLite database: {exc}") from None
    sessions: dict[str, DbSession] = {}
    for row_id, session_id, data, created_at in rows:
        session = sessions.setdefault(
            str(session_id), DbSession(str(session_id), str(created.get(session_id, "")))
        )
        try:
            item = check_item(json.loads(data))
            items_to_messages([item], None)  # one this importer cannot send is named here
        except (ValueError, TypeError, KeyError, AttributeError) as exc:  # ItemError among them
            notices.append(
                f"{path}: row {row_id} (session {session_id!r}) skipped: {exc}; "
                "the requests after it are rebuilt without it"
            )
            continue
        session.rows.append(Row(int(row_id), utc_text(str(created_at)), item))
    return [s for s in sessions.values() if s.rows]


def _new_context(context_id: str) -> Context:
    context = Context(context_id)
    for name in DEFAULT_ANCHORS:
        context.add_anchor(name, 0)
    return context


def _same(stored: Message, new: Message) -> bool:
    return stored.id == new.id and meta_of(stored).get("rows") == meta_of(new).get("rows")


def place(session: Session, key: str, messages: list[Message]) -> tuple[Context, list[int]]:
    """Lay ``messages`` over the session: appended to the context holding their
    beginning, or a fork of it where the database's history was rewritten; the context
    and the display indices of the messages appended."""
    best, shared = None, -1
    for context in (c for c in session.contexts.values() if not is_marked(c)):
        count = 0
        for stored, new in zip(context.messages, messages, strict=False):
            if not _same(stored, new):
                break
            count += 1
        if count > shared:
            best, shared = context, count
    shared = max(shared, 0)
    if best is None or shared < len(best.messages):
        context = _new_context(
            stable_id(key, "context", messages[shared].id if shared < len(messages) else "")
        )
        if best is not None and shared > 0:
            for message in best.messages[:shared]:
                context.append(message.copy())
            context.origin_context_id = best.id
            context.parent_mutation_counter = best.messages[shared - 1].sequence_number or 0
            best.children.append(context.id)
        if context.id in session.contexts:  # this fork was imported before
            return session.contexts[context.id], []
        session.add_context(context)
    else:
        context = best
    added = [append_message(context, message) for message in messages[shared:]]
    session.active_context_id = context.id
    return context, added


@dataclass
class SessionReport:
    role: str
    uuid: str
    session_id: str
    status: str
    """created, updated or unchanged."""
    messages: int
    messages_added: int
    calls: int
    calls_added: int
    handoffs: int
    turns: int
    """Invocation records, one per ``Runner.run`` (a user item and what followed)."""
    turns_written: int
    contexts: int
    files_written: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ImportReport:
    database: str
    agent: str | None
    sessions: list[SessionReport]
    notices: list[str]

    @property
    def changed(self) -> bool:
        return any(s.files_written or s.calls_added or s.turns_written for s in self.sessions)

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "sessions": [s.as_dict() for s in self.sessions], "changed": self.changed}


def _existing(store: Store, session_uuid: str) -> Session | None:
    try:
        return store.load_session(session_uuid, require_active=False)
    except SoapError:
        return None


def _call_record(
    session: Session, context: Context, index: int, request: dict[str, Any], before: str, key: str
) -> CallRecord:
    answer = context.messages[index]
    meta = meta_of(answer)
    wire = items_to_messages(meta.get("items", []), meta.get("model"))
    response = {
        "id": meta.get("response_id"),
        "object": "chat.completion",
        "model": meta.get("model"),
        "choices": [
            {"index": 0, "message": wire[0] if wire else {"role": "assistant"}, "finish_reason": None}
        ],
    }
    return CallRecord(
        id=call_id(key, answer),
        session=session.uuid,
        role=session.role,
        context_id=context.id,
        message_index=index,
        request=request,
        request_hash=request_hash(request),
        started_at=before,
        message_id=answer.id,
        ended_at=answer.creation_timestamp,
        response=response,
    )


def import_agents_sdk(
    database: Path | str, store_dir: Path | str, *, agent: str | None = None
) -> ImportReport:
    """Import the ``SQLiteSession`` database at ``database`` into the store at
    ``store_dir``. ``agent`` (``MODULE:ATTR``, the app's starting ``Agent``): the calls'
    whole requests are rebuilt with the app's code, and re-runs run it."""
    path = Path(database).expanduser()
    notices: list[str] = []
    start_agent = code_of_agent(agent).name if agent else None  # a clear error before anything is written
    db_sessions = read_database(path, notices)
    store = open_store(store_dir)
    reports = [_import_session(store, s, agent, start_agent) for s in db_sessions]
    if not db_sessions:
        notices.append(f"{path}: no session holds any item: nothing to import")
    return ImportReport(str(path), agent, reports, notices)


def _import_session(store: Store, db: DbSession, agent: str | None, start_agent: str | None) -> SessionReport:
    key = db.key
    day = (db.created_at or db.rows[0].created_at)[:10].replace("-", "")
    session_uuid = f"{day}-{stable_id('session', key)}"
    existing = _existing(store, session_uuid)
    session = existing or Session(start_agent or DEFAULT_ROLE, session_uuid)
    state = {**session.state_data, SOURCE_KEY: SOURCE, STATE_KEY: {"session_id": db.session_id}}
    if agent:
        state[FRAMEWORK_CODE_KEY] = agent
    session.state_data = state
    messages = messages_of(db.rows, lambda group: stable_id(key, "row", group.rows[0].id), start_agent)
    context, added = place(session, key, messages)
    known = {c.id for c in session.calls()} if existing is not None else set()
    directory = session.directory or store.session_dir(session.role, session_uuid)
    turns, of_call = turn_records(session, key, directory, start_agent)
    new: list[CallRecord] = []
    for index, message in enumerate(context.messages):
        if message.role != "assistant" or META_KEY not in (message.metadata or {}):
            continue
        if call_id(key, message) in known:
            continue
        before = context.messages[index - 1].creation_timestamp if index else message.creation_timestamp
        request = request_at(session, context, index)
        record = _call_record(session, context, index, request, before or "", key)
        record.invocation_id = of_call.get(record.id)
        new.append(record)
        known.add(record.id)
    written = store.save_session(session)
    for record in new:
        write_call(directory, record)
    turns_written = write_records(turns)
    changed = written or new or turns_written
    status = "created" if existing is None else "updated" if changed else "unchanged"
    return SessionReport(
        role=session.role,
        uuid=session_uuid,
        session_id=db.session_id,
        status=status,
        messages=len(messages),
        messages_added=len(added),
        calls=sum(1 for m in messages if m.role == "assistant"),
        calls_added=len(new),
        handoffs=sum(1 for m in messages if m.role == "tool_result" and "handoff" in meta_of(m)),
        turns=len(turns),
        turns_written=turns_written,
        contexts=len([c for c in session.contexts.values() if not is_marked(c)]),
        files_written=[
            str(p.relative_to(store.root)) if p.is_relative_to(store.root) else str(p) for p in written
        ],
    )
