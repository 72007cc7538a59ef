"""The Chat Completions messages the Agents SDK sends for a list of items, without the SDK.

A port of ``Converter.items_to_messages`` (agents/models/chatcmpl_converter.py, 0.24.0)
for the items a ``SQLiteSession`` holds under a Chat Completions model: user, system and
developer messages, assistant output messages, function calls (arguments sent as the raw
string the model wrote, ``"{}"`` when empty) attached to the assistant message before
them, function call outputs as tool messages, and reasoning items (sent back as
``reasoning`` when the SDK would: the item's model is the request's and its provider data
names that field, and DeepSeek's ``reasoning_content`` by the SDK's default rule). The
SDK's rules are kept where they decide the shape: an assistant
message without tool calls has no ``tool_calls`` key, one with only tool calls has
``content: null``, and a message item after tool calls of the same turn merges into them.

Not ported (the import names such a row and leaves it out): file-search calls, and the
hosted tools' items the SDK cannot send to a Chat Completions model either.

:func:`items_of` gives back the items of a sOAP message: those it was imported from when
its parts are still theirs, else items made from its parts (a replay's edit).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from importers.agents_sdk._items import FAKE_ID, ItemError, kind, meta_of, parts_of
from soap_core import Message, TextPart, ThinkingPart, ToolPart, ToolResultPart, ToolUsePart, UnknownPart

TOOLS_KEY = "openai_agents_tools"
"""Metadata of a rebuilt tool-definitions message: the tools exactly as the SDK sent them."""
REASONING_FIELD_KEY = "_chat_completions_reasoning_field"
"""Where the SDK's provider data says which response field held the reasoning."""


def _canonical_piece(piece: Any) -> Any:
    """A raw Chat Completions part as the SDK's canonical item part (its alias rule)."""
    if isinstance(piece, dict) and piece.get("type") == "text":
        return {**piece, "type": "input_text"}
    if isinstance(piece, dict) and piece.get("type") == "image_url":
        payload = piece.get("image_url") or {}
        found = {"type": "input_image", "image_url": payload.get("url")}
        if payload.get("detail") is not None:
            found["detail"] = payload["detail"]
        if piece.get("prompt_cache_breakpoint") is not None:
            found["prompt_cache_breakpoint"] = piece["prompt_cache_breakpoint"]
        return found
    return piece


def _media_part(piece: dict[str, Any]) -> dict[str, Any]:
    """A video, audio or file part as the SDK's converter sends it."""
    kind_ = piece["type"]
    if kind_ == "video_url":
        url = (piece.get("video_url") or {}).get("url") if isinstance(piece.get("video_url"), dict) else None
        if not url:
            raise ItemError(f"only video URLs are supported for video_url {piece}")
        return {"type": "video_url", "video_url": {"url": url}}
    if kind_ == "input_audio":
        audio = piece.get("input_audio")
        if not isinstance(audio, dict) or not audio.get("data") or not audio.get("format"):
            raise ItemError(f"input_audio requires both data and format {piece}")
        return {"type": "input_audio", "input_audio": {"data": audio["data"], "format": audio["format"]}}
    if piece.get("file_data"):
        file: dict[str, Any] = {"file_data": piece["file_data"]}
    elif piece.get("file_id"):
        file = {"file_id": piece["file_id"]}
    else:
        raise ItemError(f"only file_data or file_id is supported for input_file {piece}")
    if piece.get("filename"):
        file["filename"] = piece["filename"]
    return {"type": "file", "file": file}


def _all_content(content: Any) -> Any:
    if isinstance(content, str):
        return content
    out: list[dict[str, Any]] = []
    for raw in content:
        piece = _canonical_piece(raw)
        kind_ = piece.get("type") if isinstance(piece, dict) else None
        if kind_ == "input_text":
            part: dict[str, Any] = {"type": "text", "text": piece["text"]}
        elif kind_ == "input_image" and piece.get("image_url"):
            detail = piece.get("detail", "auto")
            url = {"url": piece["image_url"], "detail": "high" if detail == "original" else detail}
            part = {"type": "image_url", "image_url": url}
        elif kind_ in ("video_url", "input_audio", "input_file"):
            part = _media_part(piece)
        else:
            raise ItemError(f"content this importer does not convert: {raw}")
        if piece.get("prompt_cache_breakpoint") is not None:
            part["prompt_cache_breakpoint"] = piece["prompt_cache_breakpoint"]
        out.append(part)
    return out


def _text_content(content: Any) -> Any:
    found = _all_content(content)
    return found if isinstance(found, str) else [c for c in found if c.get("type") == "text"]


class _Builder:
    """The state ``items_to_messages`` keeps while it walks the items."""

    def __init__(self, model: str | None) -> None:
        self.model = model
        self.result: list[dict[str, Any]] = []
        self.current: dict[str, Any] | None = None
        self.pending_reasoning: str | None = None
        self.pending_reasoning_content: str | None = None  # DeepSeek's field

    def flush(self, *, clear_reasoning: bool = True) -> None:
        if self.current is not None:
            if not self.current.get("tool_calls"):
                del self.current["tool_calls"]
                self.pending_reasoning = self.pending_reasoning_content = None
            self.result.append(self.current)
            self.current = None
        if clear_reasoning:
            self.pending_reasoning = self.pending_reasoning_content = None

    def apply_reasoning(self, message: dict[str, Any]) -> None:
        if self.pending_reasoning_content:
            message["reasoning_content"] = self.pending_reasoning_content
            self.pending_reasoning_content = None
        if self.pending_reasoning:
            message["reasoning"] = self.pending_reasoning
            self.pending_reasoning = None

    def ensure_assistant(self) -> dict[str, Any]:
        if self.current is None:
            self.current = {"role": "assistant", "content": None, "tool_calls": []}
        self.apply_reasoning(self.current)
        return self.current

    def add(self, item: dict[str, Any]) -> None:
        found = kind(item)
        if found in ("user", "system", "developer", "assistant"):
            self.flush()
            content = item["content"]
            value = _all_content(content) if found == "user" else _text_content(content)
            self.result.append({"role": found, "content": value})
        elif found == "output":
            self.output(item)
        elif found == "function_call":
            message = self.ensure_assistant()
            message["tool_calls"] = [
                *message.get("tool_calls", []),
                {
                    "id": item["call_id"],
                    "type": "function",
                    "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"},
                },
            ]
        elif found == "function_call_output":
            self.flush()
            output = _all_content(item["output"])
            if not isinstance(output, str):
                output = [c for c in output if c.get("type") == "text"] or "[tool output omitted]"
            self.result.append({"role": "tool", "tool_call_id": item["call_id"], "content": output})
        elif found == "reasoning":
            self.reasoning(item)
        else:
            raise ItemError(f"an item of type {found!r}, which a Chat Completions model cannot be sent")

    def output(self, item: dict[str, Any]) -> None:
        texts, refusal = [], None
        for piece in item["content"]:
            if piece.get("type") == "output_text":
                texts.append(piece["text"])
            elif piece.get("type") == "refusal":
                refusal = piece["refusal"]
            else:
                raise ItemError(f"unknown content type in an output message: {piece}")
        current = self.current
        if (
            current is not None
            and current.get("tool_calls")
            and "refusal" not in current
            and current.get("content") is None
        ):
            if texts:
                current["content"] = "\n".join(texts)
            if refusal is not None:
                current["refusal"] = refusal
            self.apply_reasoning(current)
            return
        self.flush(clear_reasoning=False)
        message: dict[str, Any] = {"role": "assistant"}
        if refusal is not None:
            message["refusal"] = refusal
        if texts:
            message["content"] = "\n".join(texts)
        message["tool_calls"] = []
        self.apply_reasoning(message)
        self.current = message

    def reasoning(self, item: dict[str, Any]) -> None:
        self.pending_reasoning = self.pending_reasoning_content = None
        data = item.get("provider_data") or {}
        origin = data.get("model", "")
        if data.get(REASONING_FIELD_KEY) == "reasoning" and self.model == origin:
            texts = [
                c["text"]
                for c in item.get("content") or []
                if isinstance(c, dict) and c.get("type") == "reasoning_text" and c.get("text")
            ]
            if texts:
                self.pending_reasoning = "\n".join(texts)
        if self.model is not None and _replays_reasoning_content(self.model, origin or None, data):
            texts = [s["text"] for s in item.get("summary") or [] if isinstance(s, dict) and s.get("text")]
            if texts:
                self.pending_reasoning_content = "\n".join(texts)


def _replays_reasoning_content(model: str, origin: str | None, data: dict[str, Any]) -> bool:
    """The SDK's default rule (``default_should_replay_reasoning_content``): DeepSeek's
    ``reasoning_content`` goes back to DeepSeek only, from DeepSeek or an unmarked item.
    (An app's own hook for this is not in the file: with --agent the SDK applies it.)"""
    if "deepseek" not in model.lower():
        return False
    rest = {k: v for k, v in data.items() if k != "thinking_blocks"}
    return (origin is not None and "deepseek" in origin.lower()) or not rest


def items_to_messages(items: Iterable[dict[str, Any]], model: str | None) -> list[dict[str, Any]]:
    """The ``messages`` the SDK's converter makes of ``items`` for ``model`` (no system
    message: the agent's instructions are inserted before them at call time)."""
    builder = _Builder(model)
    for item in items:
        builder.add(item)
    builder.flush()
    return builder.result


def _output_text(text: str) -> dict[str, Any]:
    return {"annotations": [], "text": text, "type": "output_text", "logprobs": []}


def _items_from_parts(message: Message) -> list[dict[str, Any]]:
    """Items for a message whose parts are not those of its items (a replay's edit), as
    the SDK would have stored them."""
    parts = message.content
    if message.role == "tool_result":
        return [
            {
                "call_id": p.call_id,
                "output": p.content if isinstance(p.content, str) else json.dumps(p.content),
                "type": "function_call_output",
            }
            for p in parts
            if isinstance(p, ToolResultPart)
        ]
    if message.role == "assistant":
        found: list[dict[str, Any]] = []
        texts = [p.text for p in parts if isinstance(p, TextPart)]
        if texts:
            found.append(
                {
                    "id": FAKE_ID,
                    "content": [_output_text(t) for t in texts],
                    "role": "assistant",
                    "status": "completed",
                    "type": "message",
                }
            )
        found.extend(
            {
                "arguments": p.arguments,
                "call_id": p.call_id,
                "name": p.name,
                "type": "function_call",
                "id": FAKE_ID,
            }
            for p in parts
            if isinstance(p, ToolUsePart)
        )
        return found
    role = "system" if message.message_type == "SystemPromptMessage" else "user"
    kept = [p for p in parts if not isinstance(p, ThinkingPart)]
    if len(kept) == 1 and isinstance(kept[0], TextPart):
        return [{"content": kept[0].text, "role": role}]
    content = [
        {"type": "input_text", "text": p.text} if isinstance(p, TextPart) else dict(p.data)
        for p in kept
        if isinstance(p, TextPart | UnknownPart)
    ]
    return [{"content": content, "role": role}]


def items_of(message: Message) -> list[dict[str, Any]]:
    """The SDK items behind ``message``: those it was imported from while its parts are
    theirs, else made from its parts."""
    items = meta_of(message).get("items")
    if isinstance(items, list) and items:
        try:
            if tuple(parts_of(items)) == tuple(message.content):
                return [dict(i) for i in items]
        except ItemError:
            pass
    return _items_from_parts(message)


def chat_messages(messages: Sequence[Message], model: str | None) -> list[dict[str, Any]]:
    """The Chat Completions messages for ``messages`` (the context before a call)."""
    items = [item for m in messages if not m.is_special for item in items_of(m)]
    return items_to_messages(items, model)


def tools_of(message: Message) -> list[dict[str, Any]]:
    raw = (message.metadata or {}).get(TOOLS_KEY)
    parts = message.tool_definitions()
    kept = (
        [
            (
                t["function"]["name"],
                t["function"].get("description") or "",
                t["function"].get("parameters") or {},
            )
            for t in raw
        ]
        if isinstance(raw, list)
        else None
    )
    if isinstance(raw, list) and kept == [(p.name, p.description, dict(p.parameters)) for p in parts]:
        return [dict(t) for t in raw]
    return [
        {
            "type": "function",
            "function": {"name": p.name, "description": p.description, "parameters": dict(p.parameters)},
        }
        for p in parts
    ]


def tools_message(tools: list[dict[str, Any]]) -> Message:
    """The tools a call was sent, as a tool-definitions message that keeps them exactly."""
    parts = [
        ToolPart(
            t["function"]["name"],
            t["function"].get("description") or "",
            t["function"].get("parameters") or {},
        )
        for t in tools
    ]
    message = Message.tool_definitions_message(parts)
    message.metadata = {TOOLS_KEY: tools}
    return message
