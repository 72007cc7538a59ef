"""Re-run the agent from any message: the rest of the conversation again, as a branch.

A replay re-sends one call; a re-run rebuilds the agentic object as it was when the
invocation started (its class from the invocation record's import path, its recorded
public state), forks the context at the message (with the replay edits), and runs the
object's own loop from there to its end: the same iteration budget, the same compaction,
every call and the invocation recorded like any run. The session's files stay as they
were: the branch is a new context (not added to the original's ``children``, found
through ``origin_context_id`` as replays are), the records are new files.

Tools run in one of three modes, per tool or for all (:mod:`replay._tool_modes`):

* *recorded* serves the result the original branch got when the model asks for the
  same tool with the same arguments (canonical JSON) in the same order, so unchanged
  steps cost nothing and touch nothing; a call it cannot serve runs live or stops the
  re-run with a message saying which call, as the user chose;
* *live* calls the real method on the rebuilt object;
* *injected* answers with the user's result ("what if search had returned nothing").

An object a live tool invokes runs its turn in a copy of its own active context (the
runtime's branch mode while a re-run runs), so no session's files change. Sessions whose
code is not here (peteos stores, OpenPoke imports) re-run through their request source
with recorded and injected tools only. A source whose framework can run here (the OpenAI
Agents SDK, LangGraph) re-runs with the app's code given (``code``, ``MODULE:ATTR``, or
the one its import recorded under :data:`FRAMEWORK_CODE_KEY`): the source's
``rerun_with_code(run)`` runs the framework's own loop on a copy of its state, and the
messages it adds land on the fork (:class:`FrameworkRun`).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from replay._branch import BranchDiff, Turn, branch_noise_band, branch_turns, diff_branches
from replay._diff import NoiseBand
from replay._materialize import MaterializeError, materialize
from replay._request import Materialized
from replay._run import Endpoint, Overrides, branch_fork, replay_messages, replay_parameters
from replay._runtime_source import RUNTIME_SOURCE, tool_listing
from replay._sources import runs_code, source_named
from replay._tool_modes import RerunError, ToolLog, ToolModes, recorded_results, tool_server
from soap_core import (
    BranchMark,
    CallRecord,
    Context,
    InvocationRecord,
    Message,
    Session,
    Store,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    is_marked,
    read_invocation,
    set_mark,
    utc_now,
    write_call,
)
from soap_core.runtime import (
    TOOL_FAILURES_KEY,
    AgenticObject,
    InvocationError,
    LLMError,
    RerunStopped,
    Runtime,
    assistant_message,
    close_call,
    open_call,
    rerun_invocation,
)

RERUN_KIND = "rerun"
FRAMEWORK_CODE_KEY = "_soapwb_framework_code"
"""Session state: the app's code (``MODULE:ATTR``) an import was given, for re-runs."""
RECORDED_LOOP_LIMIT = 8
"""Model calls a re-run without the framework's code may make (OpenPoke's
``MAX_TOOL_ITERATIONS``; peteos records no limit)."""


@dataclass
class RerunResult:
    """One re-run: its branch, how it ended, and what answered its tools."""

    branch_id: str
    """The context the re-run ended in (its fork, or a compaction fork of it)."""
    fork_id: str
    """The fork made at the message (the branch's first context)."""
    of_context: str
    of_index: int
    answer: Any = None
    error: str | None = None
    calls: list[str] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_failures: list[dict[str, Any]] = field(default_factory=list)
    """Tool calls that failed as the branch ran (``{"role", "tool", "arguments",
    "result"}``, the result the model was sent): a tool that raised, was refused, or
    was called by a name or with arguments it does not take."""

    @property
    def ok(self) -> bool:
        """The branch ran as asked: no error, and every tool it ran answered."""
        return self.error is None and not self.tool_failures

    @property
    def problem(self) -> str | None:
        """Why the re-run is not :attr:`ok`, in one line; None when it is."""
        if self.error is not None:
            return self.error
        if not self.tool_failures:
            return None
        first = self.tool_failures[0]
        more = len(self.tool_failures) - 1
        return (
            f"{len(self.tool_failures)} tool call{'s' if more else ''} failed; "
            f"{first.get('tool')}: {str(first.get('result', '')).removeprefix('[ERROR] ')}"
            + (f" (and {more} more)" if more else "")
        )

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ok": self.ok, "problem": self.problem}


@dataclass
class FrameworkRun:
    """A re-run a source runs with its framework's own loop (``rerun_with_code``).

    The source rebuilds the framework's state from the messages of :attr:`fork` (the
    messages before the re-run message, with the replay's edits), runs the app's code
    (:attr:`code`) with its model calls routed to :attr:`endpoint` (the
    ``importers._capture`` seam) and its tools answered by :attr:`serve`, appends each
    new message to :attr:`fork` and records each model call with :meth:`record`; it sets
    ``result.answer`` or ``result.error``. The framework's own files are never written."""

    store: Store
    session: Session
    found: Materialized
    origin: Context
    fork: Context
    endpoint: Endpoint
    model: str
    parameters: dict[str, Any]
    code: str
    serve: Callable[[ToolUsePart], str | None]
    """A tool call's result as the tool modes give it; None: run the app's own tool."""
    mark: dict[str, Any]
    result: RerunResult

    def complete(self, request: dict[str, Any]) -> tuple[dict[str, Any], float | None]:
        """Send ``request`` (the framework's own body) to the endpoint: its response and latency."""
        completion = self.endpoint.complete(request)
        return completion.response, completion.latency_s

    def record(
        self,
        request: dict[str, Any],
        answer: Message | None,
        response: dict[str, Any] | None,
        latency_s: float | None,
        *,
        error: str | None = None,
        started_at: str | None = None,
    ) -> CallRecord:
        """Append ``answer`` (the framework's message for one model call, not yet on
        :attr:`fork`) and write the record of the call: its request as the framework
        sent it, the response, or the ``error`` it ended with (``answer`` None)."""
        directory = self.store.folder_of(self.session)
        call = open_call(
            self.session, self.fork, request, self.endpoint.base_url, started_at=started_at, replay=self.mark
        )
        if answer is not None:
            self.fork.append(answer).record_token_count()
            close_call(call, answer, response or {}, latency_s)
        call.error = error
        call.ended_at = utc_now()
        write_call(directory, call)
        self.result.calls.append(call.id)
        return call


class _Steps:
    """An endpoint that reports every model call of a re-run (its callees' too) as a step."""

    def __init__(self, endpoint: Endpoint, on_step: Callable[[int], None]) -> None:
        self._endpoint = endpoint
        self._on_step = on_step
        self.base_url = endpoint.base_url
        self.model = endpoint.model
        self.steps = 0

    def complete(self, request: dict[str, Any]) -> Any:
        try:
            return self._endpoint.complete(request)
        finally:
            self.steps += 1
            self._on_step(self.steps)


def load_class(path: str | None) -> type[AgenticObject]:
    """The agentic class named by an invocation record's ``module:qualname``."""
    if not path or ":" not in path or "<locals>" in path:
        raise RerunError(f"the class {path!r} cannot be imported (defined inside a function?)")
    module_name, _, qualname = path.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for name in qualname.split("."):
            found = getattr(found, name)
    except (ImportError, AttributeError) as exc:
        raise RerunError(f"cannot import the agentic class {path}: {exc}") from None
    if not (isinstance(found, type) and issubclass(found, AgenticObject)):
        raise RerunError(f"{path} is not an agentic class")
    return found


def _invocation_of(session: Session, found: Materialized) -> tuple[CallRecord, InvocationRecord]:
    call = found.call
    if call is None or call.invocation_id is None or session.directory is None:
        raise RerunError(
            f"message {found.index} of context {found.context_id} has no recorded invocation: "
            "only sessions our runtime wrote can be re-run so far"
        )
    record = read_invocation(session.directory, call.invocation_id)
    if record is None:
        raise RerunError(f"the invocation {call.invocation_id} of message {found.index} has no record")
    return call, record


def _output_schema(context: Context, call: CallRecord) -> Any:
    """The output schema the invocation had, from the tool listing the call was offered."""
    for tool in tool_listing(context.content_map.get(call.tool_list_hook or "")) or []:
        if tool.name == "produce_output":
            properties = tool.parameters.get("properties", {})
            return properties.get("answer") if isinstance(properties, dict) else None
    return None


def _choices(
    call: CallRecord, record: InvocationRecord, calls: Mapping[str, CallRecord]
) -> tuple[Any, Any, int]:
    """The tool choice of the call, the one of the calls after it, and how many calls the
    invocation had made before it (they count against its iteration limit)."""
    made = record.calls.index(call.id) if call.id in record.calls else 0
    first = call.request.get("tool_choice", "auto")
    later = first if made else "auto"
    following = calls.get(record.calls[made + 1]) if made + 1 < len(record.calls) else None
    if following is not None:
        later = following.request.get("tool_choice", "auto")
    return first, later, made


def check_reachable(endpoint: Endpoint) -> None:
    """Raise the endpoint's connection error before anything is written, when it can tell
    that nothing listens (:meth:`LLMEndpoint.check_reachable`): a branch that could never
    reach the model is not saved, so the fork tree and the records do not grow by it."""
    check = getattr(endpoint, "check_reachable", None)
    if callable(check):
        check()


def _fork(session: Session, found: Materialized, overrides: Overrides, mark: BranchMark) -> Context:
    return branch_fork(session, found, replay_messages(found, overrides), mark)


def _rerun_mark(
    found: Materialized,
    overrides: Overrides,
    tools: ToolModes,
    label: str | None,
    *,
    of_invocation: str | None = None,
) -> BranchMark:
    """The mark of a re-run's fork: the message it re-ran and how."""
    return BranchMark(
        RERUN_KIND,
        found.context_id,
        found.index,
        found.message_id,
        of_invocation=of_invocation,
        label=label or None,
        overrides=overrides.as_dict(),
        tools=tools.as_dict(),
    )


def rerun(
    store: Store,
    session: Session,
    context: Context | str | None,
    at: int | str,
    endpoint: Endpoint,
    *,
    overrides: Overrides | None = None,
    tools: ToolModes | None = None,
    label: str | None = None,
    on_step: Callable[[int], None] | None = None,
    code: str | None = None,
) -> RerunResult:
    """Re-run the agent of ``session`` from the model output at ``at`` of ``context``.

    ``on_step(n)`` is called after each model call (the objects a live tool invokes
    included), for a progress display. ``code`` (``MODULE:ATTR``): the app's agent or
    graph, for a session another framework wrote whose source can run it; None: the code
    its import was given, if any; "": none (the loop runs here on the record)."""
    overrides, tools = overrides or Overrides(), tools or ToolModes()
    found = materialize(session, context, at)
    if found.message_id is None:
        raise MaterializeError(
            f"message {found.index} of {found.context_id} does not exist: nothing to re-run"
        )
    check_reachable(endpoint)
    if on_step is not None:
        endpoint = _Steps(endpoint, on_step)
    if found.source != RUNTIME_SOURCE.name:
        if code is None:
            code = session.state_data.get(FRAMEWORK_CODE_KEY)
        if code:
            return _rerun_with_code(store, session, found, endpoint, overrides, tools, label, str(code))
        return _rerun_from_records(store, session, found, endpoint, overrides, tools, label)
    call, record = _invocation_of(session, found)
    cls = load_class(record.callee_class)
    runtime = Runtime(store, endpoint)  # type: ignore[arg-type]  # any Endpoint will do
    obj = cls.rebuild(record.state_before or {}, runtime=runtime, object_id=record.callee.object_id)
    changed = {k: getattr(overrides, k) for k in ("model", "temperature", "seed", "max_tokens")}
    changed = {k: v for k, v in changed.items() if v is not None}
    if changed:
        obj.settings = dataclasses.replace(obj.settings, **changed)  # type: ignore[misc]
    origin = session.contexts[found.context_id]
    about = _rerun_mark(found, overrides, tools, label, of_invocation=record.id)
    fork = _fork(session, found, overrides, about)
    store.save_session(session)
    recorded_calls = {c.id: c for c in session.calls()}
    first, later, made = _choices(call, record, recorded_calls)
    log = ToolLog()
    result = RerunResult(fork.id, fork.id, found.context_id, found.index)
    before = set(session.contexts)
    marked: dict[str, Any] = {
        **about.as_dict(),
        "prompt": f"(re-run from message {found.index} of {found.context_id})",
    }
    try:
        result.answer = rerun_invocation(
            obj,
            session,
            fork,
            output_schema=_output_schema(origin, call),
            tool_choice=first,
            follow_up=later,
            limit=max(1, obj.settings.max_iterations - made),
            tool_server=tool_server(tools, recorded_results(origin, found.index), log),
            rerun=marked,
        )
    except (InvocationError, LLMError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    result.tools = log.served
    result.tool_failures = list(marked.get(TOOL_FAILURES_KEY, []))
    branch = [fork.id, *(cid for cid in session.contexts if cid not in before)]
    result.branch_id = branch[-1]
    result.calls = [c.id for c in session.calls() if c.context_id in branch and c.id not in recorded_calls]
    return result


def _branch_run(
    store: Store,
    session: Session,
    found: Materialized,
    endpoint: Endpoint,
    overrides: Overrides,
    tools: ToolModes,
    label: str | None,
    code: str,
) -> tuple[FrameworkRun, ToolLog]:
    """The fork at the message (saved) and what a loop needs to run the branch on it."""
    model, parameters = replay_parameters(found, overrides, endpoint)
    about = _rerun_mark(found, overrides, tools, label)
    fork = _fork(session, found, overrides, about)
    store.save_session(session)
    origin = session.contexts[found.context_id]
    log = ToolLog()
    result = RerunResult(fork.id, fork.id, found.context_id, found.index)
    serve = tool_server(tools, recorded_results(origin, found.index), log)
    run = FrameworkRun(
        store, session, found, origin, fork, endpoint, model, parameters, code, serve, about.as_dict(), result
    )
    return run, log


def _rerun_with_code(
    store: Store,
    session: Session,
    found: Materialized,
    endpoint: Endpoint,
    overrides: Overrides,
    tools: ToolModes,
    label: str | None,
    code: str,
) -> RerunResult:
    """A re-run by the framework's own loop, run by the session's source with the app's code."""
    if not runs_code(found.source):
        raise RerunError(
            f"session {session.uuid} was written by {found.source}, which cannot run an app's code: "
            "re-run it without --code (recorded or injected tools)"
        )
    run, log = _branch_run(store, session, found, endpoint, overrides, tools, label, code)
    try:
        source_named(found.source).rerun_with_code(run)  # type: ignore[attr-defined]
    except RerunStopped as exc:
        run.result.error = f"RerunStopped: {exc}"
    store.save_session(session)
    run.result.tools = log.served
    return run.result


def _rerun_from_records(
    store: Store,
    session: Session,
    found: Materialized,
    endpoint: Endpoint,
    overrides: Overrides,
    tools: ToolModes,
    label: str | None,
) -> RerunResult:
    """A re-run of a session whose code is not here (peteos, an OpenPoke import): the
    loop of model calls and tool calls, each request built by the session's source as its
    framework builds it, every tool answered from the record or by injection."""
    source = source_named(found.source)
    if tools.default == "live" or "live" in tools.per_tool.values() or tools.unserved == "live":
        raise RerunError(
            f"session {session.uuid} was written by {found.source}, whose code is not here to run: "
            "its tools cannot run live; re-run with recorded or injected tools"
            + (", or give the app's code (--code MODULE:ATTR)" if runs_code(found.source) else "")
        )
    run, log = _branch_run(store, session, found, endpoint, overrides, tools, label, "")
    result, fork = run.result, run.fork
    for _ in range(RECORDED_LOOP_LIMIT):
        request = source.build_request(fork.messages, model=run.model, parameters=run.parameters)
        started = utc_now()
        try:
            response, latency = run.complete(request)
            answer = assistant_message(response)
        except LLMError as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            result.error = f"malformed response: {type(exc).__name__}: {exc}"
        if result.error is not None:
            run.record(request, None, None, None, error=result.error, started_at=started)
            store.save_session(session)
            break
        run.record(request, answer, response, latency, started_at=started)
        store.save_session(session)
        uses = answer.tool_uses()
        if not uses:
            result.answer = answer.text()
            break
        try:
            results = [ToolResultPart(use.call_id, run.serve(use) or "") for use in uses]
        except RerunStopped as exc:
            result.error = f"RerunStopped: {exc}"
            break
        fork.append_tool_results(answer, results).record_token_count()
        store.save_session(session)
    else:
        result.error = f"IterationLimitError: no answer after {RECORDED_LOOP_LIMIT} model calls"
    result.tools = log.served
    return result


def _last_invocation(session: Session, context: Context) -> InvocationRecord:
    """The invocation that last ran in ``context`` or the contexts it was forked from."""
    lineage: list[str] = []
    current: Context | None = context
    while current is not None and current.id not in lineage:
        lineage.append(current.id)
        current = session.contexts.get(current.origin_context_id or "")
    calls = session.calls()
    for context_id in lineage:
        for call in reversed(calls):
            if call.context_id == context_id and call.invocation_id:
                record = read_invocation(session.directory, call.invocation_id) if session.directory else None
                if record is not None:
                    return record
    raise RerunError(f"context {context.id} has no recorded invocation to go on from")


def continue_branch(
    store: Store,
    session: Session,
    context: Context,
    text: str,
    endpoint: Endpoint,
    *,
    tools: ToolModes | None = None,
) -> RerunResult:
    """A new user message at the end of ``context`` and the agent's turn on it.

    A replay or re-run branch goes on in place (it is ours); any other context is first
    copied into a branch, so the conversation can go on from any point without writing
    what was there. The object is rebuilt as the last invocation there left it. Tools
    run live unless ``tools`` says otherwise (a new turn has no record to serve)."""
    tools = tools or ToolModes(default="live")
    record = _last_invocation(session, context)
    check_reachable(endpoint)
    cls = load_class(record.callee_class)
    runtime = Runtime(store, endpoint)  # type: ignore[arg-type]  # any Endpoint will do
    obj = cls.rebuild(
        record.state_after or record.state_before or {}, runtime=runtime, object_id=record.callee.object_id
    )
    branch = context
    if not is_marked(context):
        branch = context.side_fork()
        set_mark(branch, BranchMark("continue", context.id, len(context.messages)))
        session.add_context(branch)
    start = len(branch.messages)
    branch.append(Message.create("user", [TextPart(text)])).record_token_count()
    store.save_session(session)
    before = set(session.contexts)
    known = {c.id for c in session.calls()}
    result = RerunResult(branch.id, branch.id, context.id, start)
    log = ToolLog()
    marked: dict[str, Any] = {"kind": "continue", "of_context": context.id, "of_index": start, "prompt": text}
    try:
        result.answer = rerun_invocation(
            obj,
            session,
            branch,
            output_schema=None,
            tool_choice="auto",
            follow_up="auto",
            limit=obj.settings.max_iterations,
            tool_server=tool_server(tools, [], log),
            rerun=marked,
        )
    except (InvocationError, LLMError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    result.tools = log.served
    result.tool_failures = list(marked.get(TOOL_FAILURES_KEY, []))
    result.branch_id = [branch.id, *(cid for cid in session.contexts if cid not in before)][-1]
    result.calls = [c.id for c in session.calls() if c.id not in known]
    return result


def branch_of(
    session: Session, result: RerunResult, calls: Sequence[CallRecord] | None = None
) -> tuple[list[Turn], list[Turn]]:
    """The original branch (from the message on) and the re-run's, as steps.

    The re-run's branch starts where its messages stop being the original's prefix (a
    compaction fork during the re-run keeps copies of some of them). ``calls`` is the
    session's call log when the caller has read it (to show several re-runs)."""
    origin, branch = session.contexts[result.of_context], session.contexts[result.branch_id]
    prefix = {m.id for m in origin.messages[: result.of_index]}
    # A framework's fork may begin with the specials its request was rebuilt with (the
    # Agents SDK's instructions and tools), which its context never held: not steps.
    start = next(
        (i for i, m in enumerate(branch.messages) if m.id not in prefix and not m.is_special),
        len(branch.messages),
    )
    log = calls if calls is not None else session.calls()
    return branch_turns(origin, result.of_index, log), branch_turns(branch, start, log)


def diff_rerun(session: Session, result: RerunResult) -> BranchDiff:
    """The original branch against the re-run's, turn by turn."""
    original, again = branch_of(session, result)
    return diff_branches(original, again)


def rerun_noise_band(
    store: Store,
    session: Session,
    context: Context | str | None,
    at: int | str,
    endpoint: Endpoint,
    *,
    tools: ToolModes | None = None,
    samples: int = 3,
    on_step: Callable[[int, int], None] | None = None,
    code: str | None = None,
) -> tuple[NoiseBand, list[RerunResult]]:
    """``samples`` unchanged re-runs from the same message (same tool modes) and how much
    their branches differ from each other: an edited re-run whose distance from the
    original lies within it is noise, beyond it a change. ``on_step(k, n)``: the k-th
    re-run has made n model calls. Each is kept as a branch
    labelled ``noise``; a band needs two that succeeded (``samples`` < 2: no pairs)."""
    ref = store.ref_for(session.directory) if session.directory is not None else session.uuid
    runs = []
    for number in range(1, samples + 1):
        steps = (lambda n, k=number: on_step(k, n)) if on_step is not None else None
        runs.append(
            rerun(
                store,
                store.load_session(ref),
                context,
                at,
                endpoint,
                tools=tools,
                label="noise",
                on_step=steps,
                code=code,
            )
        )
    reloaded = store.load_session(ref)
    log = reloaded.calls()
    band = branch_noise_band([branch_of(reloaded, run, log)[1] for run in runs if run.ok])
    return band, runs
