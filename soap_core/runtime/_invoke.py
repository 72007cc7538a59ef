"""One invocation of an agentic object: the session, the lock, the loop, the records.

The loop: (compaction) → build the request from the active context → call the model →
append its answer → run its tool calls and append their results at the
``<assistant_id>:tool_result`` anchor, as the sOAP runner does → repeat until an answer
without tool calls (or a valid ``produce_output``), or the iteration limit. The session
is saved after every step, every call is recorded, and the invocation record (with the
object's state after it) is written into the callee's and the caller's sessions.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

from soap_core._chat import canonical_json, chat_request, request_hash
from soap_core._context import Context
from soap_core._errors import SoapError
from soap_core._marks import BranchMark, set_mark
from soap_core._message import Message
from soap_core._parts import TextPart, ThinkingPart, ToolPart, ToolResultPart, ToolUsePart
from soap_core._records import (
    CallRecord,
    InvocationRecord,
    Party,
    interrupt_running,
    new_record_id,
    utc_now,
    write_call,
    write_invocation,
)
from soap_core._redact import redact
from soap_core._session import OBJECT_KEY, RERUN_SESSION_KEY, Session
from soap_core._store import SESSION_FILE
from soap_core.runtime._compaction import ContextBudget, spec_of
from soap_core.runtime._llm import LLMError
from soap_core.runtime._locks import CHAIN, ActiveSessionError, Frame, owner_info, session_lock, thread_lock
from soap_core.runtime._object import Agent
from soap_core.runtime._tools import ToolSpec, json_type, run_tool

OWNER_KEY = "_soapwb_owner"
ERROR_KEY = "_soapwb_last_error"
OUTPUT_REMINDER = (
    "PRODUCE YOUR FINAL OUTPUT USING THE `produce_output` OR `produce_error` TOOL!\nMIND THE OUTPUT SCHEMA!"
)


class InvocationError(SoapError):
    """An invocation ended without an answer (iteration limit, produce_error, ...)."""


class IterationLimitError(InvocationError):
    """The model kept calling tools until the iteration limit."""


class RerunStopped(InvocationError):
    """A re-run stopped where it could not go on as asked: a tool call that recorded mode
    cannot serve and may not run live."""


ToolServer = Callable[[ToolUsePart], "str | None"]
"""Asked before a tool call of a re-run runs: the result text to use, or None to run the
tool live; raises :class:`RerunStopped` to end the re-run there."""
RERUN: ContextVar[bool] = ContextVar("soapwb_rerun", default=False)
"""``state_data`` key of a session a re-run created (a callee's new thread): it is not the
thread's session for later invocations."""


@dataclass(frozen=True)
class Position:
    """Where in a session the code now running was reached: the caller side of any
    invocation it makes."""

    context_id: str
    message_index: int
    message_id: str | None


POSITION: ContextVar[Position | None] = ContextVar("soapwb_position", default=None)

TOOL_FAILURES_KEY = "tool_failures"
"""Key of a re-run's record (``InvocationRecord.rerun``) listing the tool calls that failed
during it (:data:`TOOL_FAILURES`)."""
TOOL_FAILURES: ContextVar[list[dict[str, Any]] | None] = ContextVar("soapwb_tool_failures", default=None)
"""Set by a re-run: every tool call that failed while it ran (raised, was refused, named
no tool or had bad arguments), its objects' callees included, as ``{"role", "tool",
"arguments", "result"}``; the model was sent ``result``. Results a re-run served from
the record or injected are not runs of the tool and never listed."""


def _output_tools(schema: dict[str, Any]) -> list[ToolPart]:
    return [
        ToolPart(
            "produce_output",
            "Produce the desired output and signal your final answer. Pass the answer matching the output schema.",
            {"type": "object", "properties": {"answer": schema}, "required": ["answer"]},
        ),
        ToolPart(
            "produce_error",
            "Signal that you could not produce the requested output. Pass an error message explaining why.",
            {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
        ),
    ]


def schema_hook(schema: dict[str, Any]) -> str:
    """The system-prompt addition of an invocation with an output schema."""
    return (
        "To finish your turn of the conversation, call the produce_output tool with the answer "
        f"argument satisfying the following schema:\n{json.dumps(schema)}"
    )


def offer_tools(context: Context, tools: list[ToolPart], schema: dict[str, Any] | None) -> str:
    """The tools an invocation offers (``tools``, and produce_output/produce_error with an
    output schema), kept as peteos' tool_list hook does: their JSON listing goes into the
    content map, whose key is recorded with every call (so replay can rebuild the tools a
    call was offered even after a later invocation changed them), and the tools message
    is brought up to date. Returns the key."""
    parts = [*tools, *(_output_tools(schema) if schema is not None else [])]
    listing = [
        {"name": p.name, "description": p.description, "parameters": dict(p.parameters)} for p in parts
    ]
    key = context.record_hook_output(json.dumps(listing))
    definitions = context.tool_definitions
    if definitions is not None and list(definitions.content) != parts:
        definitions.content = parts
        definitions.token_count = None
    return key


def build_system_prompt(
    context: Context, hooks: Callable[[], Iterable[str]], schema: dict[str, Any] | None
) -> list[str]:
    """The system prompt rebuilt before a call from its static text and the outputs of
    ``hooks`` (and the output schema's addition); the content-map keys of the outputs,
    which are recorded with the call. No system prompt: no hook runs."""
    system = context.system_prompt
    if system is None:
        return []
    outputs = [*hooks(), *([schema_hook(schema)] if schema is not None else [])]
    keys = [context.record_hook_output(text) for text in outputs]
    text = "\n\n".join([system.static_text or "", *outputs])
    if system.text() != text:
        system.content = [TextPart(text)]
        system.token_count = None
    return keys


def open_call(
    session: Session,
    context: Context,
    request: dict[str, Any],
    base_url: str,
    *,
    record_id: str | None = None,
    started_at: str | None = None,
    hashed: str | None = None,
    **fields: Any,
) -> CallRecord:
    """The record of a call about to send ``request``, built from ``context`` as it stands
    (its answer will be message ``len(context.messages)``); ``hashed``: the request's hash,
    where it was taken already; ``fields``: the record's others (``invocation_id``, ...)."""
    return CallRecord(
        id=record_id or new_record_id(),
        session=session.uuid,
        role=session.role,
        context_id=context.id,
        message_index=len(context.messages),
        request=request,
        request_hash=hashed or request_hash(request),
        base_url=base_url,
        started_at=started_at or utc_now(),
        **fields,
    )


def close_call(
    call: CallRecord,
    answer: Message,
    response: dict[str, Any],
    latency_s: float | None,
    ended_at: str | None = None,
) -> None:
    """``call`` answered: ``answer`` (appended to its context) from ``response``."""
    call.message_id, call.response, call.usage = answer.id, response, response.get("usage")
    call.latency_s, call.ended_at = latency_s, ended_at or utc_now()


def output_schema_json(output_schema: Any) -> dict[str, Any] | None:
    if output_schema is None:
        return None
    if isinstance(output_schema, dict):
        return output_schema
    schema = json_type(output_schema)
    if not schema:
        raise SoapError(
            f"unsupported output_schema {output_schema!r}: give a JSON schema dict or a basic type"
        )
    return schema


def _thread_session(obj: Agent, thread: str) -> Session | None:
    """The session this object keeps for ``thread``: the catalog names it (every session
    our store saves is indexed at once), so a thread-reuse invoke reads that session's
    files only. Without a hit the catalog first catches up with the files (a session
    copied in, a store written without one)."""
    store = obj.runtime.store
    catalog = store.catalog()
    if catalog is None:
        return _scanned_thread_session(obj, thread)
    for attempt in range(2):
        for directory in catalog.thread_sessions(obj.role, thread, obj.object_id):
            session = store.load_session(store.ref_for(directory))  # the lookup re-reads what changed
            if _keeps_thread(obj, session, thread):
                return session
        if attempt == 0:
            catalog.refresh(counts_behind=store.counts_behind)
    return None


def _keeps_thread(obj: Agent, session: Session, thread: str) -> bool:
    state = session.state_data
    return (
        session.role == obj.role
        and session.thread_id == thread
        and state.get(OBJECT_KEY) == obj.object_id
        and RERUN_SESSION_KEY not in state
    )


def _scanned_thread_session(obj: Agent, thread: str) -> Session | None:
    store = obj.runtime.store
    matches = []
    for summary in store.scan_sessions():
        if summary.role != obj.role or summary.thread_id != thread or summary.error:
            continue
        if _keeps_thread(obj, store.read_session_file(summary.role, summary.path), thread):
            matches.append(summary)
    if not matches:
        return None
    newest = max(matches, key=lambda s: (s.path / "session.json").stat().st_mtime_ns)
    return store.load_session(newest.ref)


def _session_for(obj: Agent, thread: str | None, branch: bool) -> tuple[Session, bool]:
    """The thread's session, or a new one (and whether it is new). A new session is saved
    at once, its folder appearing whole, so that no crash leaves half a session. For a
    thread, looking for its session and creating it happen under the thread's lock, and
    the new session is on disk before the lock is let go: a process invoking the same new
    thread at the same moment finds it instead of making a second one."""
    store = obj.runtime.store
    if thread is None:
        return _new_session(obj, None, branch), True
    with thread_lock(store.agents_dir, obj.role, obj.object_id, thread):
        found = _thread_session(obj, thread)
        if found is not None:
            return found, False
        return _new_session(obj, thread, branch), True


def _new_session(obj: Agent, thread: str | None, branch: bool) -> Session:
    """A new session of ``obj`` for ``thread``, saved at once (see :func:`_session_for`)."""
    context = Context.create(Message.system_prompt(obj.system_prompt), [t.as_part() for t in obj.tools()])
    session = Session.create(obj.role, context, thread_id=thread)
    session.state_data[OBJECT_KEY] = obj.object_id
    if branch:
        session.state_data[RERUN_SESSION_KEY] = True  # made by a re-run: thread lookups skip it
    session.directory = obj.runtime.store.session_dir(obj.role, session.uuid)
    obj.runtime.store.save_session(session)
    return session


class _Run:
    """The state of one invocation's loop."""

    def __init__(
        self,
        obj: Agent,
        session: Session,
        record: InvocationRecord,
        schema: Any,
        *,
        tool_server: ToolServer | None = None,
        branch: bool = False,
    ) -> None:
        self.obj = obj
        self.session = session
        self.record = record
        self.schema = schema
        self.store = obj.runtime.store
        self.endpoint = obj.runtime.endpoint
        self.specs: dict[str, ToolSpec] = {t.name: t for t in obj.tools()}
        self.directory = session.directory or self.store.session_dir(obj.role, session.uuid)
        self.tool_list_key: str | None = None
        self.tool_server = tool_server
        """Asked before a tool runs: its answer (the result text) stands in for the run."""
        self.branch = branch
        """A re-run: compaction forks are not made the session's active context."""

    def save(self) -> None:
        self.store.save_session(self.session)

    # -- the context before a call --------------------------------------------------

    def refresh_tool_definitions(self, context: Context) -> None:
        self.tool_list_key = offer_tools(context, [t.as_part() for t in self.specs.values()], self.schema)

    def compact(self, context: Context) -> Context:
        strategy = self.obj.compaction or ContextBudget()
        with _at(Position(context.id, len(context.messages), None)):
            fork = strategy(self.obj, context)
        if fork is None:
            return context
        if self.branch:  # the re-run goes on in the fork; the session keeps its active context
            self.session.add_context(fork)
        else:
            self.session.set_active_context(fork)
        self.save()
        return fork

    # -- one model call ------------------------------------------------------------

    def call_model(self, context: Context, tool_choice: Any) -> Message:
        hooks = build_system_prompt(context, self.obj.system_prompt_hooks, self.schema)
        for message in context.messages:
            if message.token_count is None:
                message.record_token_count()
        settings = self.obj.settings
        parameters = settings.parameters()
        if context.tool_definitions is not None and context.tool_definitions.content:
            parameters["tool_choice"] = tool_choice
        request = chat_request(
            context.messages, model=settings.model or self.endpoint.model, parameters=parameters
        )
        call = open_call(
            self.session,
            context,
            request,
            self.endpoint.base_url,
            invocation_id=self.record.id,
            system_prompt_hooks=hooks,
            tool_list_hook=self.tool_list_key,
            context_limit=settings.context_limit,
            compaction=spec_of(self.obj.compaction or ContextBudget()),
        )
        self.record.calls.append(call.id)
        try:
            completion = self.endpoint.complete(request)
        except LLMError as exc:
            call.error, call.ended_at = redact(str(exc)), utc_now()
            write_call(self.directory, call)
            raise
        answer = assistant_message(completion.response)
        context.append(answer).record_token_count()
        close_call(call, answer, completion.response, completion.latency_s)
        write_call(self.directory, call)
        self.save()
        return answer

    # -- tools ---------------------------------------------------------------------

    def run_tools(self, context: Context, answer: Message) -> tuple[bool, Any]:
        """Run every tool call of ``answer``; (True, value) once produce_output is valid."""
        index = context.messages.index(answer)
        results, done, value = [], False, None
        for use in answer.tool_uses():
            with _at(Position(context.id, index, answer.id)):
                content, final = self.run_one(use)
            results.append(ToolResultPart(use.call_id, content))
            if final is not _NOTHING:
                done, value = True, final
        context.append_tool_results(answer, results).record_token_count()
        self.save()
        return done, value

    def run_one(self, use: ToolUsePart) -> tuple[str, Any]:
        if use.name in ("produce_output", "produce_error") and self.schema is not None:
            return self.produce(use)
        if self.tool_server is not None:
            served = self.tool_server(use)
            if served is not None:
                return served, _NOTHING
        content, final = self.run_tool(use)
        failures = TOOL_FAILURES.get()
        if failures is not None and content.startswith(("[ERROR] ", "[REFUSED] ")):
            failures.append(
                {"role": self.obj.role, "tool": use.name, "arguments": use.arguments, "result": content}
            )
        return content, final

    def run_tool(self, use: ToolUsePart) -> tuple[str, Any]:
        spec = self.specs.get(use.name)
        if spec is None:
            return f"[ERROR] unknown tool {use.name!r}; the tools are: {', '.join(self.specs)}", _NOTHING
        try:
            result, problem = run_tool(self.obj, spec, use.arguments)
        except ActiveSessionError as exc:
            return f"[REFUSED] {exc}", _NOTHING
        except RerunStopped:
            raise
        except Exception as exc:  # a failing tool is reported to the model, not fatal
            return f"[ERROR] {type(exc).__name__}: {exc}", _NOTHING
        if problem is not None:
            return f"[ERROR] {problem}", _NOTHING
        return (
            "" if result is None else result if isinstance(result, str) else canonical_json(result)
        ), _NOTHING

    def produce(self, use: ToolUsePart) -> tuple[str, Any]:
        arguments = use.parsed_arguments()
        if not isinstance(arguments, dict):
            return "[ERROR] arguments must be a JSON object", _NOTHING
        if use.name == "produce_error":
            raise InvocationError(f"{self.obj.role} gave up: {arguments.get('message', arguments)}")
        if "answer" not in arguments:
            return "[ERROR] missing argument 'answer'", _NOTHING
        try:
            jsonschema.validate(arguments["answer"], self.schema)
        except jsonschema.ValidationError as exc:
            return f"[ERROR] the answer does not match the output schema: {exc.message}", _NOTHING
        return "", arguments["answer"]

    # -- the loop ------------------------------------------------------------------

    def loop(self, prompt: str, tool_choice: Any, follow_up: Any, context: Context | None = None) -> Any:
        """One turn: the prompt appended to ``context`` (the active one) and the loop."""
        context = context or self.session.active_context
        self.refresh_tool_definitions(context)
        context.append(Message.create("user", [TextPart(prompt)])).record_token_count()
        self.save()
        return self.drive(context, tool_choice, follow_up, self.obj.settings.max_iterations)

    def drive(self, context: Context, tool_choice: Any, follow_up: Any, limit: int) -> Any:
        """Model calls and tool runs from ``context`` as it stands, at most ``limit`` calls."""
        if self.tool_list_key is None:  # a re-run starts here, a turn in loop()
            self.refresh_tool_definitions(context)
        for _ in range(limit):
            context = self.compact(context)
            answer = self.call_model(context, tool_choice)
            if answer.tool_uses():
                done, value = self.run_tools(context, answer)
                if done:
                    return value
                tool_choice = follow_up
                continue
            if self.schema is None:
                return answer.text()
            context.append(Message.create("user", [TextPart(OUTPUT_REMINDER)])).record_token_count()
            tool_choice = {"type": "function", "function": {"name": "produce_output"}}
        raise IterationLimitError(
            f"{self.obj.role} reached the iteration limit ({limit} model calls) without an answer"
        )


_NOTHING: Any = object()


@contextlib.contextmanager
def _at(position: Position) -> Iterator[None]:
    token = POSITION.set(position)
    try:
        yield
    finally:
        POSITION.reset(token)


def assistant_message(response: dict[str, Any]) -> Message:
    """The sOAP assistant message for a Chat Completions response."""
    message = response["choices"][0].get("message") or {}
    parts: list[Any] = []
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        parts.append(ThinkingPart(reasoning))
    if isinstance(message.get("content"), str) and message["content"]:
        parts.append(TextPart(message["content"]))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        parts.append(
            ToolUsePart(
                str(call.get("id") or f"call_{uuid.uuid4().hex[:12]}"),
                str(function.get("name", "")),
                arguments if isinstance(arguments, str) else json.dumps(arguments),
            )
        )
    return Message.create("assistant", parts)


def class_path(cls: type) -> str:
    """``module:qualname``, what :func:`importlib.import_module` and ``getattr`` need to
    find the class again."""
    return f"{cls.__module__}:{cls.__qualname__}"


def run_invocation(
    obj: Agent,
    prompt: str,
    thread: str | None,
    output_schema: Any,
    tool_choice: Any = "auto",
    follow_up: Any = "auto",
) -> Any:
    """``obj.invoke``: see :class:`_Run` for the loop."""
    branch = RERUN.get()  # called from a live tool of a re-run: the callee runs in a branch too
    schema = output_schema_json(output_schema)
    session, created = _session_for(obj, thread, branch)
    directory = obj.runtime.store.confine(
        session.directory or obj.runtime.store.session_dir(obj.role, session.uuid), "session folder"
    )
    chain, position = CHAIN.get(), POSITION.get()
    caller = None
    if chain:  # called while another invocation runs: from one of its tools, hooks or plain code
        at = (position.context_id, position.message_index, position.message_id) if position else ()
        caller = Party(chain[-1].role, chain[-1].object_id, chain[-1].session, *at)
    record = InvocationRecord(
        id=new_record_id(),
        callee=Party(obj.role, obj.object_id, session.uuid),
        caller=caller,
        prompt=prompt,
        thread=thread,
        started_at=utc_now(),
        parent_invocation_id=chain[-1].invocation_id if chain else None,
        callee_class=class_path(type(obj)),
        state_before=obj.state(),
    )
    dirs = [directory] + ([chain[-1].session_dir] if chain else [])
    with contextlib.ExitStack() as stack:
        try:
            previous_owner = stack.enter_context(session_lock(directory, session.uuid))
        except ActiveSessionError as exc:
            record.outcome, record.error, record.ended_at = "refused", redact(str(exc)), utc_now()
            write_invocation(dirs, record)
            raise
        if (directory / SESSION_FILE).is_file():  # read again under the lock: another process
            session = obj.runtime.store.load_session(obj.runtime.store.ref_for(directory))  # may have run it
        run = _Run(obj, session, record, schema, branch=branch)
        context = callee_branch(session, record) if branch and not created else None
        return _run_locked(
            run,
            lambda: run.loop(prompt, _choice(tool_choice), _choice(follow_up), context),
            dirs,
            previous_owner,
            mark_active=not branch,
        )


def callee_branch(session: Session, record: InvocationRecord) -> Context:
    """For an object a re-run's live tool invokes: a copy of its active context to run the
    turn in, so its session keeps what it had (the copy is not among the children)."""
    active = session.active_context
    fork = active.side_fork()
    set_mark(fork, BranchMark("rerun-callee", active.id, len(active.messages)))
    session.add_context(fork)
    record.callee.context_id = fork.id
    record.rerun = {"kind": "rerun-callee", "branch": fork.id}
    return fork


def rerun_invocation(
    obj: Agent,
    session: Session,
    fork: Context,
    *,
    output_schema: Any,
    tool_choice: Any,
    follow_up: Any,
    limit: int,
    tool_server: ToolServer | None,
    rerun: dict[str, Any],
) -> Any:
    """Run ``obj``'s loop again from ``fork`` (a context of ``session`` that is not its
    active one), recording every call and the invocation like any run, but writing
    nothing of what was there: the session stays as it is on disk (no active flag, no
    owner, the same active context; the lock file alone keeps others out), new contexts
    and records are added beside it."""
    directory = session.directory or obj.runtime.store.session_dir(obj.role, session.uuid)
    record = InvocationRecord(
        id=new_record_id(),
        callee=Party(obj.role, obj.object_id, session.uuid, fork.id, len(fork.messages)),
        caller=None,
        prompt=str(rerun.get("prompt", "")),
        thread=session.thread_id,
        started_at=utc_now(),
        callee_class=class_path(type(obj)),
        state_before=obj.state(),
        rerun=rerun,
    )
    obj.runtime.store.confine(directory, "session folder")
    with session_lock(directory, session.uuid) as previous_owner:
        run = _Run(
            obj, session, record, output_schema_json(output_schema), tool_server=tool_server, branch=True
        )
        token = RERUN.set(True)
        failures = record.rerun.setdefault(TOOL_FAILURES_KEY, []) if record.rerun is not None else []
        failed = TOOL_FAILURES.set(failures)  # the record, written at the end, lists them
        try:
            return _run_locked(
                run,
                lambda: run.drive(fork, _choice(tool_choice), _choice(follow_up), limit),
                [directory],
                previous_owner,
                mark_active=False,
            )
        finally:
            TOOL_FAILURES.reset(failed)
            RERUN.reset(token)


def _choice(value: Any) -> Any:
    """A tool name means: call this tool."""
    if isinstance(value, str) and value not in ("auto", "none", "required"):
        return {"type": "function", "function": {"name": value}}
    return value


def _run_locked(
    run: _Run,
    body: Callable[[], Any],
    dirs: list[Path],
    previous_owner: dict[str, Any] | None,
    *,
    mark_active: bool = True,
) -> Any:
    obj, session, record = run.obj, run.session, run.record
    if previous_owner is not None or session.is_active:  # the last owner died: its records say running
        interrupt_running(run.directory, previous_owner or session.state_data.get(OWNER_KEY))
    if mark_active:
        if session.is_active:  # on disk, yet nobody holds the lock: its owner died
            record.stale_owner = (
                session.state_data.get(OWNER_KEY) or previous_owner or {"note": "no owner recorded"}
            )
        session.is_active = True
        session.state_data[OWNER_KEY] = owner_info()
        session.state_data.pop(ERROR_KEY, None)
    run.save()
    write_invocation(dirs, record)
    token = CHAIN.set((*CHAIN.get(), Frame(obj.role, obj.object_id, session.uuid, record.id, run.directory)))
    try:
        result = body()
        record.outcome, record.result = "ok", json.loads(json.dumps(result, default=repr))
        return result
    except BaseException as exc:
        record.outcome, record.error = "error", redact(f"{type(exc).__name__}: {exc}")
        if mark_active:
            session.state_data[ERROR_KEY] = record.error
        raise
    finally:
        CHAIN.reset(token)
        if mark_active:
            session.is_active = False
            session.state_data.pop(OWNER_KEY, None)
        record.ended_at = utc_now()
        record.state_after = obj.state()
        run.save()
        write_invocation(dirs, record)
