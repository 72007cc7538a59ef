"""Langchain messages as sOAP messages, and the Chat Completions messages ChatOpenAI
builds from them, without importing langchain.

Each sOAP message keeps the langchain message it came from (its ``model_dump``) in its
``langgraph`` metadata, so :func:`sent_form` can build what ChatOpenAI sends for it, as
``langchain_openai.chat_models.base._convert_message_to_dict`` does: the content as it
is (list content filtered as ``_format_message_content`` filters it), ``name`` when set,
an assistant's tool calls with their arguments re-serialized by ``json.dumps(args,
ensure_ascii=False)`` and its content null when it has tool calls and no text, a tool
message with only ``content``, ``role`` and ``tool_call_id``. A message edited since (a
replay's) reads differently from its kept form and is sent from its parts the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from importers.langgraph._checkpoints import LcMessage
from soap_core import (
    MESSAGES_ANCHOR,
    TOOL_RESULT_SUFFIX,
    Context,
    Message,
    TextPart,
    ToolResultPart,
    ToolUsePart,
)

ChatMessage = dict[str, Any]
META_KEY = "langgraph"
_ROLES = {
    "HumanMessage": "user",
    "AIMessage": "assistant",
    "SystemMessage": "system",
    "ToolMessage": "tool_result",
    "FunctionMessage": "tool_result",
}
_DROPPED_BLOCKS = ("tool_use", "thinking", "reasoning_content", "function_call", "code_interpreter_call")


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n\n".join(
            str(b.get("text", "")) if isinstance(b, dict) else str(b)
            for b in content
            if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text")
        )
    return ""


def _arguments(args: Any) -> str:
    return json.dumps(args, ensure_ascii=False)


def message_of(lc: LcMessage) -> Message:
    """The sOAP message for one langchain message (no id or time yet), with the
    langchain message kept in its metadata."""
    kind = str(lc.get("lc_class", ""))
    text = _text_of(lc.get("content"))
    role = _ROLES.get(kind, str(lc.get("role") or "user"))
    if role == "tool_result":
        parts: list[Any] = [ToolResultPart(str(lc.get("tool_call_id", "")), text, name=lc.get("name"))]
    elif role == "assistant":
        calls = [
            ToolUsePart(str(c.get("id") or ""), str(c.get("name") or ""), _arguments(c.get("args", {})))
            for c in lc.get("tool_calls") or []
        ] + [
            ToolUsePart(str(c.get("id") or ""), str(c.get("name") or ""), str(c.get("args") or ""))
            for c in lc.get("invalid_tool_calls") or []
        ]
        parts = [*([TextPart(text)] if text else []), *calls]
    else:
        parts = [TextPart(text)] if text else []
    return Message(role, parts, metadata={META_KEY: {"message": dict(lc)}})


def kept(message: Message) -> LcMessage | None:
    """The langchain message ``message`` was imported from (or a re-run added)."""
    meta = (message.metadata or {}).get(META_KEY)
    found = meta.get("message") if isinstance(meta, dict) else None
    return found if isinstance(found, dict) else None  # type: ignore[return-value]


def _format_content(content: Any) -> Any:
    """``_format_message_content`` for Chat Completions: list content without the blocks
    ChatOpenAI drops (data blocks are sent as langchain converts them: kept as they are here)."""
    if content and isinstance(content, list):
        return [b for b in content if not (isinstance(b, dict) and b.get("type") in _DROPPED_BLOCKS)]
    return content


def _sanitized(content: Any) -> Any:
    if not isinstance(content, list):
        return content
    out = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "text" and "text" in block:
            clean = {"type": "text", "text": block["text"]}
            if "prompt_cache_breakpoint" in block:
                clean["prompt_cache_breakpoint"] = block["prompt_cache_breakpoint"]
            out.append(clean)
        else:
            out.append(block)
    return out


def chat_openai_form(lc: Mapping[str, Any]) -> ChatMessage:
    """What ChatOpenAI sends for the langchain message ``lc`` (Chat Completions)."""
    kind = str(lc.get("lc_class", ""))
    extra = lc.get("additional_kwargs") or {}
    wire: ChatMessage = {"content": _format_content(lc.get("content"))}
    name = lc.get("name") or extra.get("name")
    if name is not None:
        wire["name"] = name
    if kind == "ChatMessage":
        wire["role"] = lc.get("role")
    elif kind == "HumanMessage":
        wire["role"] = "user"
    elif kind == "AIMessage":
        wire["role"] = "assistant"
        calls, invalid = lc.get("tool_calls") or [], lc.get("invalid_tool_calls") or []
        if calls or invalid:
            wire["tool_calls"] = [
                {
                    "type": "function",
                    "id": c.get("id"),
                    "function": {"name": c.get("name"), "arguments": _arguments(c.get("args"))},
                }
                for c in calls
            ] + [
                {
                    "type": "function",
                    "id": c.get("id"),
                    "function": {"name": c.get("name"), "arguments": c.get("args")},
                }
                for c in invalid
            ]
        elif "tool_calls" in extra:
            wire["tool_calls"] = [
                {k: v for k, v in c.items() if k in ("id", "type", "function")} for c in extra["tool_calls"]
            ]
        elif "function_call" in extra:
            wire["function_call"] = extra["function_call"]
        if "function_call" in wire or "tool_calls" in wire:
            wire["content"] = wire["content"] or None
        audio = extra.get("audio")
        if isinstance(audio, dict):
            wire["audio"] = {"id": audio["id"]} if "id" in audio else audio
    elif kind == "SystemMessage":
        wire["role"] = extra.get("__openai_role__", "system")
    elif kind == "FunctionMessage":
        wire["role"] = "function"
    elif kind == "ToolMessage":
        wire["role"] = "tool"
        wire["tool_call_id"] = lc.get("tool_call_id")
        wire["content"] = _sanitized(wire["content"])
        wire = {k: v for k, v in wire.items() if k in ("content", "role", "tool_call_id")}
    return wire


def lc_of(message: Message) -> LcMessage:
    """The langchain message ``message`` stands for: the kept one while it reads as it
    did, else one built from its parts (an edited message)."""
    original = kept(message)
    if original is not None and _reads_as(message, original):
        return original
    return built_lc(message, original)


def built_lc(message: Message, original: LcMessage | None = None) -> LcMessage:
    """A langchain message (as dumped) for ``message``'s parts; the original's name and id kept."""
    text = message.text()
    base: dict[str, Any] = {"content": text, "additional_kwargs": {}, "response_metadata": {}}
    if original is not None:
        base["id"], base["name"] = original.get("id"), original.get("name")
    if message.role == "assistant":
        calls = []
        for use in message.tool_uses():
            try:
                args = json.loads(use.arguments) if use.arguments else {}
            except ValueError:
                args = use.arguments
            calls.append({"name": use.name, "args": args, "id": use.call_id, "type": "tool_call"})
        return cast(
            LcMessage,
            {"lc_class": "AIMessage", "type": "ai", **base, "tool_calls": calls, "invalid_tool_calls": []},
        )
    if message.role == "tool_result":
        results = message.tool_results()
        result = results[0] if results else ToolResultPart("", "")
        content = result.content if isinstance(result.content, str) else json.dumps(result.content)
        base["content"] = content
        return cast(
            LcMessage, {"lc_class": "ToolMessage", "type": "tool", **base, "tool_call_id": result.call_id}
        )
    if message.role == "system":
        return cast(LcMessage, {"lc_class": "SystemMessage", "type": "system", **base})
    return cast(LcMessage, {"lc_class": "HumanMessage", "type": "human", **base})


def _reads_as(message: Message, lc: LcMessage) -> bool:
    fresh = message_of(lc)
    return [_part_key(p) for p in fresh.content] == [_part_key(p) for p in message.content] and (
        fresh.role == message.role
    )


def _part_key(part: Any) -> tuple[Any, ...]:
    if isinstance(part, TextPart):
        return ("text", part.text)
    if isinstance(part, ToolUsePart):
        return ("use", part.call_id, part.name, part.arguments)
    if isinstance(part, ToolResultPart):
        return ("result", part.call_id, json.dumps(part.content, sort_keys=True, default=str))
    return ("other", type(part).__name__)


def sent_form(message: Message) -> list[ChatMessage]:
    """What ChatOpenAI sends for ``message``: one chat message per tool result for a
    message holding several, else one."""
    if message.role == "tool_result" and len(message.tool_results()) > 1 and kept(message) is None:
        return [chat_openai_form(built_lc(Message("tool_result", [r]))) for r in message.tool_results()]
    return [chat_openai_form(lc_of(message))]


def append_message(context: Context, message: Message) -> Message:
    """Append ``message`` where the runtime would: a tool result under the assistant
    message that called it (its ``<id>:tool_result`` anchor), anything else at the end."""
    results = message.tool_results()
    owner = next((m for m in reversed(context.messages) if m.role != "tool_result"), None)
    anchor = MESSAGES_ANCHOR
    if (
        message.role == "tool_result"
        and results
        and owner is not None
        and any(use.call_id == results[0].call_id for use in owner.tool_uses())
    ):
        anchor = owner.id + TOOL_RESULT_SUFFIX
        if all(name != anchor for name, _ in context.anchor_points):
            context.add_anchor(anchor, context.anchor_index(MESSAGES_ANCHOR), after_existing=False)
    return context.append(message, anchor)
