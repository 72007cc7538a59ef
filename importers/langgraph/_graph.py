"""The app's compiled graph, run by LangGraph itself on a copy of the checkpoint
database: to build each call's whole body at import (:class:`BodyBuilder`) and to
re-run a thread from a message (:func:`rerun_with_graph`). Only this module imports
LangGraph (inside its functions: importing it costs nothing without LangGraph)."""

from __future__ import annotations

import json
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from importers._capture import capture_one, routed
from importers.langgraph._checkpoints import LcMessage
from importers.langgraph._code import copy_of, load_graph
from importers.langgraph._messages import append_message, lc_of, message_of
from replay import FrameworkRun
from soap_core import ToolUsePart, utc_now
from soap_core.runtime import RerunStopped

# -- the graph on a copy of the database ------------------------------------------------


@contextmanager
def graph_on_copy(code: str, db: Path) -> Iterator[Any]:
    """The app's graph with a ``SqliteSaver`` on a temporary copy of ``db`` (the user's
    file is only read), for as long as the block runs."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    graph = load_graph(code)
    with tempfile.TemporaryDirectory(prefix="soapwb-langgraph-") as folder:
        copy = copy_of(db, Path(folder) / "checkpoints.db")
        connection = sqlite3.connect(copy, check_same_thread=False)
        try:
            yield graph.copy(update={"checkpointer": SqliteSaver(connection)})
        finally:
            connection.close()


def _config(thread: str, checkpoint: str | None = None) -> dict[str, Any]:
    configurable = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint is not None:
        configurable["checkpoint_id"] = checkpoint
    return {"configurable": configurable}


def lc_objects(messages: list[LcMessage]) -> list[Any]:
    """Langchain message objects for dumped messages (the classes validate the dumps)."""
    import langchain_core.messages as lc

    return [
        getattr(lc, str(m["lc_class"])).model_validate({k: v for k, v in m.items() if k != "lc_class"})
        for m in messages
    ]


def _dumped(value: Any) -> LcMessage:
    return LcMessage(lc_class=type(value).__name__, **value.model_dump())  # type: ignore[typeddict-item]


def _start(app: Any, thread: str, before: str, messages: list[LcMessage] | None) -> dict[str, Any]:
    """The config to run ``app`` from checkpoint ``before``; when ``messages`` differ
    from the checkpoint's, a new checkpoint holding them (``update_state``), as LangGraph
    forks a thread."""
    config = _config(thread, before)
    if messages is None:
        return config
    current = [_dumped(m) for m in app.get_state(config).values.get("messages", [])]
    if current == messages:
        return config
    from langchain_core.messages import RemoveMessage
    from langgraph.graph.message import REMOVE_ALL_MESSAGES

    update = [RemoveMessage(id=REMOVE_ALL_MESSAGES), *lc_objects(messages)]
    return dict(app.update_state(config, {"messages": update}))


class BodyBuilder:
    """Whole bodies built by the app's graph, for one import: the graph is put on one
    copy of the database the first time a body is asked for."""

    def __init__(self, code: str, db: Path) -> None:
        self.code, self.db = code, db
        self._stack = ExitStack()
        self._app: Any = None

    def body(self, thread: str, before: str) -> dict[str, Any] | None:
        """The body the graph sends for its next model call from checkpoint ``before``."""
        if self._app is None:
            self._app = self._stack.enter_context(graph_on_copy(self.code, self.db))
        app = self._app
        return capture_one(lambda: app.invoke(None, _config(thread, before)))

    def __enter__(self) -> BodyBuilder:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()


# -- tools ------------------------------------------------------------------------------

ToolServer = Callable[[ToolUsePart], str | None]
_serve: ContextVar[ToolServer | None] = ContextVar("soapwb_langgraph_tools", default=None)
_patched = False


def _install_tool_route() -> None:
    """Route every ``BaseTool.invoke`` of a tool call (what ``ToolNode`` makes) through
    the server of this context, when there is one: its string is the tool's answer
    (recorded or injected), None runs the tool (live)."""
    global _patched
    if _patched:
        return
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import BaseTool

    original = BaseTool.invoke

    def invoke(self: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
        serve = _serve.get()
        if serve is None or not (isinstance(input, dict) and input.get("type") == "tool_call"):
            return original(self, input, config, **kwargs)
        use = ToolUsePart(
            str(input.get("id") or ""),
            str(input.get("name") or self.name),
            json.dumps(input.get("args", {}), ensure_ascii=False),
        )
        answer = serve(use)
        if answer is None:
            return original(self, input, config, **kwargs)
        return ToolMessage(content=answer, tool_call_id=use.call_id, name=use.name)

    BaseTool.invoke = invoke  # type: ignore[method-assign]
    _patched = True


@contextmanager
def served_tools(serve: ToolServer) -> Iterator[None]:
    _install_tool_route()
    token = _serve.set(serve)
    try:
        yield
    finally:
        _serve.reset(token)


# -- re-run -----------------------------------------------------------------------------


@dataclass
class _Call:
    request: dict[str, Any]
    response: dict[str, Any] | None
    latency_s: float | None
    started_at: str
    error: str | None = None


def rerun_with_graph(run: FrameworkRun, db: Path, thread: str, before: str) -> None:
    """Re-run the thread from checkpoint ``before`` with the fork's messages as its
    state, LangGraph running the app's graph on a copy of ``db``: its model calls go to
    the run's endpoint, its tool calls to the run's tool modes; each new message lands
    on the fork (answers recorded as calls)."""
    wanted = [lc_of(m) for m in run.fork.messages if not m.is_special]
    calls: list[_Call] = []

    def answer(built: dict[str, Any]) -> dict[str, Any]:
        body = with_overrides(run, built)
        call = _Call(body, None, None, utc_now())
        calls.append(call)
        try:
            call.response, call.latency_s = run.complete(body)
        except Exception as exc:
            call.error = f"{type(exc).__name__}: {exc}"
            raise
        return call.response

    stop: RerunStopped | None = None
    with graph_on_copy(run.code, db) as app:
        config = _start(app, thread, before, wanted)
        try:
            with routed(answer), served_tools(run.serve):
                app.invoke(None, config)
        except Exception as exc:
            stop = _stopped(exc)
            if stop is None:
                run.result.error = f"{type(exc).__name__}: {exc}"
        final = app.get_state(_config(thread))
        added = [_dumped(m) for m in final.values.get("messages", [])]
    if added[: len(wanted)] != wanted and run.result.error is None:
        run.result.error = (
            "the graph's state after the run does not start with the fork's messages: nothing landed"
        )
    _land(run, added[len(wanted) :] if added[: len(wanted)] == wanted else [], calls)
    if stop is not None:  # the seam reports it, after the branch so far has landed
        raise stop


def with_overrides(run: FrameworkRun, body: dict[str, Any]) -> dict[str, Any]:
    """The graph's body with the re-run's model and sampling overrides (those that differ
    from the call's recorded ones); the rest as the graph built it."""
    recorded = run.found.parameters
    changed = dict(body)
    if "model" in recorded and run.model != recorded["model"]:
        changed["model"] = run.model
    for key in ("temperature", "seed", "max_tokens"):
        if key in run.parameters and run.parameters[key] != recorded.get(key):
            sent_as = (
                "max_completion_tokens" if key == "max_tokens" and "max_completion_tokens" in body else key
            )
            changed[sent_as] = run.parameters[key]
    return changed


def _stopped(exc: BaseException) -> RerunStopped | None:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, RerunStopped):
            return cause
        cause = cause.__cause__ or cause.__context__
    return None


def _land(run: FrameworkRun, added: list[LcMessage], calls: list[_Call]) -> None:
    """The run's new messages on the fork: each answer with its call's record, tool
    results under the call that asked for them (a result the tool node marked as an
    error also among the run's tool failures)."""
    pending = iter(calls)
    last: LcMessage | None = None
    asked: dict[str, dict[str, Any]] = {}
    for lc in added:
        message = message_of(lc)
        if lc.get("lc_class") == "ToolMessage" and lc.get("status") == "error":
            call_ask = asked.get(str(lc.get("tool_call_id")), {})
            run.result.tool_failures.append(
                {
                    "role": run.session.role,
                    "tool": lc.get("name") or call_ask.get("name"),
                    "arguments": json.dumps(call_ask.get("args", {}), ensure_ascii=False),
                    "result": lc.get("content"),
                }
            )
        asked.update({str(c.get("id")): c for c in lc.get("tool_calls") or []})
        if lc.get("lc_class") == "AIMessage":
            call = next(pending, None)
            if call is None:  # an answer no model call made (a node wrote it)
                append_message(run.fork, message).record_token_count()
                continue
            run.record(call.request, message, call.response, call.latency_s, started_at=call.started_at)
            last = lc
        else:
            append_message(run.fork, message).record_token_count()
    for call in pending:  # calls whose answer never reached the state (an error)
        run.record(
            call.request, None, call.response, call.latency_s, error=call.error, started_at=call.started_at
        )
    if run.result.error is None and last is not None and not last.get("tool_calls"):
        run.result.answer = message_of(last).text()
