"""Traces into a sOAP store: sessions, contexts, recorded calls and invocations.

* **Sessions** by ``session.id`` or ``gen_ai.conversation.id``: a span's own, an
  ancestor's, or any span's of its trace (OpenInference's ``using_session`` reaches only
  the spans it makes); one session per trace where none is named. The session's role is
  its first agent's name.
* **Contexts**: each model call's request is laid over the session's contexts. Where a
  context holds exactly the call's first messages, the call continues it (its new messages,
  then its answer, are appended); where the call shares only a beginning with one, it is a
  fork of that context at the last message they share (an agent that cut or rewrote its
  history); a call that shares nothing starts a root. Message and span times are the
  spans' (UTC).
* **Recorded calls**: one call record per model call, holding the request as the trace
  kept it (the whole body for OpenInference), its answer, usage, times and error.
* **Invocations**: one per agent span (OpenInference ``AGENT``, GenAI ``invoke_agent``),
  nested as the spans nest, each listing the calls made directly in it.

Ids come from the trace and span ids, so importing a file again writes nothing, and a
file that grew (or another file of the same sessions) adds only its new calls.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import takewhile
from pathlib import Path
from typing import Any

from importers._store import open_store, write_records
from importers.otel._calls import Call, model_calls
from importers.otel._messages import (
    META_KEY,
    generic_form,
    keep_form,
    message_of,
    sent_form,
    tools_message,
    was_sent,
)
from importers.otel._otlp import LogRecord, Span, Telemetry, read_otlp
from soap_core import (
    DEFAULT_ANCHORS,
    MESSAGES_ANCHOR,
    SESSION_FILE,
    SOURCE_KEY,
    SYSTEM_PROMPT_ANCHOR,
    TOOL_RESULT_SUFFIX,
    TOOLS_ANCHOR,
    CallRecord,
    Context,
    InvocationRecord,
    Message,
    Party,
    Session,
    Store,
    ToolResultPart,
    canonical_json,
    is_marked,
    request_hash,
    write_call,
)

SOURCE = "otel"
STATE_KEY = "otel"
_NAMESPACE = uuid.UUID("6f9b4a52-3c1e-4f0a-9a57-0be1d7c2a9e4")
_SESSION_KEYS = ("session.id", "gen_ai.conversation.id")
_ROLE_CHARACTERS = re.compile(r"[^A-Za-z0-9_.-]+")


def stable_id(*parts: object) -> str:
    return str(uuid.uuid5(_NAMESPACE, "\x1f".join(str(p) for p in parts)))


def utc_text(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat()


def span_record_id(span: Span) -> str:
    """The id of the record a span becomes (a call or an invocation): its trace and span
    ids name it wherever it is imported."""
    return record_id(span.start_ns, span.trace_id, span.span_id)


def record_id(ns: int, *key: object) -> str:
    """Like the runtime's record ids (a UTC time, then 8 hex digits), deterministic."""
    stamp = datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y%m%dT%H%M%S%f")
    return f"{stamp}-{uuid.UUID(stable_id(*key)).hex[:8]}"


def is_agent(span: Span) -> bool:
    attributes = span.attributes
    return attributes.get("openinference.span.kind") == "AGENT" or attributes.get(
        "gen_ai.operation.name"
    ) in (
        "invoke_agent",
        "create_agent",
    )


def is_tool(span: Span) -> bool:
    attributes = span.attributes
    return attributes.get("openinference.span.kind") == "TOOL" or attributes.get("gen_ai.operation.name") == (
        "execute_tool"
    )


_FROM_TOOL_SPAN = "tool span"


def _from_tool_span(message: Message) -> bool:
    meta = (message.metadata or {}).get(META_KEY)
    return isinstance(meta, dict) and meta.get("from") == _FROM_TOOL_SPAN


@dataclass
class SessionReport:
    role: str
    uuid: str
    session_id: str
    status: str
    """created, updated or unchanged."""
    calls: int
    calls_added: int
    tool_results: int
    """Results taken from tool spans (those no later request of the trace sends)."""
    contexts: int
    files_written: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ImportReport:
    files: list[str]
    spans: int
    logs: int
    calls: int
    flavours: dict[str, int]
    sessions: list[SessionReport]
    invocations: int
    invocations_written: int
    notices: list[str]

    @property
    def changed(self) -> bool:
        return (
            any(s.files_written or s.calls_added or s.tool_results for s in self.sessions)
            or self.invocations_written > 0
        )

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "sessions": [s.as_dict() for s in self.sessions], "changed": self.changed}


class _Trace:
    """The spans of a telemetry, by id, and the session and agent each span belongs to.
    Each answer is kept, so a walk up stops where an earlier one went: linear in the spans
    however deep they nest."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.spans = {(s.trace_id, s.span_id): s for s in telemetry.spans}
        self._trace_session: dict[str, str] = {}
        for span in telemetry.spans:
            named = _named_session(span)
            if named is not None:
                self._trace_session.setdefault(span.trace_id, named)
        self._session: dict[tuple[str, str], str | None] = {}
        self._agent: dict[tuple[str, str], Span | None] = {}

    def parent(self, span: Span) -> Span | None:
        return self.spans.get((span.trace_id, span.parent_id)) if span.parent_id else None

    def _up(self, span: Span, known: dict[tuple[str, str], Any], own: Any) -> Any:
        """The first ``own(s)`` that is not None for ``span`` and then its ancestors (a
        loop of parents ends the walk), kept for every span walked."""
        walked: list[tuple[str, str]] = []
        current: Span | None = span
        found = None
        while current is not None:
            key = (current.trace_id, current.span_id)
            if key in known:
                found = known[key]
                break
            if key in walked:
                break
            walked.append(key)
            found = own(current)
            if found is not None:
                break
            current = self.parent(current)
        for key in walked:
            known[key] = found
        return found

    def session_of(self, span: Span) -> str:
        named = self._up(span, self._session, _named_session)
        return (
            str(named)
            if named is not None
            else self._trace_session.get(span.trace_id, f"trace {span.trace_id}")
        )

    def agent_of(self, span: Span) -> Span | None:
        """The nearest agent span above ``span`` (not ``span`` itself)."""
        parent = self.parent(span)
        if parent is None:
            return None
        found: Span | None = self._up(parent, self._agent, lambda s: s if is_agent(s) else None)
        return found


def _named_session(span: Span) -> str | None:
    named = next((span.attributes[k] for k in _SESSION_KEYS if span.attributes.get(k)), None)
    return None if named is None else str(named)


def _agent_id(span: Span) -> str:
    """The agent object a span ran: ``gen_ai.agent.id``, else its name, else the span's."""
    return str(
        span.attributes.get("gen_ai.agent.id") or span.attributes.get("gen_ai.agent.name") or span.name
    )


def _role(agents: Sequence[Span], spans: Sequence[Span]) -> str:
    """The session's first agent's name (``gen_ai.agent.name`` or the span's), else the
    traced service's, as a plain folder name."""
    first = min(agents, key=lambda s: s.start_ns) if agents else None
    name = (
        str(first.attributes.get("gen_ai.agent.name") or first.name)
        if first is not None
        else str(spans[0].resource.get("service.name") or "otel")
    )
    return _ROLE_CHARACTERS.sub("_", name).strip("._")[:64] or "otel"


# -- laying calls over contexts ------------------------------------------------------------


class _Item:
    """One message of a call's request in display order: a chat message, or the tools."""

    def __init__(self, wire: list[dict[str, Any]], *, tools: bool = False, first: bool = False) -> None:
        self.wire, self.tools, self.first = wire, tools, first
        self.sent = canonical_json(wire)
        self._generic: str | None = None

    def message(self) -> Message:
        if self.tools:
            return tools_message(self.wire)
        return message_of(self.wire[0], first=self.first)

    @property
    def generic(self) -> str:
        """What our runtime would send for it (asked only of a message not sent yet)."""
        if self._generic is None:
            self._generic = canonical_json(generic_form(self.message()))
        return self._generic


def _items(call: Call) -> list[_Item]:
    """The call's request as the context will show it: a leading system message (the
    system prompt), the tools, then every other message."""
    messages = call.messages
    head = [_Item([messages[0]], first=True)] if messages and messages[0].get("role") == "system" else []
    tools = [_Item(list(call.tools), tools=True)] if call.tools else []
    return [*head, *tools, *(_Item([m]) for m in messages[len(head) :])]


def _new_context(context_id: str) -> Context:
    context = Context(context_id)
    for name in DEFAULT_ANCHORS:
        context.add_anchor(name, 0)
    return context


def _anchor_for(context: Context, message: Message) -> str:
    """Where ``message`` goes: specials at their anchors, a tool result right after the
    assistant message that called it (the runtime's ``<id>:tool_result`` anchor), when
    only results of its calls came since."""
    if message.message_type == "SystemPromptMessage":
        return SYSTEM_PROMPT_ANCHOR
    if message.message_type == "ToolDefinitionsMessage":
        return TOOLS_ANCHOR
    results = message.tool_results()
    if message.role != "tool_result" or not results:
        return MESSAGES_ANCHOR
    owner = next((m for m in reversed(context.messages) if m.role != "tool_result"), None)
    if owner is None or not any(use.call_id == results[0].call_id for use in owner.tool_uses()):
        return MESSAGES_ANCHOR
    anchor = owner.id + TOOL_RESULT_SUFFIX
    if all(name != anchor for name, _ in context.anchor_points):
        context.add_anchor(anchor, context.anchor_index(MESSAGES_ANCHOR), after_existing=False)
    return anchor


def _append(context: Context, message: Message) -> int:
    """Append ``message`` where it belongs; its display index."""
    anchor = _anchor_for(context, message)
    index = context.anchor_index(anchor)
    context.append(message, anchor)
    if message.message_type == "SystemPromptMessage":
        context.system_prompt_message_id = message.id
    elif message.message_type == "ToolDefinitionsMessage":
        context.tool_definitions_message_id = message.id
    return index


class _Placer:
    """Lays a session's calls over its contexts (see the module's notes). Each message's
    forms are serialized once (a session's calls resend most of its messages)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.contexts = [c for c in session.contexts.values() if not is_marked(c)]
        self._forms: dict[tuple[int, bool], str] = {}

    def _form(self, message: Message, *, generic: bool = False) -> str:
        key = (id(message), generic)
        if key not in self._forms:
            self._forms[key] = canonical_json(generic_form(message) if generic else sent_form(message))
        return self._forms[key]

    def _keep(self, message: Message, wire: list[dict[str, Any]]) -> None:
        keep_form(message, wire)
        self._forms.pop((id(message), False), None)

    def _matches(self, message: Message, item: _Item) -> bool:
        """``message`` is ``item``: sent as it, or (an answer not sent yet) read alike."""
        if (message.message_type == "ToolDefinitionsMessage") != item.tools:
            return False
        if self._form(message) == item.sent:
            return True
        if was_sent(message):
            return False
        if _from_tool_span(message):  # its call's result, as the next request sends it
            results = message.tool_results()
            return bool(results) and item.wire[0].get("tool_call_id") == results[0].call_id
        return self._form(message, generic=True) == item.generic

    def _shared(self, context: Context, items: list[_Item]) -> int:
        count = 0
        for message, item in zip(context.messages, items, strict=False):
            if not self._matches(message, item):
                break
            count += 1
        return count

    def place(self, call: Call) -> tuple[Context, int]:
        """The context that holds ``call`` and the display index of its answer (the end
        of the context, for a call that failed)."""
        items = _items(call)
        best, shared = self._best(items)
        uuid_, span = self.session.uuid, call.span.span_id
        if best is None or shared < len(best.messages):
            context = _new_context(stable_id(uuid_, "context", span))
            if best is not None and shared > 0:
                for message in best.messages[:shared]:
                    _append(context, message.copy())
                context.origin_context_id = best.id
                context.parent_mutation_counter = best.messages[shared - 1].sequence_number or 0
                best.children.append(context.id)
            self.session.add_context(context)
            self.contexts.append(context)
        else:
            context = best
        for position, message in enumerate(context.messages[:shared]):
            if not was_sent(message):  # an answer now sent: as the request had it
                if _from_tool_span(message):
                    message.content = items[position].message().content
                    self._forms.pop((id(message), True), None)
                self._keep(message, items[position].wire)
        started = utc_text(call.span.start_ns)
        for position, item in enumerate(items[shared:], start=shared):
            message = item.message()
            message.id, message.creation_timestamp = stable_id(uuid_, span, "in", position), started
            keep_form(message, item.wire)
            _append(context, message)
        index = len(context.messages)
        if call.output is not None:
            answer = message_of(call.output)
            answer.id, answer.creation_timestamp = stable_id(uuid_, span, "out"), utc_text(call.span.end_ns)
            meta = {"trace": call.span.trace_id, "span": span, "flavour": call.flavour}
            answer.metadata = {META_KEY: {**meta, "missing": call.missing} if call.missing else meta}
            index = _append(context, answer)
        self.session.active_context_id = context.id
        return context, index

    def tool_result(self, span: Span) -> bool:
        """A tool span's output as the result of the call it answers, in the context the
        last call left active, when that call's answer asked for it and no result of it
        is there yet (a later request that sends the result then says how it was sent)."""
        attributes = span.attributes
        output = attributes.get("output.value", attributes.get("gen_ai.tool.call.result"))
        context = self.session.contexts.get(self.session.active_context_id or "")
        if output is None or context is None:
            return False
        trailing = list(takewhile(lambda m: m.role == "tool_result", reversed(context.messages)))
        if len(trailing) == len(context.messages):
            return False
        owner = context.messages[-len(trailing) - 1]
        answered = {r.call_id for m in trailing for r in m.tool_results()}
        call_id = attributes.get("gen_ai.tool.call.id") or attributes.get("tool_call.id")
        name = attributes.get("tool.name") or attributes.get("gen_ai.tool.name") or span.name
        use = next(
            (
                u
                for u in owner.tool_uses()
                if u.call_id not in answered and (u.call_id == call_id if call_id else u.name == name)
            ),
            None,
        )
        if use is None:
            return False
        message = Message(
            "tool_result",
            [ToolResultPart(use.call_id, output)],
            id=stable_id(self.session.uuid, span.span_id, "tool"),
            creation_timestamp=utc_text(span.end_ns),
            metadata={META_KEY: {"trace": span.trace_id, "span": span.span_id, "from": _FROM_TOOL_SPAN}},
        )
        _append(context, message)
        return True

    def _best(self, items: list[_Item]) -> tuple[Context | None, int]:
        """The context sharing the longest beginning with ``items`` (the latest among
        equals, so a call continues the branch the agent was on)."""
        best, shared = None, -1
        for context in self.contexts:
            count = self._shared(context, items)
            whole = count == len(context.messages)
            if count > shared or (count == shared and whole):
                best, shared = context, count
        return best, max(shared, 0)


# -- the import ---------------------------------------------------------------------------


def _call_record(
    session: Session, call: Call, context: Context, index: int, invocation: str | None
) -> CallRecord:
    span = call.span
    return CallRecord(
        id=span_record_id(span),
        session=session.uuid,
        role=session.role,
        context_id=context.id,
        message_index=index,
        request=call.request,
        request_hash=request_hash(call.request),
        started_at=utc_text(span.start_ns),
        invocation_id=invocation,
        message_id=context.messages[index].id if index < len(context.messages) else None,
        ended_at=utc_text(span.end_ns),
        latency_s=(span.end_ns - span.start_ns) / 1e9,
        response=call.response,
        usage=call.usage,
        error=(span.status_message or "the span ended in error") if span.status == 2 else None,
    )


def _invocations(
    trace: _Trace, owners: Mapping[str, _Owner], agents: list[Span], records: dict[str, list[str]]
) -> list[tuple[InvocationRecord, list[Path]]]:
    """An invocation record per agent span, in its session's folder and, when another
    session's agent called it, in that one's too (as the runtime writes them)."""
    found = []
    for span in agents:
        owner = owners[trace.session_of(span)]
        parent = trace.agent_of(span)
        caller = owners[trace.session_of(parent)] if parent is not None else None
        prompt = span.attributes.get("input.value")
        error = span.status == 2
        record = InvocationRecord(
            id=span_record_id(span),
            callee=Party(owner.role, _agent_id(span), owner.uuid),
            caller=Party(caller.role, _agent_id(parent), caller.uuid) if caller and parent else None,
            prompt=prompt if isinstance(prompt, str) else "",
            thread=None,
            started_at=utc_text(span.start_ns),
            parent_invocation_id=span_record_id(parent) if parent is not None else None,
            ended_at=utc_text(span.end_ns),
            outcome="error" if error else "ok",
            result=span.attributes.get("output.value"),
            error=(span.status_message or "the span ended in error") if error else None,
            calls=records.get(span_record_id(span), []),
        )
        folders = [owner.directory] + ([caller.directory] if caller and caller is not owner else [])
        found.append((record, folders))
    return found


def _existing(store: Store, role: str, session_uuid: str) -> Session | None:
    stored = (store.session_dir(role, session_uuid) / SESSION_FILE).is_file()
    return store.load_session(session_uuid, require_active=False) if stored else None


@dataclass(frozen=True)
class _Owner:
    """The session a session key's spans go into."""

    uuid: str
    role: str
    directory: Path


def _owner(store: Store, key: str, spans_of: _Spans) -> _Owner:
    spans = [c.span for c in spans_of.calls] or spans_of.agents or spans_of.tools
    first = min(s.start_ns for s in spans)
    session_uuid = f"{datetime.fromtimestamp(first / 1e9, UTC):%Y%m%d}-{stable_id('session', key)}"
    role = _role(spans_of.agents, spans)
    return _Owner(session_uuid, role, store.session_dir(role, session_uuid))


@dataclass
class _Spans:
    """What one session's spans hold: its model calls, its agents and its tools."""

    calls: list[Call] = field(default_factory=list)
    agents: list[Span] = field(default_factory=list)
    tools: list[Span] = field(default_factory=list)


def _import_session(
    store: Store, trace: _Trace, key: str, owner: _Owner, spans_of: _Spans, by_agent: dict[str, list[str]]
) -> SessionReport:
    """Write the session of ``key``; ``by_agent`` gains the calls each agent made (by its
    invocation id)."""
    calls, session_uuid, role = spans_of.calls, owner.uuid, owner.role
    existing = _existing(store, role, session_uuid)
    session = existing or Session(role, session_uuid)
    known = {c.id for c in session.calls()} if existing is not None else set()
    placer = _Placer(session)
    new: list[CallRecord] = []
    tools = iter(spans_of.tools)
    tool = next(tools, None)
    tool_results = 0
    for call in calls:
        while tool is not None and tool.start_ns < call.span.start_ns:  # the tools its answer asked for
            tool_results += placer.tool_result(tool)
            tool = next(tools, None)
        agent = trace.agent_of(call.span)
        invocation = span_record_id(agent) if agent else None
        call_id = span_record_id(call.span)
        if agent is not None:
            by_agent.setdefault(span_record_id(agent), []).append(call_id)
        if call_id in known:
            continue
        context, index = placer.place(call)
        new.append(_call_record(session, call, context, index, invocation))
    for rest in [*([tool] if tool is not None else []), *tools]:  # after the last call
        tool_results += placer.tool_result(rest)
    session.state_data = {**session.state_data, SOURCE_KEY: SOURCE, STATE_KEY: {"session": key}}
    written = store.save_session(session)
    directory = session.directory or store.session_dir(role, session_uuid)
    for record in new:
        write_call(directory, record)
    status = "created" if existing is None else "updated" if written or new else "unchanged"
    report = SessionReport(
        role=role,
        uuid=session_uuid,
        session_id=key,
        status=status,
        calls=len(calls),
        calls_added=len(new),
        tool_results=tool_results,
        contexts=len(placer.contexts),
        files_written=[
            str(p.relative_to(store.root)) if p.is_relative_to(store.root) else str(p) for p in written
        ],
    )
    return report


def _telemetry(paths: Sequence[Path]) -> Telemetry:
    """The spans and logs of ``paths``, each given twice (overlapping files) once."""
    spans: dict[tuple[str, str], Span] = {}
    logs: dict[tuple[object, ...], LogRecord] = {}
    for path in paths:
        read = read_otlp(Path(path).expanduser())
        for span in read.spans:
            spans.setdefault((span.trace_id, span.span_id), span)
        for record in read.logs:
            key = (
                record.trace_id,
                record.span_id,
                record.time_ns,
                record.event_name,
                canonical_json(record.body),
            )
            logs.setdefault(key, record)
    return Telemetry(tuple(spans.values()), tuple(logs.values()))


def import_otel(paths: Sequence[Path | str], store_dir: Path | str) -> ImportReport:
    """Import the OTLP files ``paths`` (OTLP/JSON, protobuf, or Phoenix's span API answer;
    traces and logs of one run may be in separate files) into the store at ``store_dir``."""
    files = [Path(p).expanduser() for p in paths]
    telemetry = _telemetry(files)
    store = open_store(store_dir)
    trace = _Trace(telemetry)
    notices: list[str] = []
    calls = model_calls(telemetry, notices)
    by_session: dict[str, _Spans] = {}
    for call in calls:
        by_session.setdefault(trace.session_of(call.span), _Spans()).calls.append(call)
    for span in sorted(telemetry.spans, key=lambda s: s.start_ns):
        if is_agent(span):
            by_session.setdefault(trace.session_of(span), _Spans()).agents.append(span)
        elif is_tool(span):
            by_session.setdefault(trace.session_of(span), _Spans()).tools.append(span)
    owners = {key: _owner(store, key, spans_of) for key, spans_of in by_session.items()}
    by_agent: dict[str, list[str]] = {}
    reports = [
        _import_session(store, trace, key, owners[key], spans_of, by_agent)
        for key, spans_of in by_session.items()
    ]
    agents = [span for spans_of in by_session.values() for span in spans_of.agents]
    records = _invocations(trace, owners, agents, by_agent)
    if not telemetry.spans:
        notices.append("no spans in the file(s): nothing to import")
    elif not calls:
        notices.append("no model calls (OpenInference LLM spans or GenAI chat spans) in the spans")
    flavours: dict[str, int] = {}
    for call in calls:
        flavours[call.flavour] = flavours.get(call.flavour, 0) + 1
    return ImportReport(
        files=[str(f) for f in files],
        spans=len(telemetry.spans),
        logs=len(telemetry.logs),
        calls=len(calls),
        flavours=flavours,
        sessions=reports,
        invocations=len(records),
        invocations_written=write_records(records),
        notices=notices,
    )
