"""A sOAP session: one conversation thread of one agentic object, and its contexts."""

from __future__ import annotations

import uuid
from datetime import date
from pathlib import Path
from typing import Any

from soap_core._codec import in_file_order
from soap_core._context import Context
from soap_core._errors import ContextNotFoundError, FormatError, SoapError
from soap_core._ids import checked_id
from soap_core._layout import Layout
from soap_core._records import CallRecord, read_calls
from soap_core._saves import SavedBase
from soap_core._tokens import DEFAULT_ENCODING

SESSION_FILE = "session.json"
THREAD_ID_KEY = "_persistent_thread_id"
OBJECT_KEY = "_soapwb_object"
"""``state_data`` key our runtime writes into each session it creates: the object's id."""
RERUN_SESSION_KEY = "_soapwb_rerun"
"""``state_data`` key of a session a re-run made: thread lookups skip it."""
SOURCE_KEY = "_soapwb_source"
"""``state_data`` key an importer writes into each session it creates: the framework."""
_KEY_ORDER = ("uuid", "active_context_id", "auto_approve_tools", "state_data", "is_active")


def new_session_uuid(today: date | None = None) -> str:
    """A session uuid in the newer peteos form, ``YYYYMMDD-<uuid4>`` (local date)."""
    return f"{(today or date.today()).strftime('%Y%m%d')}-{uuid.uuid4()}"


class Session:
    """A session of the agentic object (role) ``role``: ``session.json`` plus its contexts.

    ``contexts`` holds every context read or created, by id. ``load_errors`` names the
    context files of this session that could not be read (by file name), so that one
    broken fork does not hide the rest of the session.
    """

    def __init__(self, role: str, uuid: str | None = None) -> None:
        self.role = role
        self.uuid = uuid if uuid is not None else new_session_uuid()
        self.active_context_id: str | None = None
        self.auto_approve_tools: list[str] = []
        self.state_data: dict[str, Any] = {}
        self.is_active = False
        self.contexts: dict[str, Context] = {}
        self.context_files: dict[str, str] = {}
        self.load_errors: dict[str, SoapError] = {}
        self.directory: Path | None = None
        """The folder this session was read from; saving writes back there."""
        self.layout: Layout = "agents"
        """The store generation the session was read from (``sessions``: peteos 0.6)."""
        self.extra: dict[str, Any] = {}
        self._key_order: tuple[str, ...] = _KEY_ORDER
        self._file_keys: frozenset[str] = frozenset()
        self.base: SavedBase | None = None
        """What this session was read as or last saved as (the store compares the disk
        with it before each save); None for a session made in memory."""

    @classmethod
    def create(cls, role: str, context: Context, *, thread_id: str | None = None) -> Session:
        session = cls(role)
        session.add_context(context)
        session.active_context_id = context.id
        if thread_id is not None:
            session.state_data[THREAD_ID_KEY] = thread_id
        return session

    @property
    def thread_id(self) -> str | None:
        value = self.state_data.get(THREAD_ID_KEY)
        return value if isinstance(value, str) else None

    @property
    def session_file(self) -> Path:
        """Where this session's ``session.json`` is (its uuid alone for a session that
        was never read or saved): what errors about the session name."""
        return self.directory / SESSION_FILE if self.directory is not None else Path(self.uuid or "?")

    @property
    def active_context(self) -> Context:
        """The active context; ContextNotFoundError (naming session.json) if it has no
        readable file."""
        if self.active_context_id is None:
            raise ContextNotFoundError(self.session_file, "session has no active context")
        context = self.contexts.get(self.active_context_id)
        if context is None:
            name = next((f for f, err in self.load_errors.items() if self.active_context_id in f), None)
            detail = f": {self.load_errors[name]}" if name else ": no file for it"
            raise ContextNotFoundError(
                self.session_file, f"active context {self.active_context_id} is missing{detail}"
            )
        return context

    def add_context(self, context: Context) -> Context:
        self.contexts[context.id] = context
        return context

    def set_active_context(self, context: Context) -> None:
        """Make ``context`` active, keeping the old one (it is saved with the session)."""
        self.add_context(context)
        self.active_context_id = context.id

    @property
    def written_by_peteos(self) -> bool:
        """A session peteos wrote (not our runtime, not an import): its forks follow
        peteos's rules."""
        return OBJECT_KEY not in self.state_data and SOURCE_KEY not in self.state_data

    def rolling_token_window(self, max_tokens: int, encoding: str = DEFAULT_ENCODING) -> Context | None:
        """A rolling token window of the active context, as the session's writer makes it:
        peteos's (cached counts; tool results without their call dropped as in 0.6) for a
        session peteos wrote, ours (true counts, the newest message kept) otherwise. The
        fork is added to the session, not made active. ``Context.rolling_token_window``
        and ``Context.peteos_token_window`` give either one explicitly."""
        context = self.active_context
        if self.written_by_peteos:
            child = context.peteos_token_window(
                max_tokens, encoding, strip_dangling_results=self.layout == "sessions"
            )
        else:
            child = context.rolling_token_window(max_tokens, encoding)
        return self.add_context(child) if child is not None else None

    def context(self, context_id: str) -> Context:
        """A context of this session by id or unique id prefix."""
        if context_id in self.contexts:
            return self.contexts[context_id]
        matches = [c for cid, c in self.contexts.items() if cid.startswith(context_id)]
        if len(matches) == 1:
            return matches[0]
        problem = "matches several contexts" if matches else "no such context in this session"
        raise ContextNotFoundError(self.directory or self.uuid, f"context {context_id!r}: {problem}")

    def calls(self) -> list[CallRecord]:
        """The session's call log (the ``calls/*.json`` records beside it), oldest first;
        empty for a session with no folder.

        Read from the files at each call, never kept (a re-run reads it before and after
        its calls): a caller that asks about many messages or runs reads it once and
        hands the list on, as the ``calls=`` parameters of replay and analysis take it."""
        return read_calls(self.directory) if self.directory is not None else []

    # -- codec --------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, role: str, data: Any) -> Session:
        if not isinstance(data, dict):
            raise FormatError(None, "$", f"session.json must hold an object, got {type(data).__name__}")
        checks: dict[str, type | tuple[type, ...]] = {
            "uuid": str,
            "active_context_id": (str, type(None)),
            "auto_approve_tools": list,
            "state_data": dict,
            "is_active": bool,
        }
        for key, kind in checks.items():
            if key in data and not isinstance(data[key], kind):
                raise FormatError(None, f"$.{key}", f"wrong type {type(data[key]).__name__}")
        if "uuid" not in data:
            raise FormatError(None, "$", "missing key 'uuid'")
        session = cls(role, checked_id(data["uuid"], "$.uuid"))
        session.active_context_id = checked_id(data.get("active_context_id"), "$.active_context_id")
        session.auto_approve_tools = data.get("auto_approve_tools", [])
        session.state_data = data.get("state_data", {})
        session.is_active = data.get("is_active", False)
        session.extra = {k: v for k, v in data.items() if k not in _KEY_ORDER}
        session._key_order = tuple(data)
        session._file_keys = frozenset(data)
        return session

    def adopt_header(self, other: Session) -> None:
        """Take ``session.json``'s fields from ``other`` (a merged save wrote them)."""
        self.uuid, self.active_context_id = other.uuid, other.active_context_id
        self.auto_approve_tools, self.state_data = other.auto_approve_tools, other.state_data
        self.is_active, self.extra = other.is_active, other.extra
        self._key_order, self._file_keys = other._key_order, other._file_keys

    def to_dict(self) -> dict[str, Any]:
        values: dict[str, Any] = {
            "uuid": self.uuid,
            "active_context_id": self.active_context_id,
            "auto_approve_tools": list(self.auto_approve_tools),
            "state_data": dict(self.state_data),
            "is_active": self.is_active,
        }
        # Older files lack state_data and is_active: they stay absent while unused.
        old_file = bool(self._file_keys)

        def write_new(key: str, value: Any) -> bool:
            return not (old_file and key in ("state_data", "is_active") and not value)

        return in_file_order(values, self.extra, self._key_order, _KEY_ORDER, self._file_keys, write_new)

    def __repr__(self) -> str:
        return f"Session(role={self.role!r}, uuid={self.uuid!r}, contexts={len(self.contexts)})"
