"""A LangGraph checkpoint database into a sOAP store: a session per thread, the
checkpoint lineage as contexts, a recorded call per model answer.

* **Contexts.** A thread's checkpoints form a tree (``parent_checkpoint_id``). A
  checkpoint continues its parent's context when it is the parent's first child, its
  messages extend the parent's, and it is not an ``update`` or ``fork`` checkpoint; any
  other checkpoint starts a fork of its parent's context at the last message the two
  share (those messages copied with their ids, so calls before the branch point stay the
  parent's and each branch's own calls sit on it). The thread's first checkpoint starts
  the main context.
* **Calls.** An ``AIMessage`` that first appears in a ``loop`` checkpoint was produced
  by a node's model call: one call record each, its request the messages before it as
  ChatOpenAI sends them (what the file holds: no system prompt, no tools, the model as
  the answer named it), its answer, usage and times (the checkpoints' before and after).
  With the app's graph, the request recorded is the whole body the graph builds from the
  checkpoint before the call (:class:`importers.langgraph._graph.BodyBuilder`), for the
  new calls and for those an import without the graph recorded with their messages alone.
* **Idempotent.** Session, context, message and record ids come from the thread, its
  first checkpoint and positions; importing the same database again writes nothing, a
  grown one appends its new messages, contexts and calls.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from importers._store import open_store
from importers.langgraph._checkpoints import (
    Checkpoint,
    Decoder,
    LcMessage,
    Thread,
    langgraph_installed,
    read_threads,
)
from importers.langgraph._code import load_graph
from importers.langgraph._graph import BodyBuilder
from importers.langgraph._messages import META_KEY, append_message, message_of, sent_form
from replay import FRAMEWORK_CODE_KEY
from soap_core import (
    DEFAULT_ANCHORS,
    SESSION_FILE,
    SOURCE_KEY,
    CallRecord,
    Context,
    Message,
    Session,
    Store,
    request_hash,
    set_app_branch,
    write_call,
)

SOURCE = "langgraph"
STATE_KEY = "langgraph"
ROLE = "langgraph"
_NAMESPACE = uuid.UUID("2b8f3c1e-7d4a-4e55-9c0b-5a1f6e2d8c37")


def stable_id(*parts: object) -> str:
    return str(uuid.uuid5(_NAMESPACE, "\x1f".join(str(p) for p in parts)))


def _stamp(ts: str) -> str:
    try:
        return datetime.fromisoformat(ts).strftime("%Y%m%dT%H%M%S%f")
    except ValueError:
        return "19700101T000000000000"


@dataclass
class _Plan:
    """One context as the checkpoints make it: where it forks, its messages, and the
    checkpoint at which each of its own messages first appeared."""

    id: str
    first: Checkpoint
    parent: _Plan | None
    shared: int
    messages: list[LcMessage]
    appeared: list[Checkpoint]
    """Per message (own ones only, from ``shared`` on): the checkpoint it first appeared in."""
    checkpoints: list[Checkpoint] = field(default_factory=list)


def _same(a: Sequence[LcMessage], b: Sequence[LcMessage]) -> int:
    """How many first messages ``a`` and ``b`` share."""
    count = 0
    for left, right in zip(a, b, strict=False):
        if left != right:
            break
        count += 1
    return count


def plan_contexts(thread: Thread, session_uuid: str) -> list[_Plan]:
    """The thread's contexts, main first, each fork after the context it forks."""
    by_id = {c.id: c for c in thread.checkpoints}
    plan_of: dict[str, _Plan] = {}
    plans: list[_Plan] = []
    for checkpoint in thread.checkpoints:  # oldest first: a parent before its children
        parent = by_id.get(checkpoint.parent_id or "")
        messages = checkpoint.messages
        if parent is None:
            plan = _Plan(stable_id(session_uuid, "context", checkpoint.id), checkpoint, None, 0, [], [])
            plans.append(plan)
        else:
            owner = plan_of[parent.id]
            before = owner.messages if owner.checkpoints[-1] is parent else _messages_at(owner, parent)
            messages = before if messages is None else messages
            shared = _same(before, messages)
            continues = (
                shared == len(before)
                and parent.children[0] == checkpoint.id
                and owner.checkpoints[-1] is parent
                and checkpoint.source not in ("update", "fork")
            )
            if continues:
                plan = owner
            else:
                plan = _Plan(
                    stable_id(session_uuid, "context", checkpoint.id), checkpoint, owner, shared, [], []
                )
                plan.messages = list(messages[:shared])
                plans.append(plan)
        messages = plan.messages if messages is None else messages
        grown = messages[len(plan.messages) :]
        plan.messages = list(messages)
        plan.appeared.extend([checkpoint] * len(grown))
        plan.checkpoints.append(checkpoint)
        plan_of[checkpoint.id] = plan
    return plans


def _messages_at(plan: _Plan, checkpoint: Checkpoint) -> list[LcMessage]:
    """The messages a context held at one of its (earlier) checkpoints."""
    if checkpoint.messages is not None:
        return list(checkpoint.messages)
    index = plan.checkpoints.index(checkpoint)
    for earlier in reversed(plan.checkpoints[:index]):
        if earlier.messages is not None:
            return list(earlier.messages)
    return plan.messages[: plan.shared]


# -- sessions ---------------------------------------------------------------------------


@dataclass
class SessionReport:
    role: str
    uuid: str
    thread: str
    status: str
    """created, updated or unchanged."""
    checkpoints: int
    contexts: int
    messages_added: int
    calls: int
    calls_added: int
    calls_rebuilt: int = 0
    """Calls recorded before with their messages alone, now with the graph's whole body."""
    files_written: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ImportReport:
    db: str
    decoder: str
    graph: str | None
    sessions: list[SessionReport]
    notices: list[str]

    @property
    def changed(self) -> bool:
        return any(
            s.files_written or s.calls_added or s.calls_rebuilt or s.messages_added for s in self.sessions
        )

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "sessions": [s.as_dict() for s in self.sessions], "changed": self.changed}


def session_uuid_of(thread: Thread) -> str:
    first = thread.checkpoints[0]
    day = _stamp(first.ts)[:8]
    return f"{day}-{stable_id('session', thread.thread_id, first.id)}"


def _new_context(context_id: str) -> Context:
    context = Context(context_id)
    for name in DEFAULT_ANCHORS:
        context.add_anchor(name, 0)
    return context


def _soap_message(plan: _Plan, position: int, lc: LcMessage, writers: dict[str, str]) -> Message:
    checkpoint = plan.appeared[position - plan.shared]
    message = message_of(lc)
    message.id = stable_id(plan.id, "message", position)
    message.creation_timestamp = checkpoint.ts or None
    meta = dict((message.metadata or {})[META_KEY])
    meta["checkpoint"] = checkpoint.id
    if checkpoint.parent_id:
        meta["before"] = checkpoint.parent_id
        if checkpoint.parent_id in writers:  # the node whose write made the checkpoint
            meta["node"] = writers[checkpoint.parent_id]
    message.metadata = {META_KEY: meta}
    return message


def _fill(
    session: Session, plan: _Plan, writers: dict[str, str], notices: list[str], where: str
) -> tuple[Context, int]:
    """The context of ``plan`` in ``session`` (made if new), grown to the plan's
    messages; how many messages were added."""
    context = session.contexts.get(plan.id)
    if context is None:
        context = _new_context(plan.id)
        if plan.parent is not None:
            parent = session.contexts[plan.parent.id]
            for message in parent.messages[: plan.shared]:
                append_message(context, message.copy())
            context.origin_context_id = parent.id
            context.parent_mutation_counter = (
                parent.messages[plan.shared - 1].sequence_number or 0 if plan.shared else 0
            )
            if context.id not in parent.children:
                parent.children.append(context.id)
            if plan.first.source in ("update", "fork"):  # the app's branch, not a compaction
                set_app_branch(context, "langgraph", plan.first.source)
        session.add_context(context)
    have = len(context.messages)
    for position in range(plan.shared, min(have, len(plan.messages))):
        kept = (context.messages[position].metadata or {}).get(META_KEY, {}).get("message")
        if kept != plan.messages[position]:
            notices.append(
                f"{where}: message {position} of context {plan.id} differs from the store's "
                "(the database was rewritten?); the store's is kept"
            )
            return context, 0
    if have > len(plan.messages):
        notices.append(f"{where}: context {plan.id} has more messages in the store than the database holds")
    for position in range(have, len(plan.messages)):
        append_message(context, _soap_message(plan, position, plan.messages[position], writers))
    return context, max(0, len(plan.messages) - have)


def file_request(messages: Sequence[Message], model: str | None) -> dict[str, Any]:
    """The body the file alone rebuilds for ``messages``: what ChatOpenAI sends after the
    system prompt, with the model the answer named."""
    body: dict[str, Any] = {} if model is None else {"model": model}
    body["messages"] = [wire for m in messages if not m.is_special for wire in sent_form(m)]
    return body


def _response(lc: LcMessage) -> dict[str, Any]:
    """The Chat Completions response the answer came from, as far as the message keeps it."""
    meta = lc.get("response_metadata") or {}
    message: dict[str, Any] = {"role": "assistant", "content": lc.get("content") or None}
    calls = [w for w in sent_form(message_of(lc)) if w.get("tool_calls")]
    if calls:
        message["tool_calls"] = calls[0]["tool_calls"]
    usage = meta.get("token_usage")
    response: dict[str, Any] = {
        "id": meta.get("id"),
        "object": "chat.completion",
        "model": meta.get("model_name"),
        "choices": [{"index": 0, "message": message, "finish_reason": meta.get("finish_reason")}],
    }
    if isinstance(usage, dict):
        response["usage"] = usage
    return response


def _seconds(start: str, end: str) -> float | None:
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except ValueError:
        return None


def _calls(session: Session, plan: _Plan, context: Context, thread: Thread) -> list[CallRecord]:
    """A record per answer a model node produced in ``plan``'s own messages."""
    by_id = {c.id: c for c in thread.checkpoints}
    records = []
    for position in range(plan.shared, len(plan.messages)):
        lc = plan.messages[position]
        checkpoint = plan.appeared[position - plan.shared]
        if lc.get("lc_class") != "AIMessage" or checkpoint.source != "loop":
            continue
        before = by_id.get(checkpoint.parent_id or "")
        model = (lc.get("response_metadata") or {}).get("model_name")
        request = file_request(context.messages[:position], model)
        usage = lc.get("response_metadata", {}).get("token_usage") or lc.get("usage_metadata")
        started = before.ts if before is not None else checkpoint.ts
        records.append(
            CallRecord(
                id=f"{_stamp(started)}-{stable_id(plan.id, 'call', position)[:8]}",
                session=session.uuid,
                role=session.role,
                context_id=context.id,
                message_index=position,
                request=request,
                request_hash=request_hash(request),
                started_at=started,
                message_id=context.messages[position].id,
                ended_at=checkpoint.ts,
                latency_s=_seconds(started, checkpoint.ts),
                response=_response(lc),
                usage=usage if isinstance(usage, dict) else None,
            )
        )
    return records


def _with_bodies(
    records: list[CallRecord],
    context_of: dict[str, Context],
    thread: Thread,
    bodies: BodyBuilder,
    notices: list[str],
) -> None:
    """Each record's request made the whole body the app's graph builds for it (from the
    checkpoint before the call), where the graph's messages end with the file's."""
    for record in records:
        answer = context_of[record.context_id].messages[record.message_index]
        meta = (answer.metadata or {}).get(META_KEY) or {}
        before = meta.get("before") if isinstance(meta, dict) else None
        body = bodies.body(thread.thread_id, str(before)) if before else None
        sent = body.get("messages", []) if body is not None else []
        chat = record.request["messages"]
        if body is None or sent[len(sent) - len(chat) :] != chat:
            notices.append(
                f"thread {thread.thread_id}: the graph {bodies.code} did not rebuild call {record.id} "
                "(no model call from its checkpoint, or other messages): the messages alone are kept"
            )
            continue
        record.request, record.request_hash = body, request_hash(body)


def _existing(store: Store, session_uuid: str) -> Session | None:
    stored = (store.session_dir(ROLE, session_uuid) / SESSION_FILE).is_file()
    return store.load_session(session_uuid, require_active=False) if stored else None


def _import_thread(
    store: Store, db: Path, thread: Thread, bodies: BodyBuilder | None, notices: list[str]
) -> SessionReport | None:
    if not thread.checkpoints:
        return None
    session_uuid = session_uuid_of(thread)
    existing = _existing(store, session_uuid)
    session = existing or Session(ROLE, session_uuid)
    known = {c.id: c for c in session.calls()} if existing is not None else {}
    plans = plan_contexts(thread, session_uuid)
    where = f"{db}: thread {thread.thread_id}"
    added = 0
    new: list[CallRecord] = []
    alone: list[CallRecord] = []
    """Calls recorded before with the messages alone (an import without the graph)."""
    total = 0
    context_of: dict[str, Context] = {}
    for plan in plans:
        context, grown = _fill(session, plan, thread.writers, notices, where)
        context_of[context.id] = context
        added += grown
        calls = _calls(session, plan, context, thread)
        total += len(calls)
        new.extend(c for c in calls if c.id not in known)
        alone.extend(c for c in calls if c.id in known and known[c.id].request == c.request)
    rebuilt: list[CallRecord] = []
    if bodies is not None:
        _with_bodies(new, context_of, thread, bodies, notices)
        for record in alone:  # the graph given now: their whole bodies
            _with_bodies([record], context_of, thread, bodies, notices)
            if record.request != known[record.id].request:
                rebuilt.append(record)
    main = session.contexts[plans[0].id]
    if session.active_context_id is None:
        session.active_context_id = main.id
    state = {"db": str(db), "thread": thread.thread_id}
    session.state_data = {**session.state_data, SOURCE_KEY: SOURCE, STATE_KEY: state}
    if bodies is not None:
        session.state_data[FRAMEWORK_CODE_KEY] = bodies.code
    written = store.save_session(session)
    directory = session.directory or store.session_dir(ROLE, session_uuid)
    for record in [*new, *rebuilt]:
        write_call(directory, record)
    status = "created" if existing is None else "updated" if written or new or rebuilt else "unchanged"
    return SessionReport(
        role=ROLE,
        uuid=session_uuid,
        thread=thread.thread_id,
        status=status,
        checkpoints=len(thread.checkpoints),
        contexts=len(plans),
        messages_added=added,
        calls=total,
        calls_added=len(new),
        calls_rebuilt=len(rebuilt),
        files_written=[
            str(p.relative_to(store.root)) if p.is_relative_to(store.root) else str(p) for p in written
        ],
    )


def import_langgraph(
    db: Path | str, store_dir: Path | str, *, graph: str | None = None, decoder: Decoder | None = None
) -> ImportReport:
    """Import every thread of the LangGraph ``SqliteSaver`` database ``db`` into the store
    at ``store_dir``. ``graph`` (``MODULE:ATTR``, the app's compiled graph) is remembered
    for materialize (the whole body) and re-runs; LangGraph must then be installed.
    ``decoder`` forces one blob reader (default: LangGraph's when installed)."""
    path = Path(db).expanduser().resolve()
    if graph is not None:
        load_graph(graph)  # a clear error now, not at the first materialize
    notices: list[str] = []
    used = decoder or ("langgraph" if langgraph_installed() else "msgpack")
    threads = read_threads(path, notices, used)
    if not threads:
        notices.append(f"{path}: no checkpoints: nothing to import")
    store = open_store(store_dir)
    reports = []
    with ExitStack() as stack:
        bodies = stack.enter_context(BodyBuilder(graph, path)) if graph is not None else None
        for thread in threads:
            report = _import_thread(store, path, thread, bodies, notices)
            if report is not None:
                reports.append(report)
    return ImportReport(str(path), used, graph, reports, notices)
