"""Figures and labels the pages show that soap_core does not compute itself.

Plain functions without Streamlit, so that what a page shows can be checked by a test
without running the page.
"""

from __future__ import annotations

import mimetypes
import os
import re
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from pandas.io.formats.style import Styler

from importers.openpoke import openpoke_state
from replay import marked_runs, minute, session_names, short_id
from soap_core import (
    ATTRIBUTIONS_DIR,
    CALLS_DIR,
    INSTANCE_FILE,
    INVOCATIONS_DIR,
    NO_TIME,
    ContextNode,
    MediaPart,
    Session,
    SessionOverview,
    SoapError,
    Store,
    describe_node,
    is_remote,
    local_root,
    reporting_progress,
    time_text,
)
from soap_core import open_store as open_any_store
from workbench.indexing import PageProgress, fill_text_behind

StoreSignature = tuple[tuple[str, int, int], ...]
"""(path, mtime_ns, size) of every folder and file that a listing or a load reads."""

CATALOG_STATE = "catalog:"
"""How a signature taken from the catalog's state begins (:func:`store_signature`)."""


def caught_up(signature: StoreSignature) -> bool:
    """Whether taking ``signature`` refreshed the store's catalog: its listing can then be
    read as it is, without walking the store again (:meth:`soap_core.Store.listing`)."""
    return len(signature) == 1 and signature[0][0].startswith(CATALOG_STATE)


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

SHOWN_ORDER = (
    "role",
    "name",
    "instance",
    "error",
    "contexts",
    "messages",
    "tokens",
    "first",
    "last",
    "active",
    "thread",
    "session",
)
"""The Sessions table's columns as shown: who first, a broken session's error next, the
uuid last (the error column goes last when nothing is broken)."""

_MARKDOWN_SPECIALS = re.compile("([" + re.escape(string.punctuation) + "])")
WORD_JOINER = "\u2060"
"""An invisible character that joins the characters either side of it (no space, no
line break): :func:`escape_markdown` puts one where Markdown would start a link."""
_LINK_STARTS = re.compile(r"(?<=:)(?=//)|(?<=www)(?=\.)|(?<=@)", re.IGNORECASE)
"""Where GitHub-flavoured Markdown finds a link in plain text (``http://``, ``https://``,
``www.``, ``name@host.tld``): between the colon and the slashes, between ``www`` and
its dot, right after an at sign."""
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


def open_store(root: str) -> Store:
    """The store a page works on: a folder, or a URL on object storage (its mirror,
    shared by every page run of the process; storage options from
    ``$SOAPWB_STORAGE_OPTIONS``, which ``soapwb ui --storage-option`` sets)."""
    return open_any_store(root) if is_remote(root) else Store(root, counts_behind=True)


def text_waiting(root: str) -> int:
    """How many context files of the store wait for their text to go into the search
    index (filled in behind the listing: :mod:`workbench.indexing`)."""
    catalog = open_store(root).catalog()
    try:
        return catalog.text_waiting() if catalog is not None else 0
    except SoapError:
        return 0


def counts_waiting(root: str) -> int:
    """How many context files of the store wait for their token counts (a new store's
    first listing leaves them to the thread of :mod:`workbench.indexing`)."""
    catalog = open_store(root).catalog()
    try:
        return catalog.counts_waiting() if catalog is not None else 0
    except SoapError:
        return 0


def store_signature(root: str) -> StoreSignature:
    """A key that changes whenever the store does: the catalog's state after it caught
    up with the files (``stat`` calls only, one small row read), or, without a catalog,
    the modification times of the store's folders and session files.

    Any write to the store (a new session, a new or replaced context file, an atomic
    rename, peteos rewriting a file in place) changes it, so it is a sound cache key
    for everything read from the store.
    """
    store = open_store(root)
    catalog = store.catalog()
    if catalog is not None:
        try:
            with reporting_progress(PageProgress()):  # a bar when a new store takes a while
                catalog.refresh(counts_behind=True)
            if catalog.counts_waiting() or catalog.text_waiting():
                fill_text_behind(str(store.root), lambda: open_store(root).catalog())
            return ((CATALOG_STATE + catalog.state, 0, 0),)
        except SoapError:
            pass  # an unlistable folder: the walk below shows what can be seen
    return _stat_signature(store, root)


def records_signature(session_dir: str | Path | None) -> StoreSignature:
    """``(path, mtime_ns, size)`` of a session's ``calls/``, ``invocations/`` and
    ``attributions/`` folders: three ``stat`` calls. Their times move with every record written into them (a record is
    renamed into place), which :func:`store_signature` does not look at (the catalog's
    listing walk leaves record folders out), so the pages that show a session's records
    key their caches by both."""
    if session_dir is None:
        return ()
    found = (
        _stat_entry(os.path.join(session_dir, kind))
        for kind in (CALLS_DIR, INVOCATIONS_DIR, ATTRIBUTIONS_DIR)
    )
    return tuple(entry for entry in found if entry is not None)


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


def overview_table(
    overviews: Sequence[SessionOverview],
    root: str | Path | None = None,
    names: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """The session listing as a table, names first and uuids last (:data:`SHOWN_ORDER`);
    broken sessions stay in it with their error, told problem first and file after
    (relative to the store ``root``). ``names``: agent names by session uuid (OpenPoke
    execution agents), as a column after the role."""
    rows = [
        (
            o.role,
            (names or {}).get(o.uuid),
            o.instance,
            o.uuid,
            o.thread_id or NO_TIME,
            o.is_active,
            o.contexts,
            o.messages,
            o.tokens,
            time_text(o.first_timestamp, age=False),  # to the second, never "None"
            time_text(o.last_timestamp, age=False),
            error_first(o.error, root) if o.error else None,
        )
        for o in overviews
    ]
    table = pd.DataFrame.from_records(rows, columns=["role", "name", *OVERVIEW_COLUMNS[1:]])
    # Only OpenPoke names agents, only peteos 0.6 instances.
    table = table.drop(columns=[c for c in ("name", "instance") if table[c].isna().all()])
    order = [c for c in SHOWN_ORDER if c in table.columns]
    if table["error"].isna().all():  # nothing broken: the empty column goes last
        order = [*(c for c in order if c != "error"), "error"]
    table["error"] = table["error"].fillna("")
    table = table[order]
    # Integer columns with gaps (broken sessions) would otherwise turn into floats.
    return table.astype({"contexts": "Int64", "messages": "Int64", "tokens": "Int64"})


def session_label(overview: SessionOverview, name: str | None = None) -> str:
    """How a session is named in a picker, name first and id last:
    ``Analyst · 3 contexts · 2026-01-02 14:05 · 1a2b3c4d``. ``name`` is what the
    session calls its agent when its role does not (an OpenPoke execution agent's name),
    shown before the role."""
    who = overview.role if name is None else f"{name} ({overview.role})"
    if overview.instance:
        who += f" [{overview.instance}]"
    if overview.error:
        return f"{who} · broken · {short_id(overview.uuid)}"
    parts = [who, _count(overview.contexts, "context")]
    when = minute(overview.first_timestamp) or minute(overview.last_timestamp)
    if when:
        parts.append(when)
    return " · ".join([*parts, short_id(overview.uuid)])


def session_name(session: Session) -> str:
    """What a session is called: the agent name an OpenPoke import recorded, else its role."""
    agent = openpoke_state(session).get("agent")
    return agent if isinstance(agent, str) and agent.strip() else session.role


def session_heading(session: Session) -> str:
    """The line a page heads a session with: its name, size, thread and short id."""
    who = (
        session.role if session_name(session) == session.role else f"{session_name(session)} ({session.role})"
    )
    parts = [who, _count(len(session.contexts), "context")]
    if session.load_errors:
        parts[-1] += f" ({len(session.load_errors)} unreadable)"
    if session.thread_id:
        parts.append(f"thread {session.thread_id}")
    return " · ".join([*parts, f"session {short_id(session.uuid)}"])


def _count(number: int | None, noun: str) -> str:
    if number is None:
        return f"? {noun}s"
    return f"{number} {noun}{'' if number == 1 else 's'}"


def anchors_at_no_message(anchor_points: Sequence[tuple[str, int]], messages: int) -> list[str]:
    """Anchors that end before the first message or past the last one.

    ``message_rows`` attaches each anchor to the message it ends; an anchor ending at 0
    (empty, at the very start) or past the end (peteos' strip_thinking leaves those)
    ends at no message and would otherwise not be shown at all.
    """
    return [f"{name} (ends at {end})" for name, end in anchor_points if end <= 0 or end > messages]


def context_label(session: Session, context_id: str) -> str:
    """How a context is named in a picker, name and size before its id:
    ``main · 14 messages · active · e7c40f19``, or for a replay fork
    ``replay of main@12: temperature 0.9 · sample 2 of 3 · 13 messages · 1a2b3c4d``."""
    context = session.contexts[context_id]
    names = session_names(session).names
    parts = [names.get(context_id, "context"), _count(context.message_count, "message")]
    if context_id == session.active_context_id:
        parts.append("active")
    return " · ".join([*parts, short_id(context_id)])


def fork_tree_lines(
    nodes: Sequence[ContextNode], shown_id: str | None = None, names: Mapping[str, str] | None = None
) -> list[str]:
    """The fork tree as indented lines, one per context, children under their parent;
    with ``names`` (:func:`~replay.session_names`), each line leads
    with the context's name and ends with its short id."""
    lines = []
    for node in nodes:
        shown = "  <- shown" if node.id == shown_id else ""
        if names is None:
            lines.append(f"{'    ' * node.depth}- {node.id}  {describe_node(node)}{shown}")
        else:
            name = names.get(node.id, node.kind)
            lines.append(f"{'    ' * node.depth}- {name}  {describe_node(node)}  {short_id(node.id)}{shown}")
    return lines


def media_file_name(message_id: str, part_index: int, part: MediaPart) -> str:
    """A safe download name for an inline media part, with the extension of its type."""
    extension = mimetypes.guess_extension(part.media_type or "") or ".bin"
    stem = _UNSAFE_FILE_CHARS.sub("_", f"{message_id}-{part_index}-{part.type}")
    return stem + extension


def _texts(column: pd.Series, blank: str) -> pd.Series:
    """``column`` as text, a missing value as ``blank``; a whole number that pandas made a
    float (a number column with a gap) without its ``.0``, another to four significant
    digits, as the grid shows numbers."""

    def text(value: Any) -> str:
        if isinstance(value, float):
            return str(int(value)) if value.is_integer() else f"{value:.4g}"
        return str(value)

    missing = column.isna()
    values = [blank if gap else text(v) for v, gap in zip(column, missing, strict=True)]
    return pd.Series(values, index=column.index, dtype="string")


def blanks_as(table: pd.DataFrame | Styler, words: str | Mapping[str, str]) -> pd.DataFrame | Styler:
    """The table as ``st.dataframe`` should show it: a missing value reads as ``words``
    (one text for every column, or one per column named), never as Streamlit's grey
    "None". A column with a blank becomes text: the browser's grid draws a missing cell as
    "None" whatever the Styler says (its ``na_rep`` reaches only the Styler's HTML). A
    Styler keeps its styles: they apply to the same rows and columns."""
    data = table.data if isinstance(table, Styler) else table
    wanted = {c: words for c in data.columns} if isinstance(words, str) else dict(words)
    blank = {c: w for c, w in wanted.items() if c in data.columns and bool(data[c].isna().any())}
    if not blank:
        return table
    filled = data.assign(**{c: _texts(data[c], w) for c, w in blank.items()})
    if isinstance(table, Styler):
        table.data = filled
        return table
    return filled


def escape_markdown(text: str) -> str:
    """``text`` with every ASCII punctuation character backslash-escaped, and a
    :data:`WORD_JOINER` where a link would start.

    st.error, st.warning and st.info render Markdown, and so do expander, radio, tab and
    caption labels, which quote values from the files (paths, ids, tool names, message
    text); escaped, they show as written and cannot become links, images, math or
    formatting. Escapes alone do not stop a bare ``https://…``, ``www.…`` or
    ``name@host.tld`` from becoming a link: Streamlit's Markdown (remark-gfm) looks
    for those in the text after it has undone the escapes. The invisible joiner breaks
    the pattern, so the label reads the same and links nowhere.
    """
    return _MARKDOWN_SPECIALS.sub(r"\\\1", _LINK_STARTS.sub(WORD_JOINER, text))


def coloured_words(words: Sequence[tuple[str, str]]) -> str:
    """A word diff as Markdown for the page: what only the first has on red, what only
    the second has on green, each run escaped so it shows as written (never a link, never
    formatting); the marks of :func:`replay.marked_words` stay, so the difference reads
    without colour too."""
    colours = {"delete": ":red-background[{}]", "insert": ":green-background[{}]"}
    return " ".join(
        colours.get(op, "{}").format(escape_markdown(marked)) for op, marked in marked_runs(words)
    )


_PATH_LIMIT = 80
_PART_LIMIT = 20


def store_relative(path: str | Path, root: str | Path | None = None) -> str:
    """``path`` as a person finds it in the store: relative to the store folder, and when
    still long, the long folder names in the middle (session uuids) cut short."""
    if root is not None and is_remote(str(root)):
        url = str(root).rstrip("/")
        if str(path) == url or str(path).startswith(url + "/"):
            return str(path)[len(url) + 1 :] or "."  # an error naming the bucket's object
        root = local_root(url)  # the errors name the mirror's files
    shown = Path(path)
    if root is not None:
        for base in (Path(root), Path(root).resolve()):
            if shown.is_relative_to(base):
                shown = shown.relative_to(base)
                break
    parts = list(shown.parts)
    if len(str(shown)) > _PATH_LIMIT and len(parts) > 2:
        head = 1 if shown.is_absolute() else 0
        for i in range(head + 1, len(parts) - 1):
            if len(parts[i]) > _PART_LIMIT:
                parts[i] = parts[i][:17] + "…"
        return "/".join(parts).replace("//", "/")
    return str(shown)


_JSON_PATH = re.compile(r"^at (\$\S*): ")


def _problem_text(problem: str) -> str:
    """A FormatError's ``at $…: problem`` as ``problem (at $…)``; the whole file's ``$`` says nothing."""
    found = _JSON_PATH.match(problem)
    if not found:
        return problem
    rest = problem[found.end() :]
    return rest if found.group(1) == "$" else f"{rest} (at {found.group(1)})"


def _split_path(text: str, root: str | Path | None) -> tuple[str, str] | None:
    """(path, problem) of an error read as ``<path>: <problem>``, if it starts with a path."""
    starts = [str(Path(root)), str(Path(root).resolve())] if root is not None else []
    if not (text.startswith("/") or any(text.startswith(s) for s in starts)):
        return None
    path, sep, problem = text.partition(": ")
    return (path, problem) if sep and problem else None


def error_first(error: BaseException | str, root: str | Path | None = None) -> str:
    """An error as one line that reads from what is wrong to where: ``not valid JSON:
    Expecting value at line 3 column 1 — agents/Analyst/20250611-3f0c2b6e…/c1.json``.

    soap_core's errors start with the file (``<path>: <problem>``), which on a page
    pushes the problem off to the right behind a long path; here the path comes last,
    relative to the store ``root``."""
    path = getattr(error, "path", None) if isinstance(error, BaseException) else None
    path = getattr(error, "url", None) or path  # an object on a bucket: its URL, not a mangled path
    problem = getattr(error, "problem", None) if isinstance(error, BaseException) else None
    if isinstance(problem, str):
        json_path = getattr(error, "json_path", None)
        text = problem if json_path in (None, "$") else f"{problem} (at {json_path})"
        where = store_relative(path, root) if path is not None else "."
        return text if where == "." else f"{text} — {where}"  # the store itself goes unnamed
    message = str(error)
    split = _split_path(message, root)
    if split is None:
        return message
    where = store_relative(split[0], root)
    return _problem_text(split[1]) if where == "." else f"{_problem_text(split[1])} — {where}"


def load_error_line(file_name: str, error: BaseException | str, root: str | Path | None = None) -> str:
    """One unreadable context file of a session, error first: ``unreadable: not valid
    JSON … — agents/Analyst/…/c1.json`` (the file name alone when the error names none)."""
    text = error_first(error, root)
    return f"unreadable: {text}" if " — " in text else f"unreadable: {text} — {file_name}"
