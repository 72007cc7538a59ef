"""sOAP messages as an OpenAI Chat Completions request, and the request's identity.

The runtime builds every request it sends with :func:`chat_request`, and replay builds
the request it rematerializes with the same function, so a recorded call and its
rematerialization can be compared by :func:`request_hash` alone.

Mapping (what a Chat Completions provider receives):

* ``SystemPromptMessage`` → a ``system`` message.
* ``ToolDefinitionsMessage`` (role ``tool``) → the request's ``tools``.
* ``assistant`` → an ``assistant`` message: text parts joined by blank lines (``""``
  when there is none: some servers reject null content), ``tool_use`` parts as
  ``tool_calls``. Thinking parts are not sent: Chat Completions has no input field for
  them, so a provider never sees earlier reasoning.
* ``tool_result`` → one ``tool`` message per result part, tied by ``tool_call_id``;
  content that is not a string is sent as its JSON.
* ``user`` → a ``user`` message: a plain string for a single text part, else a list of
  content parts (text, ``image_url`` with a data URL, ``input_audio``, ``file`` for
  PDFs and other documents; video has no Chat Completions part and is sent as a note).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from soap_core._message import Message
from soap_core._parts import MediaPart, Part, TextPart, ToolPart, ToolResultPart, ToolUsePart

ChatMessage = dict[str, Any]

# Request keys in the order they are written; parameters not listed follow, sorted.
_REQUEST_ORDER = ("model", "messages", "tools", "tool_choice", "temperature", "top_p", "max_tokens", "seed")


def canonical_json(value: Any) -> str:
    """One text per JSON value: sorted keys, no spaces, UTF-8 kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_hash(request: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of a request: what "the same request" means (a lone
    surrogate a file held is hashed as its surrogatepass bytes, the same everywhere)."""
    return hashlib.sha256(canonical_json(request).encode("utf-8", "surrogatepass")).hexdigest()


def tool_schema(part: ToolPart) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": part.name, "description": part.description, "parameters": dict(part.parameters)},
    }


def _data_url(part: MediaPart) -> str:
    if part.url is not None:
        return part.url
    return f"data:{part.media_type or 'application/octet-stream'};base64,{part.source.get('data', '')}"


def _user_part(part: Part) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if not isinstance(part, MediaPart):
        return None
    if part.type == "image":
        return {"type": "image_url", "image_url": {"url": _data_url(part)}}
    if part.type == "audio" and part.url is None:
        audio_format = (part.media_type or "audio/wav").split("/")[-1]
        return {
            "type": "input_audio",
            "input_audio": {"data": part.source.get("data", ""), "format": audio_format},
        }
    if part.type == "pdf" or part.type == "audio":
        return {"type": "file", "file": {"file_data": _data_url(part)}}
    return {
        "type": "text",
        "text": f"[{part.type} {part.media_type or ''} not sent: no Chat Completions part]",
    }


def _texts(parts: Sequence[Part]) -> str:
    return "\n\n".join(p.text for p in parts if isinstance(p, TextPart))


def _tool_content(content: Any) -> str:
    return content if isinstance(content, str) else canonical_json(content)


def chat_message(message: Message) -> list[ChatMessage]:
    """The chat messages one sOAP message becomes (none for tool definitions)."""
    if message.message_type == "ToolDefinitionsMessage":
        return []
    if message.message_type == "SystemPromptMessage" or message.role == "system":
        return [{"role": "system", "content": _texts(message.content)}]
    if message.role == "tool_result":
        return [
            {"role": "tool", "tool_call_id": p.call_id, "content": _tool_content(p.content)}
            for p in message.content
            if isinstance(p, ToolResultPart)
        ]
    if message.role == "assistant":
        out: ChatMessage = {"role": "assistant", "content": _texts(message.content)}
        calls = [
            {"id": p.call_id, "type": "function", "function": {"name": p.name, "arguments": p.arguments}}
            for p in message.content
            if isinstance(p, ToolUsePart)
        ]
        if calls:
            out["tool_calls"] = calls
        return [out]
    parts = [converted for p in message.content if (converted := _user_part(p)) is not None]
    if len(parts) == 1 and parts[0]["type"] == "text":
        return [{"role": message.role, "content": parts[0]["text"]}]
    return [{"role": message.role, "content": parts}]


def chat_request(
    messages: Sequence[Message], *, model: str | None, parameters: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The Chat Completions request for a model that sees ``messages`` (display order).

    ``parameters`` are the sampling and tool settings (temperature, max_tokens, seed,
    tool_choice, response_format, ...); None values are left out, and so is ``model``
    when it is not known (a store written without a call log).
    """
    chat: list[ChatMessage] = []
    tools: list[dict[str, Any]] = []
    for message in messages:
        if message.message_type == "ToolDefinitionsMessage":
            tools.extend(tool_schema(p) for p in message.tool_definitions())
        chat.extend(chat_message(message))
    fields: dict[str, Any] = {"messages": chat} if model is None else {"model": model, "messages": chat}
    if tools:
        fields["tools"] = tools
    fields.update({k: v for k, v in (parameters or {}).items() if v is not None})
    if not tools:
        fields.pop("tool_choice", None)
    ordered = {k: fields[k] for k in _REQUEST_ORDER if k in fields}
    ordered.update({k: fields[k] for k in sorted(fields) if k not in ordered})
    return ordered
