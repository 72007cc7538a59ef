"""The Chat Completions body peteos's OpenAI adapter builds from a context.

This follows ``peteos/chatbot/openaichatbot.py`` (``OpenAIChatBot._build_body`` and
``_translate_tool_params_to_openai``; the same code in 0.5.8 and 0.6.13) step by step,
on the stored message dicts, because the exact request is what that code builds and
not a generic rendering of the messages. Its quirks are kept on purpose:

* keys: ``model``, ``stream``, ``max_tokens``, then generation settings, ``messages``,
  ``tools``; tool parameters (peteos's ``{name: {type, required, default}}``) become a
  JSON Schema object, ``any`` an ``anyOf`` of six types, unknown types ``string``;
* a thinking part becomes the message's ``reasoning`` (the last one wins), tool uses
  ``tool_calls``; ``content`` is omitted when no other part is left;
* a text part keeps its other keys and has ``text`` renamed ``content``; one part alone
  is sent flat as its ``content`` (so a lone image is sent as ``""``), several as a list;
* image -> ``image_url`` with a data URL, video -> ``media``, pdf (every document type)
  -> ``input_file`` with a data URL, anything else (audio too) as stored;
* each tool result part -> a ``tool`` message; other roles are not sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from replay._materialize import MaterializeError
from soap_core import Message

_TYPE_MAP = {
    "int": "integer",
    "str": "string",
    "float": "number",
    "bool": "boolean",
    "list": "array",
    "dict": "object",
    "any": "any_of",
}
_ANY_OF = [{"type": t} for t in ("integer", "string", "number", "boolean", "array", "object")]
_REQUEST_TRANSLATIONS = {"text": "content", "reasoning": "reasoning", "tool_calls": "tool_calls"}
DEFAULT_MAX_TOKENS = 4096
"""``BackendConfig.max_tokens`` when peteos.json does not set it."""


class PeteosBodyError(MaterializeError):
    """A stored message that peteos's adapter could not have sent (it would raise)."""


def openai_tool_parameters(raw_params: Any) -> dict[str, Any]:
    """``_translate_tool_params_to_openai``: peteos's parameter dict as JSON Schema."""
    if not isinstance(raw_params, Mapping):
        raise PeteosBodyError(f"tool parameters must be an object, got {type(raw_params).__name__}")
    required: list[str] = []
    properties: dict[str, Any] = {}
    for name, info in raw_params.items():
        if isinstance(info, str):
            required.append(name)
            properties[name] = {"type": _TYPE_MAP.get(info, "string")}
            continue
        if not isinstance(info, Mapping):
            raise PeteosBodyError(f"tool parameter {name!r} must be a string or an object")
        if info.get("required", True):
            required.append(name)
        json_type = _TYPE_MAP.get(info.get("type", "string"), "string")
        prop: dict[str, Any] = {"anyOf": list(_ANY_OF)} if json_type == "any_of" else {"type": json_type}
        if "default" in info:
            prop["default"] = info["default"]
        properties[name] = prop
    return {"type": "object", "properties": properties, "required": required}


def is_json_schema(params: Any) -> bool:
    """Parameters already in JSON Schema form (written by another tool, not peteos's
    ``ToolManager``, whose parameters are ``{name: {type, required, default}}``)."""
    return (
        isinstance(params, Mapping)
        and params.get("type") == "object"
        and isinstance(params.get("properties"), Mapping)
    )


def _tools(parts: Sequence[Mapping[str, Any]], notes: list[str]) -> list[dict[str, Any]]:
    # A stored tool part may lack "type" (older writers); peteos sends the listing as
    # ToolDefinitionsMessage.materialize() normalized it, which always sets it.
    tools = []
    for raw in parts:
        if raw.get("type", "tool") != "tool":
            continue
        params = raw.get("parameters", {})
        if is_json_schema(params):
            notes.append(
                f"tool {raw.get('name')!r} has JSON Schema parameters, which peteos's converter "
                "cannot take: sent as stored"
            )
        else:
            params = openai_tool_parameters(params)
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": raw.get("name"),
                    "description": raw.get("description", ""),
                    "parameters": params,
                },
            }
        )
    return tools


def _media(raw: Mapping[str, Any]) -> dict[str, Any] | Mapping[str, Any]:
    source = raw.get("source", {})
    kind = raw.get("type")
    if not source or not isinstance(source, Mapping) or source.get("type") not in ("base64", "url"):
        return raw  # an unknown source: as-is
    by_url = source.get("type") == "url"
    if kind == "image":
        media_type = source.get("media_type", "image/png")
        url = source["url"] if by_url else f"data:{media_type};base64,{source.get('data', '')}"
        return {"type": "image_url", "image_url": {"url": url}}
    if kind == "video":
        if by_url:
            return {"type": "media", "source": {"type": "url", "url": source["url"]}}
        media_type = source.get("media_type", "video/mp4")
        return {
            "type": "media",
            "source": {"type": "base64", "media_type": media_type, "data": source.get("data", "")},
        }
    media_type = source.get("media_type", "application/pdf")
    url = source["url"] if by_url else f"data:{media_type};base64,{source.get('data', '')}"
    return {"type": "input_file", "file_url": url}


def _conversation_message(role: str, parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": role}
    tool_calls: list[dict[str, Any]] = []
    content: list[Mapping[str, Any]] = []
    for raw in parts:
        kind = raw.get("type")
        if kind == "tool_use":
            tool_calls.append(
                {
                    "type": "function",
                    "id": raw["call_id"],
                    "function": {"name": raw["name"], "arguments": raw["arguments"]},
                }
            )
        elif kind in ("image", "video", "pdf"):
            content.append(_media(raw))
        elif kind == "thinking":
            message["reasoning"] = raw.get("text", "")
        elif kind == "text":
            translated = {_REQUEST_TRANSLATIONS.get(k, k): v for k, v in raw.items()}
            translated.pop("type", None)
            content.append({"type": "text", **translated})
        else:
            content.append(raw)
    if len(content) == 1:
        message["content"] = content[0].get("content", "")
    elif content:
        message["content"] = [dict(p) for p in content]
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def peteos_messages(
    messages: Sequence[Message], notes: list[str] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ``messages`` and ``tools`` of the body, in context order; ``notes`` gains a
    line for anything peteos could not have sent as stored."""
    notes = [] if notes is None else notes
    chat: list[dict[str, Any]] = []
    tools: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        parts = message.raw_content() or []
        try:
            if message.role == "tool":
                tools.extend(_tools(parts, notes))
            elif message.role == "tool_result":
                chat.extend(
                    {"role": "tool", "tool_call_id": raw.get("call_id"), "content": raw.get("content")}
                    for raw in parts
                    if raw.get("type") == "tool_result"
                )
            elif message.role in ("user", "assistant", "system"):
                chat.append(_conversation_message(message.role, parts))
        except (KeyError, PeteosBodyError) as exc:
            problem = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc)
            raise PeteosBodyError(
                f"message {index} ({message.id}): peteos's adapter could not send it: {problem}"
            ) from None
    return chat, tools


def peteos_body(
    messages: Sequence[Message],
    *,
    model: str | None,
    stream: bool = False,
    max_tokens: int | None = DEFAULT_MAX_TOKENS,
    generation_config: Mapping[str, Any] | None = None,
    notes: list[str] | None = None,
) -> dict[str, Any]:
    """``_build_body(context, generation_config)`` for a context holding ``messages``.

    ``model`` None (the files did not tell) leaves the key out rather than invent one.
    """
    body: dict[str, Any] = {} if model is None else {"model": model}
    body["stream"] = stream
    body["max_tokens"] = max_tokens
    for key, value in (generation_config or {}).items():
        body.setdefault(key, value)
    chat, tools = peteos_messages(messages, notes)
    body["messages"] = chat
    if tools:
        body["tools"] = tools
    return body
