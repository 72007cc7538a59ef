"""Typed content parts of a sOAP message, and their one codec.

A part is an immutable value. Parts read from a file remember the exact dict they came
from, so writing an unchanged part gives back that dict to the letter: its key order,
keys this code does not know, and quirks of older writers (tool parts without ``type``,
tool results with ``name``). A part built or changed through this API is written in the
layout the peteos writer uses. Part types this code does not know become
:class:`UnknownPart` and are written back unchanged.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, TypeVar

from soap_core._errors import FormatError

MediaKind: TypeAlias = Literal["image", "video", "audio", "pdf"]
MEDIA_KINDS: tuple[MediaKind, ...] = ("image", "video", "audio", "pdf")


@dataclass(frozen=True)
class _PartBase:
    extra: Mapping[str, Any] = field(default_factory=dict, kw_only=True)
    """Keys of the part dict that this code does not know, kept in their order."""
    _raw: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)


@dataclass(frozen=True)
class TextPart(_PartBase):
    """Plain text the model read or wrote."""

    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True)
class ThinkingPart(_PartBase):
    """Reasoning the model produced; providers handle it apart from text."""

    text: str
    type: Literal["thinking"] = "thinking"


@dataclass(frozen=True)
class MediaPart(_PartBase):
    """An image, video, audio clip or document, inline (base64) or by url.

    peteos stores every document type (docx, csv, html, ...) as ``pdf`` with its real
    media type, so ``type`` says how the part is sent, and ``media_type`` what it is.
    """

    type: MediaKind
    source: Mapping[str, Any]

    @property
    def media_type(self) -> str | None:
        value = self.source.get("media_type")
        return value if isinstance(value, str) else None

    @property
    def url(self) -> str | None:
        value = self.source.get("url")
        return value if self.source.get("type") == "url" and isinstance(value, str) else None

    def data(self) -> bytes | None:
        """The decoded bytes of an inline part, None for a url part."""
        value = self.source.get("data")
        if self.source.get("type") != "base64" or not isinstance(value, str):
            return None
        return base64.b64decode(value)


@dataclass(frozen=True)
class ToolUsePart(_PartBase):
    """A tool call made by the model; ``arguments`` is a JSON string, as on disk."""

    call_id: str
    name: str
    arguments: str
    type: Literal["tool_use"] = "tool_use"

    def parsed_arguments(self) -> Any:
        """The arguments as JSON values, or the raw string if it is not valid JSON."""
        try:
            return json.loads(self.arguments, strict=False)
        except ValueError:
            return self.arguments


@dataclass(frozen=True)
class ToolResultPart(_PartBase):
    """The result of one tool call, tied to it by ``call_id``."""

    call_id: str
    content: Any
    name: str | None = None
    type: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True)
class ToolPart(_PartBase):
    """One tool definition inside the tool-definitions message."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    type: Literal["tool"] = "tool"


@dataclass(frozen=True)
class UnknownPart(_PartBase):
    """A part whose type this code does not know; it is kept and written back as is."""

    data: Mapping[str, Any]

    @property
    def type(self) -> str:
        value = self.data.get("type")
        return value if isinstance(value, str) else "?"


Part: TypeAlias = TextPart | ThinkingPart | MediaPart | ToolUsePart | ToolResultPart | ToolPart | UnknownPart

_KNOWN_KEYS: dict[str, tuple[str, ...]] = {
    "text": ("type", "text"),
    "thinking": ("type", "text"),
    "tool_use": ("type", "call_id", "name", "arguments"),
    "tool_result": ("type", "call_id", "content", "name"),
    "tool": ("type", "name", "description", "parameters"),
    **{kind: ("type", "source") for kind in MEDIA_KINDS},
}


def _require(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], path: str) -> Any:
    if key not in data:
        raise FormatError(None, path, f"missing key {key!r}")
    value = data[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise FormatError(None, f"{path}.{key}", f"expected {names}, got {type(value).__name__}")
    return value


_KNOWN_KEY_SETS = {kind: frozenset(keys) for kind, keys in _KNOWN_KEYS.items()}


_new = object.__new__
_P = TypeVar("_P", bound=_PartBase)


def _read(cls: type[_P], raw: dict[str, Any], extra: dict[str, Any], **values: Any) -> _P:
    """A part of ``cls`` with these field values, remembering the dict it was read from:
    the frozen dataclass's fields set at once (its ``__init__`` sets each through
    ``object.__setattr__``, and the dict would be a fifth call)."""
    part: _P = _new(cls)
    vars(part).update(values, extra=extra, _raw=raw)
    return part


def part_from_dict(data: Any, path: str = "$") -> Part:
    """Turn one content-part dict into a typed part, raising FormatError on wrong types."""
    if not isinstance(data, dict):
        raise FormatError(None, path, f"a content part must be an object, got {type(data).__name__}")
    kind = data.get("type")
    if kind is None and "name" in data and "parameters" in data:
        kind = "tool"  # older ToolDefinitionsMessage versions wrote tool parts without type
    known = _KNOWN_KEY_SETS.get(kind) if isinstance(kind, str) else None
    extra = {k: v for k, v in data.items() if k not in known} if known and not known.issuperset(data) else {}
    if kind in ("text", "thinking"):
        text = _require(data, "text", str, path)
        if kind == "text":
            return _read(TextPart, data, extra, text=text, type=kind)
        return _read(ThinkingPart, data, extra, text=text, type=kind)
    if kind in MEDIA_KINDS:
        return _read(MediaPart, data, extra, type=kind, source=_require(data, "source", dict, path))
    if kind == "tool_use":
        return _read(
            ToolUsePart,
            data,
            extra,
            call_id=_require(data, "call_id", str, path),
            name=_require(data, "name", str, path),
            arguments=_require(data, "arguments", str, path),
            type=kind,
        )
    if kind == "tool_result":
        name = data.get("name")
        if name is not None and not isinstance(name, str):
            raise FormatError(None, f"{path}.name", f"expected str, got {type(name).__name__}")
        if "content" not in data:
            raise FormatError(None, path, "missing key 'content'")
        call_id = _require(data, "call_id", str, path)
        return _read(
            ToolResultPart, data, extra, call_id=call_id, content=data["content"], name=name, type=kind
        )
    if kind == "tool":
        description = data.get("description", "")
        if not isinstance(description, str):
            raise FormatError(None, f"{path}.description", "expected str")
        return _read(
            ToolPart,
            data,
            extra,
            name=_require(data, "name", str, path),
            description=description,
            parameters=_require(data, "parameters", dict, path),
            type=kind,
        )
    return _read(UnknownPart, data, {}, data=data)


def part_view(part: Part) -> Mapping[str, Any]:
    """The dict :func:`part_to_dict` gives, without a copy where the part was read from
    one (for reading only: encoding, counting)."""
    return part._raw if part._raw is not None else part_to_dict(part)


def part_to_dict(part: Part) -> dict[str, Any]:
    """The dict for one part: the original one if unchanged, else peteos' layout."""
    if part._raw is not None:
        return dict(part._raw)
    out: dict[str, Any]
    if isinstance(part, UnknownPart):
        return dict(part.data)
    if isinstance(part, (TextPart, ThinkingPart)):
        out = {"type": part.type, "text": part.text}
    elif isinstance(part, MediaPart):
        out = {"type": part.type, "source": dict(part.source)}
    elif isinstance(part, ToolUsePart):
        out = {"type": part.type, "call_id": part.call_id, "name": part.name, "arguments": part.arguments}
    elif isinstance(part, ToolResultPart):
        out = {"type": part.type, "call_id": part.call_id, "content": part.content}
        if part.name is not None:
            out["name"] = part.name
    else:
        out = {
            "type": part.type,
            "name": part.name,
            "description": part.description,
            "parameters": dict(part.parameters),
        }
    out.update(part.extra)
    return out


def base64_source(media_type: str | None, data: bytes) -> dict[str, Any]:
    """A media source dict in the key order peteos' media.py writes."""
    return {"type": "base64", "media_type": media_type, "data": base64.b64encode(data).decode("ascii")}
