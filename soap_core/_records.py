"""What we record beside a session: LLM calls and cross-object invocations.

Typed records every layer reads (the runtime writes them, replay, the budgets and the
pages read them); they live beside the store because they are part of its format.

peteos records neither. We keep them in sub-folders of the session directory, which
peteos never reads and our context reader does not glob, so both still read the
session as before:

* ``calls/<call_id>.json``: one LLM call, written once: the exact request (and its
  hash), the raw response, usage, latency, the endpoint's base URL (never the API key)
  and where in which context the call was made.
* ``invocations/<invocation_id>.json``: one invocation of an agentic object, written
  into the callee's session and, when another object's session made the call, into the
  caller's too, so the chain can be walked from the files in both directions. It holds
  the object's public state after the invocation.

Every record starts with a ``format`` field naming its kind and version.
"""

from __future__ import annotations

import uuid
from dataclasses import MISSING, asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from soap_core._errors import FormatError, SoapError
from soap_core._ids import checked_id
from soap_core._jsonio import read_json, write_json_atomic

CALL_FORMAT = "soapwb.call/1"
INVOCATION_FORMAT = "soapwb.invocation/1"
CALLS_DIR = "calls"
INVOCATIONS_DIR = "invocations"


def utc_now() -> str:
    return datetime.now(UTC).isoformat()


def new_record_id() -> str:
    """Ids that sort by creation time: a UTC timestamp, then random bits."""
    return f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%f')}-{uuid.uuid4().hex[:8]}"


@dataclass
class CallRecord:
    """One LLM call as it was sent and answered."""

    id: str
    session: str
    role: str
    context_id: str
    message_index: int
    request: dict[str, Any]
    request_hash: str
    base_url: str = ""
    started_at: str = ""
    invocation_id: str | None = None
    message_id: str | None = None
    ended_at: str | None = None
    latency_s: float | None = None
    response: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    error: str | None = None
    system_prompt_hooks: list[str] | None = None
    """Content-map keys of the hook outputs the system prompt was built from."""
    tool_list_hook: str | None = None
    """Content-map key of the JSON tool listing the call was offered."""
    context_limit: int | None = None
    """The model's context window as the agentic class declared it."""
    compaction: str | None = None
    """The compaction strategy in force (its repr, e.g. its threshold)."""
    replay: dict[str, Any] | None = None
    """For a replay: the message it re-ran (context, index, id), overrides, sample."""
    format: str = CALL_FORMAT

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {"format": data.pop("format"), **data}

    @classmethod
    def from_dict(cls, data: Any, path: Path) -> CallRecord:
        """A call record read from ``path``; FormatError naming the field that is wrong."""
        if not isinstance(data, dict) or data.get("format") != CALL_FORMAT:
            raise FormatError(path, "$.format", f"not a {CALL_FORMAT} record")
        values = _checked(data, path, "$", _CALL_TYPES, _CALL_REQUIRED, _CALL_IDS)
        _check_items(values, path, "system_prompt_hooks", str)
        return cls(**_without_nulls(cls, values))


_CALL_REQUIRED = ("id", "session", "role", "context_id", "message_index", "request", "request_hash")
_CALL_TYPES: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "session": str,
    "role": str,
    "context_id": str,
    "message_index": int,
    "request": dict,
    "request_hash": str,
    "base_url": str,
    "started_at": str,
    "message_id": str,
    "invocation_id": str,
    "ended_at": str,
    "latency_s": (int, float),
    "response": dict,
    "usage": dict,
    "error": str,
    "system_prompt_hooks": list,
    "tool_list_hook": str,
    "context_limit": int,
    "compaction": str,
    "replay": dict,
}
_CALL_IDS = ("id", "session", "context_id", "invocation_id")
"""Fields naming a file (a record, a session folder, a context file): checked as ids."""


def _checked(
    data: dict[str, Any],
    path: Path,
    where: str,
    types: dict[str, type | tuple[type, ...]],
    required: tuple[str, ...],
    ids: tuple[str, ...],
) -> dict[str, Any]:
    """The known fields of a record dict, each of its type (None allowed where it is not
    required); FormatError naming the first one that is missing or wrong."""
    values = {k: v for k, v in data.items() if k in types}
    for key, kind in types.items():
        if key not in values:
            if key in required:
                raise FormatError(path, f"{where}.{key}", "missing")
            continue
        value = values[key]
        if value is None and key not in required:
            continue
        if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _kinds(kind)):
            names = " or ".join(k.__name__ for k in _kinds(kind))
            raise FormatError(path, f"{where}.{key}", f"expected {names}, got {type(value).__name__}")
        if key in ids:
            try:
                checked_id(value, f"{where}.{key}")
            except FormatError as exc:
                raise exc.at(path) from None
    return values


def _without_nulls(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` less the nulls of fields whose default is not None (``"calls": null``
    is read as no calls, ``"outcome": null`` as the default outcome)."""
    not_none = {
        f.name for f in fields(cls) if f.default_factory is not MISSING or f.default not in (MISSING, None)
    }
    return {k: v for k, v in values.items() if v is not None or k not in not_none}


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _check_items(values: dict[str, Any], path: Path, key: str, kind: type, *, ids: bool = False) -> None:
    for i, item in enumerate(values.get(key) or []):
        if not isinstance(item, kind):
            raise FormatError(path, f"$.{key}[{i}]", f"expected {kind.__name__}, got {type(item).__name__}")
        if ids:
            try:
                checked_id(item, f"$.{key}[{i}]")
            except FormatError as exc:
                raise exc.at(path) from None


@dataclass
class Party:
    """One side of an invocation: which object, in which session, at which message."""

    role: str
    object_id: str
    session: str | None
    context_id: str | None = None
    message_index: int | None = None
    message_id: str | None = None


@dataclass
class InvocationRecord:
    """One invocation of an agentic object, from whoever called it."""

    id: str
    callee: Party
    caller: Party | None
    prompt: str
    thread: str | None
    started_at: str
    parent_invocation_id: str | None = None
    ended_at: str | None = None
    outcome: str = "running"  # running | ok | error | refused
    result: Any = None
    error: str | None = None
    state_after: dict[str, Any] | None = None
    calls: list[str] = field(default_factory=list)
    stale_owner: dict[str, Any] | None = None
    callee_class: str | None = None
    """``module:qualname`` of the callee's class, to rebuild the object for a re-run
    (a class defined inside a function has ``<locals>`` in it and cannot be imported)."""
    state_before: dict[str, Any] | None = None
    """The callee's public state when the invocation started (``state_after``: when it ended)."""
    rerun: dict[str, Any] | None = None
    """For a re-run: the message it re-ran from (context, index, id), edits, tool modes."""
    format: str = INVOCATION_FORMAT

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {"format": data.pop("format"), **data}

    @classmethod
    def from_dict(cls, data: Any, path: Path) -> InvocationRecord:
        """An invocation record read from ``path``; FormatError naming the field that is wrong."""
        if not isinstance(data, dict) or data.get("format") != INVOCATION_FORMAT:
            raise FormatError(path, "$.format", f"not a {INVOCATION_FORMAT} record")
        values = _checked(data, path, "$", _INVOCATION_TYPES, _INVOCATION_REQUIRED, _INVOCATION_IDS)
        _check_items(values, path, "calls", str, ids=True)
        values["callee"] = _party(values["callee"], path, "$.callee")
        if values.get("caller") is not None:
            values["caller"] = _party(values["caller"], path, "$.caller")
        if "result" in data:
            values["result"] = data["result"]
        values.setdefault("thread", None)
        values.setdefault("caller", None)  # plain Python called it
        return cls(**_without_nulls(cls, values))


_INVOCATION_REQUIRED = ("id", "callee", "prompt", "started_at")
_INVOCATION_TYPES: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "callee": dict,
    "caller": dict,
    "prompt": str,
    "thread": str,
    "started_at": str,
    "parent_invocation_id": str,
    "ended_at": str,
    "outcome": str,
    "error": str,
    "state_after": dict,
    "calls": list,
    "stale_owner": dict,
    "callee_class": str,
    "state_before": dict,
    "rerun": dict,
}
_INVOCATION_IDS = ("id", "parent_invocation_id")
_PARTY_TYPES: dict[str, type | tuple[type, ...]] = {
    "role": str,
    "object_id": str,
    "session": str,
    "context_id": str,
    "message_index": int,
    "message_id": str,
}


def _party(data: dict[str, Any], path: Path, where: str) -> Party:
    values = _checked(data, path, where, _PARTY_TYPES, ("role", "object_id"), ("session", "context_id"))
    values.setdefault("session", None)
    return Party(**values)


def write_call(session_dir: Path, record: CallRecord) -> Path:
    path = session_dir / CALLS_DIR / f"{record.id}.json"
    write_json_atomic(path, record.as_dict())
    return path


def read_calls(session_dir: Path) -> list[CallRecord]:
    """Every call record of a session, oldest first (ids sort by time)."""
    folder = session_dir / CALLS_DIR
    if not folder.is_dir():
        return []
    return [CallRecord.from_dict(read_json(path), path) for path in sorted(folder.glob("*.json"))]


def write_invocation(session_dirs: list[Path], record: InvocationRecord) -> None:
    """The same record into every session it concerns."""
    for directory in dict.fromkeys(session_dirs):
        write_json_atomic(directory / INVOCATIONS_DIR / f"{record.id}.json", record.as_dict())


def read_invocations(session_dir: Path, *, errors: list[SoapError] | None = None) -> list[InvocationRecord]:
    """Every invocation record of a session, oldest first. A broken record raises its
    FormatError, or, when ``errors`` is given, is added there and left out."""
    folder = session_dir / INVOCATIONS_DIR
    if not folder.is_dir():
        return []
    records = []
    for path in sorted(folder.glob("*.json")):
        try:
            records.append(InvocationRecord.from_dict(read_json(path), path))
        except SoapError as exc:
            if errors is None:
                raise
            errors.append(exc)
    return records


def read_invocation(session_dir: Path, invocation_id: str) -> InvocationRecord | None:
    path = session_dir / INVOCATIONS_DIR / f"{invocation_id}.json"
    if not path.is_file():
        return None
    return InvocationRecord.from_dict(read_json(path), path)
