"""soap_core: the sOAP model (sessions, contexts, messages, parts) and its store.

Public names are re-exported here; the ``_modules`` behind them are private.
"""

from soap_core._chat import canonical_json, chat_message, chat_request, request_hash, tool_schema
from soap_core._context import (
    DEFAULT_ANCHORS,
    MESSAGES_ANCHOR,
    SYSTEM_PROMPT_ANCHOR,
    TOOL_RESULT_SUFFIX,
    TOOLS_ANCHOR,
    Context,
    content_hash,
)
from soap_core._errors import (
    AmbiguousSessionError,
    ContextNotFoundError,
    FormatError,
    SessionNotFoundError,
    SoapError,
    StoreError,
)
from soap_core._jsonio import dump_json, read_json, write_json_atomic, write_text_atomic
from soap_core._message import Message, MessageType, Role
from soap_core._overview import (
    MessageRow,
    SearchHit,
    SessionOverview,
    message_rows,
    preview,
    search_store,
    searchable_text,
    session_overview,
)
from soap_core._parts import (
    MediaPart,
    Part,
    TextPart,
    ThinkingPart,
    ToolPart,
    ToolResultPart,
    ToolUsePart,
    UnknownPart,
    base64_source,
    part_from_dict,
    part_to_dict,
)
from soap_core._session import THREAD_ID_KEY, Session, new_session_uuid
from soap_core._store import SESSION_FILE, SessionSummary, Store
from soap_core._tokens import DEFAULT_ENCODING, count_text, get_encoding
from soap_core._tree import REPLAY_KEY, ContextNode, describe_node, fork_tree

__all__ = [
    "DEFAULT_ANCHORS",
    "DEFAULT_ENCODING",
    "MESSAGES_ANCHOR",
    "REPLAY_KEY",
    "SESSION_FILE",
    "SYSTEM_PROMPT_ANCHOR",
    "THREAD_ID_KEY",
    "TOOLS_ANCHOR",
    "TOOL_RESULT_SUFFIX",
    "AmbiguousSessionError",
    "Context",
    "ContextNode",
    "ContextNotFoundError",
    "FormatError",
    "MediaPart",
    "Message",
    "MessageRow",
    "MessageType",
    "Part",
    "Role",
    "SearchHit",
    "Session",
    "SessionNotFoundError",
    "SessionOverview",
    "SessionSummary",
    "SoapError",
    "Store",
    "StoreError",
    "TextPart",
    "ThinkingPart",
    "ToolPart",
    "ToolResultPart",
    "ToolUsePart",
    "UnknownPart",
    "base64_source",
    "canonical_json",
    "chat_message",
    "chat_request",
    "content_hash",
    "count_text",
    "describe_node",
    "dump_json",
    "fork_tree",
    "get_encoding",
    "message_rows",
    "new_session_uuid",
    "part_from_dict",
    "part_to_dict",
    "preview",
    "read_json",
    "request_hash",
    "search_store",
    "searchable_text",
    "session_overview",
    "tool_schema",
    "write_json_atomic",
    "write_text_atomic",
]
