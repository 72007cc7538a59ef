"""The request of an imported call, built as the Agents SDK builds it.

From the file alone a call is rebuilt as the SDK's ``OpenAIChatCompletionsModel`` builds
it, without importing the SDK (it need not be installed): the messages after the system
message exactly (:mod:`importers.agents_sdk._chat`) and the model the answer's provider
data names; the notes name what the file does not hold. With the app's starting agent
(``--agent MODULE:ATTR``, kept in the session's state) the SDK builds the whole body
itself (:mod:`importers.agents_sdk._code`, imported only then).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from importers.agents_sdk._chat import chat_messages, tools_of
from importers.agents_sdk._items import AgentCodeError, meta_of
from replay import FRAMEWORK_CODE_KEY
from soap_core import Context, Message, Session

NOT_IN_THE_FILE = (
    "the Agents SDK's session file does not hold the agent's instructions (the system message), "
    "its tool and handoff definitions, its model settings (tool_choice, temperature, ...) or which agent "
    "started the turn: import with --agent MODULE:ATTR to rebuild them"
)
_NOT_PARAMETERS = ("model", "messages", "tools")


def model_at(context: Context, index: int) -> str | None:
    """The model of the call behind ``index``: its answer's, else the last one's before it."""
    for message in reversed(context.messages[: index + 1]):
        model = meta_of(message).get("model")
        if message.role == "assistant" and model:
            return str(model)
    return None


def build_request(
    messages: Sequence[Message], *, model: str | None, parameters: Mapping[str, Any]
) -> dict[str, Any]:
    """The body for ``messages``: a system prompt and tool definitions among them (a
    whole request's, or a replay's edit of them) sent as the SDK sends instructions and
    tools, the rest converted as its converter does, then the parameters."""
    system = next((m for m in messages if m.message_type == "SystemPromptMessage"), None)
    tools = next((m for m in messages if m.message_type == "ToolDefinitionsMessage"), None)
    chat = [{"content": system.text(), "role": "system"}] if system is not None and system.text() else []
    chat.extend(chat_messages(messages, model))
    body: dict[str, Any] = {} if model is None else {"model": model}
    body["messages"] = chat
    if tools is not None and tools.tool_definitions():
        body["tools"] = tools_of(tools)
    body.update({k: v for k, v in parameters.items() if k not in _NOT_PARAMETERS and v is not None})
    return body


def request_for(
    session: Session, messages: Sequence[Message], model: str | None, notes: list[str]
) -> tuple[dict[str, Any], list[Message]]:
    """The request of the call after ``messages`` and the messages it was built from
    (with the app's code: its system prompt and tools first); ``notes`` gains what is
    not exact and why."""
    code = session.state_data.get(FRAMEWORK_CODE_KEY)
    if code:
        try:
            from importers.agents_sdk._code import whole_request
        except ImportError as exc:
            notes.append(f"the Agents SDK is not installed here ({exc}): built from the file alone")
        else:
            try:
                body, specials = whole_request(str(code), messages)
            except AgentCodeError as exc:
                notes.append(f"the app's code could not build it ({exc}): built from the file alone")
            else:
                return body, [*specials, *messages]
    notes.append(NOT_IN_THE_FILE)
    return build_request(messages, model=model, parameters={}), list(messages)


def request_at(session: Session, context: Context, index: int) -> dict[str, Any]:
    """The request of the call behind display ``index`` of ``context`` (an import's record)."""
    return request_for(session, context.messages[:index], model_at(context, index), [])[0]


def code_of_agent(code: str) -> Any:
    """The app's starting ``Agent`` named by ``MODULE:ATTR`` (the SDK must be installed),
    checked: its agents ask their models through Chat Completions."""
    try:
        from importers.agents_sdk._code import check_models, load_agent
    except ImportError as exc:
        raise ImportError(f"--agent needs the OpenAI Agents SDK (openai-agents) installed: {exc}") from None
    agent = load_agent(code)
    check_models(agent)
    return agent
