"""Figures and labels the pages show that soap_core does not compute itself.

Plain functions without Streamlit, so that what a page shows can be checked by a test
without running the page.
"""

from __future__ import annotations

import mimetypes
import os
import re
import string
from collections.abc import Sequence

import pandas as pd

from soap_core import (
    INSTANCE_FILE,
    REPLAY_KEY,
    ContextNode,
    MediaPart,
    MessageRow,
    Session,
    SessionOverview,
    SoapError,
    Store,
    describe_node,
)

StoreSignature = tuple[tuple[str, int, int], ...]
"""(path, mtime_ns, size) of every folder and file that a listing or a load reads."""

OVERVIEW_COLUMNS = (
    "role",
    "instance",
    "session",
    "thread",
    "active",
    "contexts",
    "messages",
    "tokens",
    "first",
    "last",
    "error",
)

_MARKDOWN_SPECIALS = re.compile("([" + re.escape(string.punctuation) + "])")
_UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def _stat_entry(path: str) -> tuple[str, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (path, info.st_mtime_ns, info.st_size)


def _listing(path: str) -> list[str]:
    try:
        return sorted(entry.path for entry in os.scandir(path))
    except OSError:
        return []


def store_signature(root: str) -> StoreSignature:
    """A key that changes whenever the store does: the catalog's state after it caught
    up with the files (``stat`` calls only, one small row read), or, without a catalog,
    the modification times of the store's folders and session files.

    Any write to the store (a new session, a new or replaced context file, an atomic
    rename, peteos rewriting a file in place) changes it, so it is a sound cache key
    for everything read from the store.
    """
    store = Store(root)
    catalog = store.catalog()
    if catalog is not None:
        try:
            catalog.refresh()
            return (("catalog:" + catalog.state, 0, 0),)
        except SoapError:
            pass  # an unlistable folder: the walk below shows what can be seen
    return _stat_signature(store, root)


def _stat_signature(store: Store, root: str) -> StoreSignature:
    paths = [root, str(store.agents_dir), str(store.layout.instances_dir)]
    # peteos rewrites agentic_object.json in place: its own mtime tells a new thread
    paths.extend(os.path.join(d, INSTANCE_FILE) for d in _listing(str(store.layout.instances_dir)))
    for parent in store.session_parent_dirs():
        paths.append(str(parent))
        for session_dir in _listing(str(parent)):
            paths.append(session_dir)
            paths.extend(_listing(session_dir))
    return tuple(entry for entry in map(_stat_entry, paths) if entry is not None)


def overview_table(overviews: Sequence[SessionOverview]) -> pd.DataFrame:
    """The session listing as a table; broken sessions stay in it with their error."""
    rows = [
        (
            o.role,
            o.instance,
            o.uuid,
            o.thread_id,
            o.is_active,
            o.contexts,
            o.messages,
            o.tokens,
            o.first_timestamp,
            o.last_timestamp,
            o.error,
        )
        for o in overviews
    ]
    table = pd.DataFrame.from_records(rows, columns=list(OVERVIEW_COLUMNS))
    if table["instance"].isna().all():  # only peteos 0.6 names instances
        table = table.drop(columns="instance")
    # Integer columns with gaps (broken sessions) would otherwise turn into floats.
    return table.astype({"contexts": "Int64", "messages": "Int64", "tokens": "Int64"})


_DATE_PREFIX = re.compile(r"^\d{8}-")


def short_id(identifier: str | None) -> str:
    """A session or context id cut to its first block after peteos's ``YYYYMMDD-`` date
    prefix (every 0.6 id starts with the same date), for labels."""
    if not identifier:
        return "-"
    return _DATE_PREFIX.sub("", identifier)[:8]


def session_label(overview: SessionOverview) -> str:
    """How a session is named in a picker: role, uuid, and whether it can be opened."""
    broken = "  (broken)" if overview.error else ""
    instance = f" ({overview.instance})" if overview.instance else ""
    return f"{overview.role}{instance} / {overview.uuid}{broken}"


def token_label(row: MessageRow) -> str:
    """The token figure of a message; a stale cached count is shown beside the true one."""
    if row.stale:
        return f"stale: cached {row.cached_tokens}, true {row.tokens}"
    return f"{row.tokens} tokens"


def message_heading(row: MessageRow, message_type: str) -> str:
    """One line naming a message: display index, sequence number, role, type, tokens."""
    seq = "-" if row.sequence_number is None else str(row.sequence_number)
    kind = "" if message_type == "Message" else f"  {message_type}"
    return f"#{row.index}  seq {seq}  {row.role}{kind}  {token_label(row)}  id {row.id}"


def anchors_at_no_message(anchor_points: Sequence[tuple[str, int]], messages: int) -> list[str]:
    """Anchors that end before the first message or past the last one.

    ``message_rows`` attaches each anchor to the message it ends; an anchor ending at 0
    (empty, at the very start) or past the end (peteos' strip_thinking leaves those)
    ends at no message and would otherwise not be shown at all.
    """
    return [f"{name} (ends at {end})" for name, end in anchor_points if end <= 0 or end > messages]


def context_label(session: Session, context_id: str) -> str:
    """How a context is named in a picker: id, message count, active and fork origin."""
    context = session.contexts[context_id]
    label = f"{context_id}  ({len(context.messages)} messages)"
    if context_id == session.active_context_id:
        label += "  active"
    if context.origin_context_id:
        kind = "replay" if REPLAY_KEY in context.extra else "fork"
        label += f"  {kind} of {short_id(context.origin_context_id)}"
    return label


def fork_tree_lines(nodes: Sequence[ContextNode], shown_id: str | None = None) -> list[str]:
    """The fork tree as indented lines, one per context, children under their parent."""
    lines = []
    for node in nodes:
        shown = "  <- shown" if node.id == shown_id else ""
        lines.append(f"{'    ' * node.depth}- {node.id}  {describe_node(node)}{shown}")
    return lines


def media_file_name(message_id: str, part_index: int, part: MediaPart) -> str:
    """A safe download name for an inline media part, with the extension of its type."""
    extension = mimetypes.guess_extension(part.media_type or "") or ".bin"
    stem = _UNSAFE_FILE_CHARS.sub("_", f"{message_id}-{part_index}-{part.type}")
    return stem + extension


def escape_markdown(text: str) -> str:
    """``text`` with every ASCII punctuation character backslash-escaped.

    st.error, st.warning and st.info render Markdown, and error messages quote values
    from the files (paths, ids, wrong values); escaped, they show as written and cannot
    become links, images, math or formatting.
    """
    return _MARKDOWN_SPECIALS.sub(r"\\\1", text)
