"""A sOAP message: role, typed content parts, identity, sequence and token count.

The message knows nothing about files. :func:`Message.from_dict` and
:meth:`Message.to_dict` are its one codec: every key read from a file is written back in
its place (unknown keys too), and keys set later are appended after them, as Python's
dict does in peteos. So a message that was loaded and not changed gives back exactly the
dict it came from.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Literal, TypeAlias

from soap_core._codec import in_file_order, optional_typed
from soap_core._errors import FormatError
from soap_core._parts import (
    Part,
    TextPart,
    ThinkingPart,
    ToolPart,
    ToolResultPart,
    ToolUsePart,
    part_from_dict,
    part_to_dict,
    part_view,
)
from soap_core._tokens import DEFAULT_ENCODING, count_text, message_token_text

Role: TypeAlias = Literal["user", "assistant", "system", "tool", "tool_result"]
MessageType: TypeAlias = Literal["Message", "SystemPromptMessage", "ToolDefinitionsMessage"]
MESSAGE_TYPES: tuple[MessageType, ...] = ("Message", "SystemPromptMessage", "ToolDefinitionsMessage")

# The order in which peteos creates the keys of a new message of each class.
_NEW_KEY_ORDER: dict[str, tuple[str, ...]] = {
    "Message": (
        "role",
        "content",
        "_type",
        "id",
        "_hook_ids",
        "creation_timestamp",
        "metadata",
        "_sequence_number",
        "token_count",
    ),
    "SystemPromptMessage": (
        "_static_text",
        "role",
        "_type",
        "id",
        "_hook_ids",
        "creation_timestamp",
        "content",
        "_sequence_number",
        "token_count",
    ),
    "ToolDefinitionsMessage": (
        "role",
        "_type",
        "id",
        "_hook_ids",
        "creation_timestamp",
        "_sequence_number",
        "content",
        "token_count",
    ),
}


_KNOWN_KEY_SET = frozenset(key for order in _NEW_KEY_ORDER.values() for key in order)
"""The keys this code reads: those a message of some class has."""
_KEY_SHAPES: dict[tuple[str, ...], tuple[tuple[str, ...], frozenset[str], tuple[str, ...]]] = {}


def _key_shape(data: dict[str, Any]) -> tuple[tuple[str, ...], frozenset[str], tuple[str, ...]]:
    """A message dict's key order, key set and unknown keys, shared by every message of
    the same shape (a store has a handful of shapes and many thousand messages)."""
    order = tuple(data)
    shape = _KEY_SHAPES.get(order)
    if shape is None:
        shape = (order, frozenset(order), tuple(k for k in order if k not in _KNOWN_KEY_SET))
        if len(_KEY_SHAPES) < 4096:
            _KEY_SHAPES[order] = shape
    return shape


_new = object.__new__


def _checked_role(data: dict[str, Any], path: str, message_type: str) -> str:
    """The role of a message dict whose values are not all of their plain JSON types:
    each is checked as it is read (subclasses pass), and the first wrong one raises
    FormatError naming its JSON path."""
    role: str | None = optional_typed(data, "role", str, path)
    if role is None and message_type == "SystemPromptMessage":
        role = "system"  # old SystemPromptMessage dicts have no role key
    elif role is None:
        raise FormatError(None, path, "missing key 'role'")
    optional_typed(data, "content", list, path)
    if optional_typed(data, "id", str, path) is None:
        raise FormatError(None, path, "missing key 'id'")
    for key, kind in (
        ("_hook_ids", list),
        ("creation_timestamp", str),
        ("_sequence_number", int),
        ("token_count", int),
        ("metadata", dict),
        ("_static_text", str),
    ):
        optional_typed(data, key, kind, path)
    return role


def _parts_of(raw_content: list[Any], path: str) -> tuple[Part, ...]:
    """The typed parts of a content list; a bad one raises FormatError naming its JSON
    path (made only then: a path string for each part is a third of reading it)."""
    try:
        return tuple([part_from_dict(p) for p in raw_content])
    except FormatError:
        for i, p in enumerate(raw_content):
            part_from_dict(p, f"{path}.content[{i}]")
        raise


class Message:
    """One message of a context, in display order there.

    ``token_count`` is the count cached in the file, kept and written back as it was;
    :meth:`count_tokens` is the true count of the current content. Where the two
    differ the message is :attr:`token_count_is_stale`.
    """

    def __init__(
        self,
        role: str,
        content: Sequence[Part] | None,
        *,
        message_type: MessageType = "Message",
        id: str | None = None,
        hook_ids: Sequence[str] | None = None,
        creation_timestamp: str | None = None,
        sequence_number: int | None = None,
        token_count: int | None = None,
        metadata: dict[str, Any] | None = None,
        static_text: str | None = None,
    ) -> None:
        self.role = role
        self._content: tuple[Part, ...] | None = tuple(content) if content is not None else None
        self.message_type: MessageType = message_type
        self.id = id if id is not None else str(uuid.uuid4())
        self.hook_ids: list[str] | None = list(hook_ids) if hook_ids is not None else []
        self.creation_timestamp: str | None = (
            creation_timestamp if creation_timestamp is not None else datetime.now().isoformat()
        )
        self.sequence_number = sequence_number
        self.token_count = token_count
        self.metadata = metadata
        self.static_text = static_text
        self.extra: dict[str, Any] = {}
        self._key_order: tuple[str, ...] = _NEW_KEY_ORDER[message_type]
        self._file_keys: frozenset[str] = frozenset()
        self._token_cache: dict[str, int] = {}
        self._part_token_cache: dict[str, tuple[int, ...]] = {}

    # -- content and tokens -------------------------------------------------------------

    @property
    def content(self) -> tuple[Part, ...]:
        """The content parts; empty when the file has no content key."""
        return self._content or ()

    @content.setter
    def content(self, parts: Iterable[Part]) -> None:
        self._content = tuple(parts)
        self._token_cache.clear()
        self._part_token_cache.clear()

    @property
    def has_content_key(self) -> bool:
        return self._content is not None

    def raw_content(self) -> list[dict[str, Any]] | None:
        """The content as the list of dicts that is stored and tokenized."""
        if self._content is None:
            return None
        return [part_to_dict(p) for p in self._content]

    def count_tokens(self, encoding: str = DEFAULT_ENCODING) -> int:
        """True token count of the current content with peteos' formula, cached per encoding."""
        cached = self._token_cache.get(encoding)
        if cached is None:
            parts = None if self._content is None else [part_view(p) for p in self._content]
            cached = count_text(message_token_text(self.role, parts), encoding)
            self._token_cache[encoding] = cached
        return cached

    def set_known_token_count(self, count: int, encoding: str = DEFAULT_ENCODING) -> None:
        """Take the true count of the current content from one who counted it (the
        catalog, for a file it indexed at the same signature), so it is not encoded again."""
        self._token_cache.setdefault(encoding, count)

    def searchable_text(self) -> str:
        """Everything a person might search a message for: text, thinking, tool traffic."""
        pieces: list[str] = []
        for part in self.content:
            if isinstance(part, (TextPart, ThinkingPart)):
                pieces.append(part.text)
            elif isinstance(part, ToolUsePart):
                pieces.append(f"{part.name} {part.arguments}")
            elif isinstance(part, ToolResultPart):
                pieces.append(str(part.content))
        return "\n".join(pieces)

    def part_token_counts(self, encoding: str = DEFAULT_ENCODING) -> tuple[int, ...]:
        """Tokens of each part's JSON on its own (for a make-up of the count; they need
        not add up to :meth:`count_tokens` exactly), cached like it."""
        cached = self._part_token_cache.get(encoding)
        if cached is None:
            cached = tuple(
                count_text(json.dumps(part_to_dict(p), ensure_ascii=False), encoding) for p in self.content
            )
            self._part_token_cache[encoding] = cached
        return cached

    @property
    def token_count_is_stale(self) -> bool:
        """The file's cached count differs from the true cl100k_base count."""
        return self.token_count is not None and self.token_count != self.count_tokens()

    def record_token_count(self) -> int:
        """Store the true cl100k_base count as the cached count, as peteos does on use."""
        self.token_count = self.count_tokens()
        return self.token_count

    # -- views --------------------------------------------------------------------------

    @property
    def is_special(self) -> bool:
        """System prompt and tool definitions: kept by every fork and compaction."""
        return self.message_type != "Message"

    def text(self) -> str:
        """The text parts joined by blank lines (thinking and tool traffic left out)."""
        return "\n\n".join(p.text for p in self.content if isinstance(p, TextPart))

    def tool_uses(self) -> list[ToolUsePart]:
        return [p for p in self.content if isinstance(p, ToolUsePart)]

    def tool_results(self) -> list[ToolResultPart]:
        return [p for p in self.content if isinstance(p, ToolResultPart)]

    def tool_definitions(self) -> list[ToolPart]:
        return [p for p in self.content if isinstance(p, ToolPart)]

    def has_thinking(self) -> bool:
        return any(isinstance(p, ThinkingPart) for p in self.content)

    @property
    def created_at(self) -> datetime | None:
        try:
            return datetime.fromisoformat(self.creation_timestamp) if self.creation_timestamp else None
        except ValueError:
            return None

    # -- construction -------------------------------------------------------------------

    @classmethod
    def create(
        cls, role: Role, content: Sequence[Part], *, metadata: dict[str, Any] | None = None
    ) -> Message:
        """A new plain message with a fresh id and the local creation time, as peteos."""
        return cls(role, content, metadata=metadata)

    @classmethod
    def system_prompt(cls, static_text: str, hook_outputs: Sequence[str] = ()) -> Message:
        """A SystemPromptMessage whose text is the static prompt plus hook outputs."""
        text = "\n\n".join([static_text, *hook_outputs])
        return cls("system", [TextPart(text)], message_type="SystemPromptMessage", static_text=static_text)

    @classmethod
    def tool_definitions_message(cls, tools: Sequence[ToolPart]) -> Message:
        return cls("tool", list(tools), message_type="ToolDefinitionsMessage")

    def copy(self) -> Message:
        """A copy that shares nothing mutable with this message (parts are immutable)."""
        clone = Message.from_dict(self.to_dict())
        clone._token_cache = dict(self._token_cache)
        clone._part_token_cache = dict(self._part_token_cache)
        return clone

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Message) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"Message(role={self.role!r}, id={self.id!r}, seq={self.sequence_number}, parts={len(self.content)})"

    # -- codec --------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Any, path: str = "$") -> Message:
        """Read one message dict; raise FormatError naming the JSON path of a bad value."""
        if not isinstance(data, dict):
            raise FormatError(None, path, f"a message must be an object, got {type(data).__name__}")
        get = data.get
        message_type = get("_type", "Message")
        if message_type not in MESSAGE_TYPES:
            raise FormatError(None, f"{path}._type", f"unknown message _type {message_type!r}")
        role, raw_content, message_id, hook_ids = get("role"), get("content"), get("id"), get("_hook_ids")
        created, sequence, tokens = get("creation_timestamp"), get("_sequence_number"), get("token_count")
        metadata, static_text = get("metadata"), get("_static_text")
        if not (  # every value of exactly its JSON type (what a file holds): nothing to explain
            role.__class__ is str
            and message_id.__class__ is str
            and (raw_content is None or raw_content.__class__ is list)
            and (hook_ids is None or hook_ids.__class__ is list)
            and (created is None or created.__class__ is str)
            and (sequence is None or sequence.__class__ is int)
            and (tokens is None or tokens.__class__ is int)
            and (metadata is None or metadata.__class__ is dict)
            and (static_text is None or static_text.__class__ is str)
        ):
            role = _checked_role(data, path, message_type)
        key_order, file_keys, unknown = _key_shape(data)
        message = _new(cls)  # the attributes of __init__, as read: no default to make and replace
        vars(message).update(
            role=role,
            _content=None if raw_content is None else _parts_of(raw_content, path),
            message_type=message_type,
            id=message_id,
            hook_ids=hook_ids,
            creation_timestamp=created,
            sequence_number=sequence,
            token_count=tokens,
            metadata=metadata,
            static_text=static_text,
            extra={k: data[k] for k in unknown} if unknown else {},
            _key_order=key_order,
            _file_keys=file_keys,
            _token_cache={},
            _part_token_cache={},
        )
        return message

    def _known_values(self) -> dict[str, Any]:
        return {
            "_static_text": self.static_text,
            "role": self.role,
            "content": self.raw_content(),
            "_type": self.message_type,
            "id": self.id,
            "_hook_ids": None if self.hook_ids is None else list(self.hook_ids),
            "creation_timestamp": self.creation_timestamp,
            "metadata": self.metadata,
            "_sequence_number": self.sequence_number,
            "token_count": self.token_count,
        }

    def to_dict(self) -> dict[str, Any]:
        """The message dict: file keys in file order (None written as null), new keys after."""
        values = self._known_values()
        if "role" not in self._file_keys and self._file_keys and self.message_type == "SystemPromptMessage":
            values["role"] = None  # old SystemPromptMessage dicts have no role key: keep it so
        return in_file_order(
            values,
            self.extra,
            self._key_order,
            _NEW_KEY_ORDER[self.message_type],
            self._file_keys,
            lambda _key, value: value is not None,
        )
