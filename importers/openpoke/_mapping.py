"""How OpenPoke's entries become sOAP messages, and the keys that mark what was imported.

The interaction agent is one session (role ``OpenPokeInteraction``) whose root context
holds every conversation-log entry in order, one message per entry and nothing else, so
a message's display index there is its entry index:

=================  ===========  ========================================================
tag                role         why
=================  ===========  ========================================================
``user_message``   user         the user's text
``poke_reply``     assistant    a reply the user saw (a chat message or a draft)
``agent_message``  user         input from an execution agent or the email watcher;
                                hidden: OpenPoke's ``/chat/history`` leaves it out
``wait``           assistant    the agent's decision to stay silent; hidden likewise
``replies``        assistant    the legacy reply tag OpenPoke's parser still accepts;
                                hidden (``/chat/history`` shows only the first two tags)
any other tag      user         kept as hidden input, and reported
=================  ===========  ========================================================

Every imported message carries ``metadata["openpoke"] = {"tag", "index", "timestamp",
"hidden"}`` (the timestamp exactly as in the log), plus ``"fold": 1`` for a timestamp in
the second pass of a DST fall-back's repeated hour (the log's order tells, see
:func:`importers.openpoke._reader.resolve_folds`), its ``creation_timestamp`` is the
entry's naive local time in ISO form (absent when the log has none), and its text is
the decoded payload. The session's ``state_data`` holds ``"_soapwb_source": "openpoke"``
and, under ``"_openpoke"``, the data dir, the time zone, the roster (and when each name
joined it, :mod:`importers.openpoke._roster`), the OpenPoke
checkout (if given) and the root context's id: everything materialization needs, so it
works from the store alone.

Ids are uuid5 values of the data dir and what an entry is (index, tag, timestamp,
payload), so importing the same log again finds the same session and the same messages.
"""

from __future__ import annotations

import uuid
from typing import Any

from importers.openpoke._log import LogEntry
from importers.openpoke._reader import parse_local
from soap_core import SOURCE_KEY, Message, Session, TextPart

INTERACTION_ROLE = "OpenPokeInteraction"
EXECUTION_ROLE = "OpenPokeExecution"
INTERACTION_OBJECT = "interaction_agent"
SOURCE = "openpoke"
STATE_KEY = "_openpoke"
META_KEY = "openpoke"
SUMMARY_TAG = "conversation_summary"
INCOMING_TAGS = ("user_message", "agent_message")
"""The entries OpenPoke builds a request for: each starts a turn of the interaction agent."""
OUTPUT_TAGS = ("poke_reply", "wait")

INTERACTION_ROLES: dict[str, tuple[str, bool]] = {
    "user_message": ("user", False),
    "poke_reply": ("assistant", False),
    "agent_message": ("user", True),
    "wait": ("assistant", True),
    "replies": ("assistant", True),
}
UNKNOWN_TAG_ROLE = ("user", True)

_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://soap-workbench.invalid/importers/openpoke")


def stable_id(*parts: object) -> str:
    """A uuid5 of ``parts``: the same parts, the same id, on every import."""
    return str(uuid.uuid5(_NAMESPACE, "\x1f".join(str(p) for p in parts)))


def entry_key(entry: LogEntry) -> tuple[object, ...]:
    """What identifies an entry: its place in the log and its content."""
    return (entry.index, entry.tag, entry.timestamp, entry.text)


def local_iso(timestamp: str) -> str | None:
    """An entry timestamp as a naive ISO time (``2025-06-09T08:41:05``), None if it has none."""
    local = parse_local(timestamp)
    return None if local is None else local.isoformat()


def imported_message(
    role: str, content: list[Any], message_id: str, meta: dict[str, Any], local_time: str | None
) -> Message:
    """An imported message: ``meta`` as its ``openpoke`` metadata, created at ``local_time``."""
    message = Message(role, content, id=message_id, creation_timestamp="", metadata={META_KEY: meta})
    message.creation_timestamp = local_time  # None: the key is left out
    return message


def entry_message(
    entry: LogEntry, role: str, hidden: bool, message_id: str, content: list[Any] | None = None
) -> Message:
    """The message for one entry, with the ``openpoke`` metadata and its local time."""
    meta: dict[str, Any] = {
        "tag": entry.tag,
        "index": entry.index,
        "timestamp": entry.timestamp,
        "hidden": hidden,
    }
    if entry.fold:  # only in a DST fall-back's repeated hour: the second of the two instants
        meta["fold"] = entry.fold
    parts = content if content is not None else [TextPart(entry.text)]
    return imported_message(role, parts, message_id, meta, local_iso(entry.timestamp))


def openpoke_meta(message: Message) -> dict[str, Any] | None:
    """The ``openpoke`` metadata of an imported message; None for any other message."""
    meta = (message.metadata or {}).get(META_KEY)
    return meta if isinstance(meta, dict) and isinstance(meta.get("tag"), str) else None


def is_openpoke_session(session: Session) -> bool:
    return session.state_data.get(SOURCE_KEY) == SOURCE


def openpoke_state(session: Session) -> dict[str, Any]:
    """What the import recorded in ``state_data`` (empty for other sessions)."""
    state = session.state_data.get(STATE_KEY)
    return state if isinstance(state, dict) else {}
