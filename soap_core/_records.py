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

Every record starts with a ``format`` field naming its kind and version
(``soapwb.call/2``). A reader takes every version up to its own through one upgrade
function (:func:`upgraded`, one step a version) and refuses a newer one, naming the file
and both versions, rather than guess at fields it does not know.

Record ids become file names, so an id that is not a plain name is refused before it
becomes a path, and a record folder (or file) that is a link leading out of its session
folder is never read or written through (:mod:`soap_core._paths`).

An invocation record says ``running`` from its start to its end; a process killed in
between leaves it so. The session's lock tells: an invocation holds its session's lock
(``.soapwb.lock``, see :mod:`soap_core.runtime._locks`) from before its first record to
after its last, and a callee runs while its caller holds the caller's lock, so a
``running`` record in a folder whose lock is free belongs to a process that is gone. The
reader that finds one rewrites it as ``interrupted`` (:func:`settle_interrupted`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from soap_core._compaction_specs import spec_of_repr
from soap_core._errors import FormatError, SoapError
from soap_core._ids import checked_id
from soap_core._jsonio import read_json, write_json_atomic
from soap_core._paths import OutsideStoreError, confine, link_escapes, outside_problem, real, safe_name
from soap_core._redact import redact

CALL_VERSION = 2
"""2: ``compaction`` holds the strategy's spec (``rolling-tokens:1800:0.5``), not its repr."""
INVOCATION_VERSION = 1
CALL_FORMAT = f"soapwb.call/{CALL_VERSION}"
INVOCATION_FORMAT = f"soapwb.invocation/{INVOCATION_VERSION}"
CALLS_DIR = "calls"
INVOCATIONS_DIR = "invocations"
ATTRIBUTIONS_DIR = "attributions"
ATTRIBUTION_FORMAT = "soapwb.attribution/1"
"""An attribution of one answer to its context's parts (:mod:`analysis._attribution`),
kept beside the session like its calls, so a reload shows it."""
ISOLATIONS_DIR = "isolations"
ISOLATION_FORMAT = "soapwb.isolation/1"
"""What ``soapwb isolate`` found for one answer (:mod:`analysis._isolate`): the smallest
cause, the noise and every run, each run a replay fork."""
LOCK_FILE = ".soapwb.lock"
"""The file whose ``flock`` a running invocation holds in its session folder."""
INTERRUPTED = "interrupted"
"""The outcome of an invocation whose process ended before it did."""


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
        return {"format": self.format, **asdict(self)}

    @classmethod
    def from_dict(cls, data: Any, path: Path) -> CallRecord:
        """A call record read from ``path`` (of any version up to this one, upgraded);
        FormatError naming the field that is wrong."""
        values = _checked(upgraded(data, path, "call"), path, "$", _CALL_TYPES, _CALL_REQUIRED, _CALL_IDS)
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


# ── versions ─────────────────────────────────────────────────────────────────────────


def _call_1_to_2(data: dict[str, Any]) -> dict[str, Any]:
    """``compaction``: the repr of one of the runtime's strategies becomes its spec (a
    user's own hook keeps its repr, as version 2 records it too)."""
    recorded = data.get("compaction")
    spec = spec_of_repr(recorded) if isinstance(recorded, str) else None
    return {**data, "compaction": spec} if spec is not None else data


UPGRADES: dict[str, tuple[int, dict[int, Callable[[dict[str, Any]], dict[str, Any]]]]] = {
    "call": (CALL_VERSION, {1: _call_1_to_2}),
    "invocation": (INVOCATION_VERSION, {}),
}
"""Each record kind: its current version and the step from each older version to the next."""


def record_version(data: Any, path: Path, kind: str) -> int:
    """The version of a ``kind`` record (``soapwb.call/1`` → 1); FormatError naming the
    file when it is no such record or was written by a newer soapwb."""
    current, _ = UPGRADES[kind]
    prefix = f"soapwb.{kind}/"
    written = data.get("format") if isinstance(data, dict) else None
    number = written[len(prefix) :] if isinstance(written, str) and written.startswith(prefix) else ""
    if not (number.isascii() and number.isdigit() and int(number) >= 1):
        raise FormatError(path, "$.format", f"not a soapwb.{kind} record")
    if int(number) > current:
        raise FormatError(
            path,
            "$.format",
            f"{written} was written by a newer soap-workbench; this one reads up to "
            f"{prefix}{current}: upgrade soap-workbench to read it",
        )
    return int(number)


def upgraded(data: Any, path: Path, kind: str) -> dict[str, Any]:
    """A ``kind`` record of any version up to the current one, as the current version
    writes it (the dict itself when it is current; a new one otherwise). Upgrading an
    upgraded record changes nothing."""
    version = record_version(data, path, kind)
    current, steps = UPGRADES[kind]
    record: dict[str, Any] = data
    for step in range(version, current):
        record = steps[step](record)
    if version < current:
        record = {**record, "format": f"soapwb.{kind}/{current}"}
    return record


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
            checked_id(value, f"{where}.{key}", path)
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
            checked_id(item, f"$.{key}[{i}]", path)


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
    outcome: str = "running"  # running | ok | error | refused | interrupted
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
        return {"format": self.format, **asdict(self)}

    @classmethod
    def from_dict(cls, data: Any, path: Path) -> InvocationRecord:
        """An invocation record read from ``path`` (of any version up to this one,
        upgraded); FormatError naming the field that is wrong."""
        data = upgraded(data, path, "invocation")
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


def _record_folder(session_dir: Path, kind: str) -> Path:
    """``session_dir/kind``, refused if it is a link leading out of the session folder."""
    folder = session_dir / kind
    confine([real(session_dir)], folder, f"{kind}/ folder")
    return folder


def _record_path(session_dir: Path, kind: str, record_id: object) -> Path:
    folder = _record_folder(session_dir, kind)
    name = safe_name(record_id, f"{kind[:-1]} record id", folder)
    path = folder / f"{name}.json"
    if link_escapes([real(session_dir)], path):
        raise OutsideStoreError(path, outside_problem(path, "record file"))
    return path


def _record_files(session_dir: Path, kind: str) -> list[Path]:
    folder = _record_folder(session_dir, kind)
    if not folder.is_dir():
        return []
    root = [real(session_dir)]
    paths = sorted(folder.glob("*.json"))
    for path in paths:
        if link_escapes(root, path):
            raise OutsideStoreError(path, outside_problem(path, "record file"))
    return paths


def _without_keys(data: dict[str, Any]) -> dict[str, Any]:
    """A record's dict with any API key redacted from its error text (an error body may
    echo the request's ``Authorization`` header)."""
    if isinstance(data.get("error"), str):
        data["error"] = redact(data["error"])
    return data


def write_call(session_dir: Path, record: CallRecord) -> Path:
    path = _record_path(session_dir, CALLS_DIR, record.id)
    write_json_atomic(path, _without_keys(record.as_dict()))
    return path


def read_calls(session_dir: Path) -> list[CallRecord]:
    """Every call record of a session, oldest first (ids sort by time)."""
    return [CallRecord.from_dict(read_json(path), path) for path in _record_files(session_dir, CALLS_DIR)]


def write_attribution(session_dir: Path, record_id: str, data: dict[str, Any]) -> Path:
    """One attribution record (``attributions/<record_id>.json``), written once."""
    path = _record_path(session_dir, ATTRIBUTIONS_DIR, record_id)
    write_json_atomic(path, {"format": ATTRIBUTION_FORMAT, **data, "id": record_id})
    return path


def read_attributions(session_dir: Path, *, errors: list[SoapError] | None = None) -> list[dict[str, Any]]:
    """Every attribution record of a session, oldest first. A broken one (not JSON, or of
    another format) raises its FormatError, or, with ``errors``, is added there and left out."""
    return _read_kept(session_dir, ATTRIBUTIONS_DIR, ATTRIBUTION_FORMAT, "an attribution", errors)


def write_isolation(session_dir: Path, record_id: str, data: dict[str, Any]) -> Path:
    """One isolation record (``isolations/<record_id>.json``), written once."""
    path = _record_path(session_dir, ISOLATIONS_DIR, record_id)
    write_json_atomic(path, {"format": ISOLATION_FORMAT, **data, "id": record_id})
    return path


def read_isolations(session_dir: Path, *, errors: list[SoapError] | None = None) -> list[dict[str, Any]]:
    """Every isolation record of a session, oldest first; a broken one as for
    :func:`read_attributions`."""
    return _read_kept(session_dir, ISOLATIONS_DIR, ISOLATION_FORMAT, "an isolation", errors)


def _read_kept(
    session_dir: Path, kind: str, record_format: str, what: str, errors: list[SoapError] | None
) -> list[dict[str, Any]]:
    records = []
    for path in _record_files(session_dir, kind):
        try:
            data = read_json(path)
            if not isinstance(data, dict) or data.get("format") != record_format:
                found = data.get("format") if isinstance(data, dict) else type(data).__name__
                raise FormatError(path, "$.format", f"not {what} record ({record_format}): {found!r}")
        except SoapError as exc:
            if errors is None:
                raise
            errors.append(exc)
            continue
        records.append(data)
    return records


def write_invocation(session_dirs: list[Path], record: InvocationRecord) -> None:
    """The same record into every session it concerns."""
    for directory in dict.fromkeys(session_dirs):
        write_json_atomic(
            _record_path(directory, INVOCATIONS_DIR, record.id), _without_keys(record.as_dict())
        )


def read_invocations(session_dir: Path, *, errors: list[SoapError] | None = None) -> list[InvocationRecord]:
    """Every invocation record of a session, oldest first; a ``running`` one whose
    process is gone comes back (and is rewritten) as ``interrupted``. A broken record
    raises its FormatError, or, when ``errors`` is given, is added there and left out."""
    records = []
    for path in _record_files(session_dir, INVOCATIONS_DIR):
        try:
            record = InvocationRecord.from_dict(read_json(path), path)
        except SoapError as exc:
            if errors is None:
                raise
            errors.append(exc)
            continue
        records.append(settle_interrupted(path, record) if record.outcome == "running" else record)
    return records


def read_invocation(session_dir: Path, invocation_id: str) -> InvocationRecord | None:
    path = _record_path(session_dir, INVOCATIONS_DIR, invocation_id)
    if not path.is_file():
        return None
    record = InvocationRecord.from_dict(read_json(path), path)
    return settle_interrupted(path, record) if record.outcome == "running" else record


# -- interrupted invocations ---------------------------------------------------------------


def _probe_lock(session_dir: Path) -> tuple[bool, dict[str, Any] | None]:
    """(whether nobody holds the session's lock, the owner the lock file names).

    Takes the lock shared for an instant (an invocation takes it exclusive and retries
    briefly, so this never makes one fail). A session without a lock file was never run
    by our runtime here: nobody holds it."""
    try:
        fd = os.open(session_dir / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return True, None
    except OSError:
        return False, None  # cannot tell (a link, no permission): say nothing
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return False, None
        try:
            return True, read_lock_owner(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def read_lock_owner(fd: int) -> dict[str, Any] | None:
    """The owner a session's lock file (open as ``fd``) names, None if it names none."""
    raw = os.pread(fd, 4096, 0)
    try:
        owner = json.loads(raw) if raw else None
    except ValueError:
        return None
    return owner if isinstance(owner, dict) else None


def settle_interrupted(path: Path, record: InvocationRecord) -> InvocationRecord:
    """``record`` (read from ``path``, in a session's ``invocations/``, as ``running``) as
    it really stands: still running while that session's lock is held, else
    ``interrupted``, which is written back (best effort: a store that cannot be written
    still reads ``interrupted``)."""
    free, owner = _probe_lock(path.parent.parent)
    return (_interrupted(path, owner) or record) if free else record


def interrupt_running(session_dir: Path, owner: dict[str, Any] | None) -> list[str]:
    """Rewrite every ``running`` record of ``session_dir`` as ``interrupted``; the ids.

    Only for the holder of the session's lock (an invocation starting on a session whose
    previous owner died): nothing else can be running there."""
    settled = []
    for path in _record_files(session_dir, INVOCATIONS_DIR):
        try:
            if read_json(path).get("outcome") != "running":
                continue
        except (SoapError, AttributeError):
            continue
        record = _interrupted(path, owner)
        if record is not None and record.outcome == INTERRUPTED:
            settled.append(record.id)
    return settled


def _interrupted(path: Path, owner: dict[str, Any] | None) -> InvocationRecord | None:
    """The record at ``path`` marked interrupted and written back, read again first (it
    may have ended, and released the lock, since it was read); None if unreadable."""
    try:
        record = InvocationRecord.from_dict(read_json(path), path)
    except SoapError:
        return None
    if record.outcome != "running":
        return record
    record.outcome = INTERRUPTED
    who = f"pid {owner.get('pid')} on {owner.get('host')}" if owner and owner.get("pid") else "its process"
    record.error = (
        f"interrupted: {who} ended before the invocation did (no outcome was recorded); found at {utc_now()}"
    )
    with contextlib.suppress(OSError, SoapError):
        write_json_atomic(path, record.as_dict())
    return record
