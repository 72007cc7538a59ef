"""The app's own agents, run by the Agents SDK itself: the whole request of a call, and
a re-run from any message. The only module of the importer that imports the SDK.

The request of a call is built by the SDK running the call's turn again
(:func:`whole_request`): the app's starting agent on the turn's input, the turn's earlier
answers given back as recorded and its tools answered with their recorded outputs, the
call stopped when it is made. The SDK thereby follows the handoffs and drops an agent's
``tool_choice`` once it has used a tool (``reset_tool_choice``, tracked per
``Runner.run``) as it did. Where that run goes another way, and for re-runs, the agent
answering is found as the ``Runner`` finds it (:func:`position`: every turn starts at the
app's starting agent, each handoff output ``{"assistant": "X"}`` moves to the agent of that
name among the current one's handoffs) and the reset rule applied to it as the SDK's
``maybe_reset_tool_choice`` does (:func:`settled`).

Only calls through ``OpenAIChatCompletionsModel`` are routed to the workbench
(:mod:`importers._capture`); an app whose agents use another model is refused
(:func:`check_models`), as its calls would reach the network.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from agents import Agent, FunctionTool, Handoff, OpenAIChatCompletionsModel, RunConfig, Runner, SQLiteSession

from importers._capture import Captured, capture_one, in_chain, routed
from importers._code import import_code
from importers.agents_sdk._chat import items_of, items_to_messages, tools_message
from importers.agents_sdk._items import (
    AgentCodeError,
    Row,
    append_message,
    messages_of,
    meta_of,
    utc_text,
)
from soap_core import Message, ToolUsePart, utc_now
from soap_core.runtime import RerunStopped

if TYPE_CHECKING:
    from replay import FrameworkRun

T = TypeVar("T")


def load_agent(code: str) -> Agent[Any]:
    """The ``Agent`` at ``MODULE:ATTR`` (:func:`importers._code.import_code`)."""
    try:
        found = import_code(code)
    except ValueError as exc:
        raise AgentCodeError(str(exc)) from None
    except (ImportError, AttributeError) as exc:
        raise AgentCodeError(f"cannot import {code}: {exc}") from None
    if not isinstance(found, Agent):
        raise AgentCodeError(f"{code} is a {type(found).__name__}, not an Agents SDK Agent")
    return found


def reachable(start: Agent[Any]) -> list[Agent[Any]]:
    """``start`` and every agent its handoffs reach (``Agent`` handoffs, and the agent a
    ``Handoff`` object still refers to)."""
    found: dict[int, Agent[Any]] = {}
    pending = [start]
    while pending:
        agent = pending.pop()
        if id(agent) in found:
            continue
        found[id(agent)] = agent
        for handoff in agent.handoffs:
            target = handoff._agent_ref() if isinstance(handoff, Handoff) and handoff._agent_ref else handoff
            if isinstance(target, Agent):
                pending.append(target)
    return list(found.values())


def check_models(start: Agent[Any]) -> None:
    """Refuse an app whose agents would not ask their model through Chat Completions:
    only those calls are routed to the workbench, any other (the Responses API, which a
    model given by name uses, or LiteLLM) would go out to the network."""
    for agent in reachable(start):
        if not isinstance(agent.model, OpenAIChatCompletionsModel):
            model = agent.model if isinstance(agent.model, str | None) else type(agent.model).__name__
            raise AgentCodeError(
                f"the agent {agent.name!r} asks its model through {model!r}, not an "
                "OpenAIChatCompletionsModel: only Chat Completions calls can be rebuilt and re-run here"
            )


def _handoff_agent(agent: Agent[Any], name: str) -> Agent[Any] | None:
    for handoff in agent.handoffs:
        if isinstance(handoff, Agent) and handoff.name == name:
            return handoff
        if isinstance(handoff, Handoff) and handoff.agent_name == name:
            target = handoff._agent_ref() if handoff._agent_ref is not None else None
            if isinstance(target, Agent):
                return target
    return None


@dataclass(frozen=True)
class Position:
    """Who answers the call after some messages, and whether the reset rule holds for it."""

    agent: Agent[Any]
    used_tools: bool
    """The agent called a tool (a handoff included) earlier in the same turn."""


def position(start: Agent[Any], messages: Sequence[Message]) -> Position:
    """The agent answering the call after ``messages``, followed through the handoffs."""
    agent, used = start, set[int]()
    for message in messages:
        if message.role == "user":
            agent, used = start, set()
        elif message.role == "assistant" and message.tool_uses():
            used.add(id(agent))
        elif message.role == "tool_result" and "handoff" in meta_of(message):
            name = meta_of(message)["handoff"]["to"]
            following = _handoff_agent(agent, name)
            if following is None:
                raise AgentCodeError(
                    f"the file hands off from {agent.name!r} to {name!r}, which is not among its handoffs"
                )
            agent = following
    return Position(agent, id(agent) in used)


def settled(agent: Agent[Any], used_tools: bool) -> Agent[Any]:
    """``agent`` as the SDK would run it at that point: the reset rule applied."""
    if agent.reset_tool_choice is True and used_tools and agent.model_settings.tool_choice is not None:
        return agent.clone(model_settings=dataclasses.replace(agent.model_settings, tool_choice=None))
    return agent


def instructed(agent: Agent[Any], messages: Sequence[Message]) -> Agent[Any]:
    """``agent`` with the system prompt of ``messages`` as its instructions where a
    replay's edit changed it (instructions given as text; a function's are its own)."""
    system = next((m for m in messages if m.message_type == "SystemPromptMessage"), None)
    if system is None or not isinstance(agent.instructions, str) or system.text() == agent.instructions:
        return agent
    return agent.clone(instructions=system.text())


def run_async(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to its end here, or in a thread of its own (with this context,
    so a route set here holds there) when an event loop already runs in this one."""

    async def main() -> T:
        return await make()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    context = contextvars.copy_context()
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(context.run, asyncio.run, main()).result()


def _items(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [item for m in messages if not m.is_special for item in items_of(m)]


_CONFIG = RunConfig(tracing_disabled=True)


def turn_start(messages: Sequence[Message]) -> int:
    """Where the turn of the call after ``messages`` began: its user items (the input
    of the ``Runner.run`` that made the call)."""
    end = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None)
    if end is None:
        return 0
    start = end
    while start > 0 and messages[start - 1].role == "user" and not messages[start - 1].is_special:
        start -= 1
    return start


def recorded_response(answer: Message) -> dict[str, Any]:
    """The Chat Completions response that gave ``answer``, rebuilt from its items."""
    meta = meta_of(answer)
    [message] = items_to_messages(items_of(answer), meta.get("model")) or [{"role": "assistant"}]
    return {
        "id": meta.get("response_id") or "recorded",
        "object": "chat.completion",
        "created": 0,
        "model": meta.get("model") or "recorded",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
    }


def _replayed_turn(start: Agent[Any], messages: Sequence[Message]) -> dict[str, Any] | None:
    """The body of the call after ``messages``, by the SDK running the turn again from its
    start: the app's starting agent on the turn's input, every earlier answer of the turn
    given back as the model gave it and every tool answered with its recorded output, so
    the SDK itself follows the handoffs (their input filters too), applies the reset rule
    and evaluates the instructions as it did. None where the run went another way."""
    begin = turn_start(messages)
    inputs = next((i for i in range(begin, len(messages)) if messages[i].role != "user"), len(messages))
    answers = [recorded_response(m) for m in messages[inputs:] if m.role == "assistant"]
    outputs = {p.call_id: p.content for m in messages[inputs:] for p in m.tool_results()}

    def serve(use: ToolUsePart) -> str | None:
        found = outputs.get(use.call_id)
        return found if isinstance(found, str) else json.dumps(found)

    agent = served_agents(start, serve)[id(start)]
    items = _items(messages[:inputs])
    asked: list[dict[str, Any]] = []

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        asked.append(body)
        if len(asked) > len(answers):
            raise Captured(body)
        return answers[len(asked) - 1]

    with routed(answer), contextlib.suppress(Exception):  # stopped at the call, or another way
        run_async(lambda: Runner.run(agent, items, run_config=_CONFIG))  # type: ignore[arg-type]
    return asked[len(answers)] if len(asked) > len(answers) else None


def whole_request(code: str, messages: Sequence[Message]) -> tuple[dict[str, Any], list[Message]]:
    """The body the SDK sends for the call after ``messages`` (built by the SDK itself,
    the call stopped before it leaves), and its specials as messages: the system message
    and the tools. The turn is run again (:func:`_replayed_turn`); where that run goes
    another way, the answering agent found through the handoffs runs over the items."""
    start = load_agent(code)
    check_models(start)
    body = _replayed_turn(start, messages)
    if body is None:
        found = position(start, messages)
        agent = settled(found.agent, found.used_tools)
        items = _items(messages)
        body = capture_one(lambda: run_async(lambda: Runner.run(agent, items, run_config=_CONFIG)))  # type: ignore[arg-type]
    if body is None:
        raise AgentCodeError(
            f"the app's agents answered without asking their model after message {len(messages)}"
        )
    specials: list[Message] = []
    chat = body.get("messages") or []
    if chat and chat[0].get("role") == "system" and isinstance(chat[0].get("content"), str):
        specials.append(Message.system_prompt(chat[0]["content"]))
    if body.get("tools"):
        specials.append(tools_message(list(body["tools"])))
    return body, specials


# -- re-runs ------------------------------------------------------------------------------


def _served_tool(tool: FunctionTool, serve: Callable[[ToolUsePart], str | None]) -> FunctionTool:
    """``tool`` answered by the re-run's tool modes; the app's own function where they say live."""
    original = tool.on_invoke_tool

    async def invoke(context: Any, arguments: str) -> Any:
        result = serve(ToolUsePart(str(getattr(context, "tool_call_id", "")), tool.name, arguments))
        if result is not None:
            return result
        return await original(context, arguments)

    return dataclasses.replace(tool, on_invoke_tool=invoke)


def served_agents(start: Agent[Any], serve: Callable[[ToolUsePart], str | None]) -> dict[int, Agent[Any]]:
    """A copy of every agent reachable from ``start`` through its handoffs (by the id of
    the original), each function tool served by ``serve``. A ``Handoff`` object keeps its
    own agent (its target is in its closure): that agent's tools run as the app's."""
    copies: dict[int, Agent[Any]] = {}
    pending = [start]
    while pending:
        agent = pending.pop()
        if id(agent) in copies:
            continue
        tools = [_served_tool(t, serve) if isinstance(t, FunctionTool) else t for t in agent.tools]
        copies[id(agent)] = agent.clone(tools=tools)
        pending.extend(h for h in agent.handoffs if isinstance(h, Agent))
    for copy in copies.values():
        copy.handoffs = [copies.get(id(h), h) if isinstance(h, Agent) else h for h in copy.handoffs]
    return copies


SAMPLING_OVERRIDES = ("model", "temperature", "seed", "max_tokens")


def sampling_overrides(mark: Mapping[str, Any]) -> dict[str, Any]:
    """The model and sampling parameters the re-run was asked to change (its mark's
    overrides): they go into every body the SDK builds, the rest stays the SDK's (its
    ``tool_choice`` and its reset, above all)."""
    overrides = mark.get("overrides") or {}
    return {k: overrides[k] for k in SAMPLING_OVERRIDES if overrides.get(k) is not None}


@dataclass
class _Call:
    body: dict[str, Any]
    started_at: str
    response: dict[str, Any] | None = None
    latency_s: float | None = None
    error: str | None = None


def _stopped(exc: BaseException) -> RerunStopped | None:
    return in_chain(exc, RerunStopped)


def rerun_with_code(run: FrameworkRun) -> None:
    """Run the app's ``Runner`` from the re-run message on a new in-memory
    ``SQLiteSession`` holding the fork's items (the app's database is never opened);
    every model call goes to the run's endpoint, each new item lands on the fork."""
    try:
        start = load_agent(run.code)
        check_models(start)
        found = position(start, list(run.fork.messages))
    except AgentCodeError as exc:  # the fork stays, empty, with the reason on the result
        run.result.error = f"AgentCodeError: {exc}"
        return
    messages = list(run.fork.messages)
    copies = served_agents(start, run.serve)
    agent = instructed(settled(copies[id(found.agent)], found.used_tools), messages)
    calls: list[_Call] = []

    changed = sampling_overrides(run.mark)

    def answer(sent: dict[str, Any]) -> dict[str, Any]:
        body = {**sent, **changed}
        call = _Call(body, utc_now())
        calls.append(call)
        began = time.monotonic()
        try:
            call.response, call.latency_s = run.complete(body)
        except Exception as exc:
            call.error = f"{type(exc).__name__}: {exc}"
            raise
        call.latency_s = call.latency_s if call.latency_s is not None else time.monotonic() - began
        return call.response

    session = SQLiteSession(f"soapwb-rerun-{uuid.uuid4()}")  # in memory
    items = _items(messages)

    async def go() -> tuple[Any, list[dict[str, Any]]]:
        await session.add_items(items)  # type: ignore[arg-type]
        outcome: Any = None
        try:
            outcome = await Runner.run(agent, [], session=session, run_config=_CONFIG)
        except Exception as exc:  # the items it saved still land on the fork
            outcome = exc
        return outcome, [dict(i) for i in await session.get_items()]

    with routed(answer):
        outcome, stored = run_async(go)
    session.close()
    _land(run, stored[len(items) :], calls, found.agent.name)
    if isinstance(outcome, BaseException):
        stopped = _stopped(outcome)
        if stopped is not None:
            raise stopped
        run.result.error = f"{type(outcome).__name__}: {outcome}"
    else:
        final = outcome.final_output
        run.result.answer = final if isinstance(final, str | int | float | bool | type(None)) else str(final)


def _land(run: FrameworkRun, items: list[dict[str, Any]], calls: list[_Call], agent: str) -> None:
    """The new items as messages on the fork (as the import makes them: handoffs marked,
    each answer with its agent), each answer with the record of its call."""
    now = utc_text(utc_now())
    rows = [Row(-1 - n, now, item) for n, item in enumerate(items)]
    pending = iter(calls)
    for message in messages_of(rows, lambda _: str(uuid.uuid4()), agent):
        call = next(pending, None) if message.role == "assistant" else None
        if call is None:
            append_message(run.fork, message)
        else:
            run.record(call.body, message, call.response, call.latency_s, started_at=call.started_at)
    for call in pending:  # calls whose answer the SDK did not keep (it failed on them)
        error = call.error or "no answer kept"
        run.record(call.body, None, call.response, call.latency_s, error=error, started_at=call.started_at)
