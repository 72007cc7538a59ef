"""Chat Completions messages as traced, and the sOAP messages that hold them.

Each message of a traced request becomes one sOAP message (a system message first in the
request becomes the context's system prompt, the request's ``tools`` its tool
definitions). What :func:`soap_core.chat_message` would send for that message is usually
what was sent; where it is not (an assistant message sent without ``content``, a tool
definition with ``strict``, list content), the message keeps the traced form in its
``otel`` metadata (``wire``), and :func:`sent_form` gives that form back for as long as
the message reads as it did: an edit (a replay's) sends the edited message as our
runtime would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from soap_core import Message, TextPart, ToolPart, ToolResultPart, ToolUsePart, chat_message, tool_schema

ChatMessage = dict[str, Any]

META_KEY = "otel"


def _texts(content: Any) -> list[TextPart]:
    if isinstance(content, str):
        return [TextPart(content)] if content else []
    if isinstance(content, list):
        return [
            TextPart(str(p.get("text", "")))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        ]
    return []


def _text(content: Any) -> str:
    return "\n\n".join(p.text for p in _texts(content))


def message_of(wire: Mapping[str, Any], *, first: bool = False) -> Message:
    """The sOAP message for one traced chat message (no id, time or metadata yet);
    ``first``: the request's first message, where a system message is the system prompt."""
    role = str(wire.get("role", "user"))
    if role == "system" and first:
        return Message.system_prompt(_text(wire.get("content")))
    if role == "assistant":
        calls = [
            ToolUsePart(
                str(c.get("id", "")), str(function.get("name", "")), str(function.get("arguments", ""))
            )
            for c in wire.get("tool_calls") or []
            if isinstance(c, dict)
            for function in [c["function"] if isinstance(c.get("function"), dict) else {}]
        ]
        return Message("assistant", [*_texts(wire.get("content")), *calls])
    if role == "tool":
        return Message(
            "tool_result", [ToolResultPart(str(wire.get("tool_call_id", "")), wire.get("content"))]
        )
    return Message(role, _texts(wire.get("content")))


def tools_message(tools: Sequence[Mapping[str, Any]]) -> Message:
    parts = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        function = function if isinstance(function, dict) else {}
        parts.append(
            ToolPart(
                str(function.get("name", "")),
                str(function.get("description") or ""),
                parameters if isinstance(parameters := function.get("parameters"), dict) else {},
            )
        )
    return Message.tool_definitions_message(parts)


def generic_form(message: Message) -> list[ChatMessage]:
    """What our runtime sends for ``message`` (the tool schemas, for tool definitions)."""
    if message.message_type == "ToolDefinitionsMessage":
        return [tool_schema(p) for p in message.tool_definitions()]
    return chat_message(message)


def traced_form(message: Message) -> list[ChatMessage] | None:
    meta = (message.metadata or {}).get(META_KEY)
    wire = meta.get("wire") if isinstance(meta, dict) else None
    return wire if isinstance(wire, list) else None


def _reads_as(message: Message, wire: list[ChatMessage]) -> bool:
    """Whether ``message`` still reads as the traced ``wire`` did when imported."""
    if message.message_type == "ToolDefinitionsMessage":
        return generic_form(message) == generic_form(tools_message(wire))
    first = message.message_type == "SystemPromptMessage"
    return generic_form(message) == [m for w in wire for m in generic_form(message_of(w, first=first))]


def sent_form(message: Message) -> list[ChatMessage]:
    """The chat messages (or tools) ``message`` stands for in a request: as traced while
    it reads as it did, else as our runtime would send it."""
    wire = traced_form(message)
    return wire if wire is not None and _reads_as(message, wire) else generic_form(message)


def keep_form(message: Message, wire: list[ChatMessage]) -> None:
    """Remember ``wire`` as what ``message`` was sent as, where our runtime's form differs."""
    meta = dict((message.metadata or {}).get(META_KEY) or {})
    meta.pop("wire", None)
    if wire != generic_form(message):
        meta["wire"] = wire
    meta["sent"] = True
    message.metadata = {**(message.metadata or {}), META_KEY: meta}


def was_sent(message: Message) -> bool:
    meta = (message.metadata or {}).get(META_KEY)
    return isinstance(meta, dict) and bool(meta.get("sent"))
