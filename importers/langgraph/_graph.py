"""The app's compiled graph, run by LangGraph itself on a copy of the checkpoint
database: to build each call's whole body at import (:class:`BodyBuilder`) and to
re-run a thread from a message (:func:`rerun_with_graph`). Only this module imports
LangGraph (inside its functions: importing it costs nothing without LangGraph)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from importers._capture import capture_one, in_chain, routed
from importers.langgraph._checkpoints import LcMessage
from importers.langgraph._code import copy_of, load_graph
from importers.langgraph._messages import append_message, lc_of, message_of
from replay import FrameworkRun
from soap_core import ToolUsePart, utc_now
from soap_core.runtime import RerunStopped

# -- the graph on a copy of the database ------------------------------------------------


class OnCopy:
    """The app's graph checkpointing on the copy: LangGraph's sync API, or for a graph
    with async nodes its async API run in an event loop of this copy's own (the routes
    and tool modes of this context hold in both: LangGraph runs sync nodes in threads,
    and tasks, with a copy of the context)."""

    def __init__(self, app: Any, loop: asyncio.AbstractEventLoop | None) -> None:
        self.app, self.loop = app, loop

    def _run(self, sync: Callable[[], Any], coroutine: Callable[[], Any]) -> Any:
        return sync() if self.loop is None else self.loop.run_until_complete(coroutine())

    def get_state(self, config: dict[str, Any]) -> Any:
        return self._run(lambda: self.app.get_state(config), lambda: self.app.aget_state(config))

    def update_state(self, config: dict[str, Any], values: dict[str, Any]) -> Any:
        return self._run(
            lambda: self.app.update_state(config, values), lambda: self.app.aupdate_state(config, values)
        )

    def invoke(self, config: dict[str, Any]) -> Any:
        return self._run(lambda: self.app.invoke(None, config), lambda: self.app.ainvoke(None, config))


def _async_only(graph: Any) -> bool:
    """Whether a node of ``graph`` has only an async function (``invoke`` refuses it)."""
    for node in getattr(graph, "nodes", {}).values():
        bound = getattr(node, "bound", None)
        if (
            bound is not None
            and getattr(bound, "func", "") is None
            and getattr(bound, "afunc", None) is not None
        ):
            return True
    return False


@contextmanager
def graph_on_copy(code: str, db: Path) -> Iterator[OnCopy]:
    """The app's graph with a ``SqliteSaver`` (``AsyncSqliteSaver`` for a graph with
    async nodes) on a temporary copy of ``db`` (the user's file is only read), for as
    long as the block runs."""
    graph = load_graph(code)
    with tempfile.TemporaryDirectory(prefix="soapwb-langgraph-") as folder:
        copy = copy_of(db, Path(folder) / "checkpoints.db")
        if not _async_only(graph):
            from langgraph.checkpoint.sqlite import SqliteSaver

            connection = sqlite3.connect(copy, check_same_thread=False)
            try:
                yield OnCopy(graph.copy(update={"checkpointer": SqliteSaver(connection)}), None)
            finally:
                connection.close()
            return
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        loop = asyncio.new_event_loop()
        try:
            saver = loop.run_until_complete(_saver(aiosqlite, AsyncSqliteSaver, copy))
            try:
                yield OnCopy(graph.copy(update={"checkpointer": saver}), loop)
            finally:
                loop.run_until_complete(saver.conn.close())
        finally:
            loop.close()


async def _saver(aiosqlite: Any, saver: Any, path: Path) -> Any:
    """An ``AsyncSqliteSaver`` on ``path``, made in the loop it will run in."""
    return saver(await aiosqlite.connect(str(path)))


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


def _start(app: OnCopy, thread: str, before: str, messages: list[LcMessage] | None) -> dict[str, Any]:
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
        self._app: OnCopy | None = None

    def body(self, thread: str, before: str) -> dict[str, Any] | None:
        """The body the graph sends for its next model call from checkpoint ``before``."""
        if self._app is None:
            self._app = self._stack.enter_context(graph_on_copy(self.code, self.db))
        app = self._app
        return capture_one(lambda: app.invoke(_config(thread, before)))

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

    original, original_async = BaseTool.invoke, BaseTool.ainvoke

    def served(tool: Any, input: Any) -> tuple[bool, Any]:
        """(True, the tool's message) when the tool modes answer this call."""
        serve = _serve.get()
        if serve is None or not (isinstance(input, dict) and input.get("type") == "tool_call"):
            return False, None
        use = ToolUsePart(
            str(input.get("id") or ""),
            str(input.get("name") or tool.name),
            json.dumps(input.get("args", {}), ensure_ascii=False),
        )
        answer = serve(use)
        if answer is None:
            return False, None
        return True, ToolMessage(content=answer, tool_call_id=use.call_id, name=use.name)

    def invoke(self: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
        done, message = served(self, input)
        return message if done else original(self, input, config, **kwargs)

    async def ainvoke(self: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
        done, message = served(self, input)
        if done:
            return message
        token = _serve.set(None)  # a sync tool's ainvoke calls its invoke: not served twice
        try:
            return await original_async(self, input, config, **kwargs)
        finally:
            _serve.reset(token)

    BaseTool.invoke = invoke  # type: ignore[method-assign]
    BaseTool.ainvoke = ainvoke  # type: ignore[method-assign]
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
                app.invoke(config)
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
    return in_chain(exc, RerunStopped)


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
