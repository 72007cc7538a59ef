"""The Agents SDK's session items, as ``SQLiteSession`` stores them, and the sOAP
messages they become.

Each row of ``agent_messages`` holds one Responses-API input item as JSON. A model
answer is several rows (its ``message`` and each ``function_call``, one ``reasoning``),
all with the same ``provider_data.response_id`` under a Chat Completions model; they
become one assistant message. A user item is a user message, each
``function_call_output`` a tool result message. Every message keeps the items it came
from (:data:`META_KEY`), so the request is rebuilt from what the SDK itself will convert,
and from its parts only where a replay edited it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TypedDict

from soap_core import (
    MESSAGES_ANCHOR,
    TOOL_RESULT_SUFFIX,
    Context,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolResultPart,
    ToolUsePart,
    UnknownPart,
)

SOURCE = "openai-agents"
"""The request source, and the session state that says an import wrote the session."""
META_KEY = "openai_agents"
"""Message metadata: ``{"rows": [...], "items": [...], "agent": ..., "handoff": ...}``."""
_NAMESPACE = uuid.UUID("0f3c2b6e-55a1-4e0b-8d8e-6a2f4a5b9c17")
FAKE_ID = "__fake_id__"
"""The id the SDK gives items a Chat Completions model produced."""

OUTPUT_TYPES = frozenset({"message", "function_call", "reasoning"})
"""Item types a model answer is made of (a ``message`` item of the assistant role)."""


class Handoff(TypedDict):
    """A handoff as the file shows it: the tool call and the agent it handed to."""

    call_id: str
    tool: str
    to: str


class Meta(TypedDict, total=False):
    """What an imported message keeps of its rows (``metadata[META_KEY]``)."""

    rows: list[int]
    items: list[dict[str, Any]]
    agent: str | None
    """The agent that answered (known after a handoff in the same turn; from the app's
    code otherwise)."""
    handoff: Handoff
    model: str | None
    response_id: str | None


@dataclass(frozen=True)
class Row:
    """One row of ``agent_messages``: its id, time and item."""

    id: int
    created_at: str
    item: dict[str, Any]


class AgentCodeError(Exception):
    """The app's code cannot be used: not importable, not an ``Agent``, or an agent the
    file names (a handoff's target) is not among its handoffs."""


class ItemError(ValueError):
    """An item this importer does not know how to read (a hosted tool's call, a
    compaction item): the SDK's Chat Completions converter refuses it too."""


def kind(item: dict[str, Any]) -> str:
    """``user``/``system``/``developer``/``assistant`` for a message item, else its type."""
    if item.get("type") in (None, "message"):
        role = item.get("role")
        if role == "assistant" and item.get("type") == "message" and "id" in item:
            return "output"
        return str(role)
    return str(item["type"])


def is_output(item: dict[str, Any]) -> bool:
    return kind(item) in ("output", "function_call", "reasoning")


def response_id(item: dict[str, Any]) -> str | None:
    data = item.get("provider_data")
    found = data.get("response_id") if isinstance(data, dict) else None
    return str(found) if found is not None else None


def item_model(item: dict[str, Any]) -> str | None:
    data = item.get("provider_data")
    found = data.get("model") if isinstance(data, dict) else None
    return str(found) if found is not None else None


def handoff_target(output: Any) -> str | None:
    """The agent a handoff's output names (``{"assistant": "Billing"}``), else None."""
    if not isinstance(output, str):
        return None
    try:
        value = json.loads(output)
    except ValueError:
        return None
    if isinstance(value, dict) and list(value) == ["assistant"] and isinstance(value["assistant"], str):
        return value["assistant"]
    return None


def _content_parts(content: Any) -> list[Part]:
    if isinstance(content, str):
        return [TextPart(content)]
    parts: list[Part] = []
    for piece in content if isinstance(content, list) else []:
        if isinstance(piece, dict) and piece.get("type") in ("input_text", "output_text", "text"):
            parts.append(TextPart(str(piece.get("text", ""))))
        elif isinstance(piece, dict) and piece.get("type") == "refusal":
            parts.append(TextPart(str(piece.get("refusal", ""))))
        else:
            parts.append(UnknownPart(dict(piece) if isinstance(piece, dict) else {"value": piece}))
    return parts


def _reasoning_text(item: dict[str, Any]) -> str:
    texts = [c.get("text", "") for c in item.get("content") or [] if isinstance(c, dict)]
    texts = texts or [s.get("text", "") for s in item.get("summary") or [] if isinstance(s, dict)]
    return "\n".join(t for t in texts if t)


def parts_of(items: Sequence[dict[str, Any]]) -> list[Part]:
    """The sOAP parts of one message's items, in their order."""
    parts: list[Part] = []
    for item in items:
        found = kind(item)
        if found in ("user", "system", "developer", "assistant", "output"):
            parts.extend(_content_parts(item.get("content")))
        elif found == "function_call":
            parts.append(
                ToolUsePart(str(item.get("call_id")), str(item.get("name")), str(item.get("arguments") or ""))
            )
        elif found == "function_call_output":
            parts.append(ToolResultPart(str(item.get("call_id")), item.get("output")))
        elif found == "reasoning":
            parts.append(ThinkingPart(_reasoning_text(item)))
        else:
            raise ItemError(f"an item of type {found!r}, which a Chat Completions model cannot be sent")
    return parts


def check_item(item: Any) -> dict[str, Any]:
    """``item`` if this importer can read it; ItemError saying why not."""
    if not isinstance(item, dict):
        raise ItemError(f"the item is a {type(item).__name__}, not a JSON object")
    found = kind(item)
    if found not in (
        "user",
        "system",
        "developer",
        "assistant",
        "output",
        "function_call",
        "function_call_output",
        "reasoning",
    ):
        raise ItemError(f"an item of type {found!r}, which a Chat Completions model cannot be sent")
    if found in ("function_call", "function_call_output") and not isinstance(item.get("call_id"), str):
        raise ItemError(f"a {found} item without a call_id")
    parts_of([item])
    return item


@dataclass
class Group:
    """The rows of one message to be: a user or developer item, a model answer, a tool output."""

    role: Literal["user", "system", "assistant", "tool_result"]
    rows: list[Row] = field(default_factory=list)

    @property
    def items(self) -> list[dict[str, Any]]:
        return [r.item for r in self.rows]


def groups(rows: Sequence[Row]) -> list[Group]:
    """The rows as messages: consecutive output items of one response (one
    ``response_id``, or none) form one assistant message."""
    found: list[Group] = []
    for row in rows:
        item, last = row.item, found[-1] if found else None
        if is_output(item):
            same = (
                last is not None
                and last.role == "assistant"
                and response_id(last.rows[-1].item) == response_id(item)
            )
            if same and last is not None:
                last.rows.append(row)
            else:
                found.append(Group("assistant", [row]))
        elif kind(item) == "function_call_output":
            found.append(Group("tool_result", [row]))
        elif kind(item) == "assistant":  # an easy input message of the assistant role
            found.append(Group("assistant", [row]))
        else:
            found.append(Group("system" if kind(item) in ("system", "developer") else "user", [row]))
    return found


def message_of(group: Group, message_id: str, agent: str | None) -> Message:
    """The sOAP message of ``group`` (its items kept in its metadata)."""
    items = group.items
    meta: Meta = {"rows": [r.id for r in group.rows], "items": items}
    if group.role == "assistant":
        meta["agent"] = agent
        meta["model"] = next((m for m in map(item_model, items) if m), None)
        meta["response_id"] = next((r for r in map(response_id, items) if r), None)
    role = "user" if group.role == "system" else group.role
    return Message(
        role,
        parts_of(items),
        id=message_id,
        creation_timestamp=group.rows[0].created_at,
        metadata={META_KEY: meta},
    )


def messages_of(
    rows: Sequence[Row], ids: Callable[[Group], str], start_agent: str | None = None
) -> list[Message]:
    """The messages of ``rows``: one per group (its id from ``ids``), handoffs marked on
    the call and its result, each answer with the agent that gave it (``start_agent``
    until a handoff in the same turn)."""
    found: list[Message] = []
    agent = start_agent
    calls: dict[str, Message] = {}
    for group in groups(rows):
        if group.role == "user":
            agent = start_agent  # a new turn starts at the app's starting agent
        message = message_of(group, ids(group), agent)
        meta = meta_of(message)
        for use in message.tool_uses():
            calls[use.call_id] = message
        if group.role == "tool_result":
            _mark_handoff(group, meta, calls)
            if "handoff" in meta:
                agent = meta["handoff"]["to"]
        found.append(message)
    return found


def _mark_handoff(group: Group, meta: Meta, calls: dict[str, Message]) -> None:
    item = group.rows[0].item
    target = handoff_target(item.get("output"))
    caller = calls.get(str(item.get("call_id")))
    if target is None or caller is None:
        return
    use = next(u for u in caller.tool_uses() if u.call_id == item.get("call_id"))
    meta["handoff"] = {"call_id": use.call_id, "tool": use.name, "to": target}
    caller_meta = meta_of(caller)
    caller_meta["handoff"] = dict(meta["handoff"])  # type: ignore[typeddict-item]


def meta_of(message: Message) -> Meta:
    found = (message.metadata or {}).get(META_KEY)
    return found if isinstance(found, dict) else {}  # type: ignore[return-value]


def utc_text(created_at: str) -> str:
    """SQLite's ``CURRENT_TIMESTAMP`` (UTC, to the second) as an ISO time with its zone."""
    try:
        return datetime.fromisoformat(created_at).replace(tzinfo=UTC).isoformat()
    except ValueError:
        return created_at


def append_message(context: Context, message: Message) -> int:
    """Append ``message`` where the runtime would: a tool result right after the answer
    that called it (its ``<id>:tool_result`` anchor); its display index."""
    anchor = MESSAGES_ANCHOR
    results = message.tool_results()
    if message.role == "tool_result" and results:
        owner = next((m for m in reversed(context.messages) if m.role != "tool_result"), None)
        if owner is not None and any(u.call_id == results[0].call_id for u in owner.tool_uses()):
            anchor = owner.id + TOOL_RESULT_SUFFIX
            if all(name != anchor for name, _ in context.anchor_points):
                context.add_anchor(anchor, context.anchor_index(MESSAGES_ANCHOR), after_existing=False)
    index = context.anchor_index(anchor)
    context.append(message, anchor)
    message.record_token_count()
    return index


def stable_id(*parts: object) -> str:
    return str(uuid.uuid5(_NAMESPACE, "\x1f".join(str(p) for p in parts)))


def call_id(key: str, answer: Message) -> str:
    """The record id of the call that gave ``answer``, in the runtime's shape (a UTC time
    to the microsecond, then 8 hex digits), deterministic: the time of its first row (to
    the second, as SQLite keeps it) with the row id in the microseconds, so the calls of
    one second still sort in the order the SDK wrote them."""
    stamp = (answer.creation_timestamp or "")[:19].replace("-", "").replace(":", "")
    rows = meta_of(answer).get("rows") or [0]
    return f"{stamp}{rows[0] % 1_000_000:06d}-{stable_id(key, 'call', answer.id)[:8]}"
