"""The catalog: an SQLite index of a store, so that listing, lookup and search do not
read every file every time.

The files stay the truth. The catalog remembers, per file, the signature it was indexed
at (size, modification time, change time, inode) and what was read from it: one row per
session (``session.json``), per context file (its figures and true token count of each
message), per message (role, tokens, time, size, text for search through FTS5) and per
recorded call and invocation. :meth:`Catalog.refresh` walks the store with ``stat`` calls
only and reads again just the files whose signature changed, so a rebuild from the files
alone gives the same answers as the updates did (a test compares both with a full scan).
A rewrite in place that restores the size and the modification time (``cp -p``,
``rsync --inplace``) still moves the change time, which no one can set back.

It is a cache: deleting it loses nothing, and whatever happens to its database, every
answer is the one the files give. The database is trusted only while it is the file this
code left: beside it, a lock file (opened without following links, never deleted) holds
the *stamp*, the database's own signature and build id, written under an exclusive
``flock`` after every change of the database file (SQLite changes it only when it copies
its write-ahead log back, which here happens under that lock: automatic checkpoints are
off). A database whose signature is not its stamp was changed by something else (a disk,
a hand, another program) and is rebuilt, even where SQLite would read it without error:
SQLite keeps no checksums, and a flipped byte in a value reads as another value. An
error while reading or writing it (damage, a missing table, text that is not UTF-8)
rebuilds it too, at any point of use, and the question is asked again of the rebuilt
catalog, refreshed from the files. The first build and every rebuild happen under the
lock, so two processes never build over each other; a rebuild empties the database in
place through SQLite (other processes' connections stay coherent) and only a file SQLite
cannot open at all is set aside (renamed, not deleted, so no process holding it open
loses it to a new file of the same inode). Where none of that works (no folder the
catalog can be written in, a lock held too long), the catalog is built in memory for
the process. A store whose folder cannot be written gets its catalog in the user's cache
directory.

peteos writes files in place (``open(path, "w")``), which does not change the folder's
modification time, so every session and context file is ``stat``-ed on a refresh; our
own record folders (``calls/``, ``invocations/``) are written once per file by rename,
so their folder's time is their signature.

The walk never goes through a link that leads outside the store (a role or session
folder, ``session.json``, a context file, a record folder): such a folder is indexed as a
broken session saying where the link goes, such a file as a file that cannot be read.
It also removes the leftover temp files of killed writers it comes across in session
folders (:mod:`soap_core._tempfiles`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
import weakref
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import orjson

from soap_core import _progress as progress
from soap_core import _trust as trust
from soap_core._context import Context
from soap_core._errors import ContextNotFoundError, FormatError, SoapError, StoreError
from soap_core._facts import MessageFacts, decode_facts, encode_facts, facts_of, prefix_facts
from soap_core._ids import identifier_problem
from soap_core._jsonio import bytes_digest, loads_plain, parse_json_bytes, read_json
from soap_core._layout import (
    AGENTS_DIR,
    SESSIONS_DIR,
    UNKNOWN_ROLE,
    InstanceClaim,
    StoreLayout,
    read_instances,
)
from soap_core._list_worker import keys_of, message_times, read_all
from soap_core._message import Message
from soap_core._paths import (
    OutsideStoreError,
    inside,
    inside_any,
    link_escapes,
    outside_problem,
    real,
    real_folders,
)
from soap_core._records import CALLS_DIR, INVOCATIONS_DIR, CallRecord, InvocationRecord
from soap_core._session import OBJECT_KEY, RERUN_SESSION_KEY, Session
from soap_core._spans import SPANNED_FROM, message_spans
from soap_core._tempfiles import sweep_names
from soap_core._tokens import count_text, message_token_text

T = TypeVar("T")

CATALOG_FILE = ".soapwb-catalog.sqlite3"
SCHEMA_VERSION = "12"
"""Bumped whenever what the catalog vouches for changes: a context file it indexed is
loaded without its messages being checked again (they are built on first use), so a
catalog written under older reading rules must not vouch for a file the current rules
refuse (4: ids, records and links checked as in soap_core._ids; 5: message spans and
facts, soap_core._spans; 6: the facts of soap_core._facts; 7: signatures with the change
time, the stamp in the lock file; 8: the text backlog; 9: token counts filled in behind;
10: session folders' own signatures, soap_core._catalog.Catalog._found; 12: messages'
rows, spans and facts filled in behind a workbench's first indexing, ``row_backlog``)."""
LOCK_SUFFIX = ".lock"
"""The lock file beside the database (``.soapwb-catalog.sqlite3.lock``): its ``flock``
orders builds, rebuilds and checkpoints across processes; its bytes are the stamp."""
SET_ASIDE_SUFFIX = ".damaged"
"""Where a database SQLite cannot open is renamed to before a new one is built (one is
kept: the next one replaces it)."""
LOCK_TIMEOUT_S = 120.0
"""How long a process waits for another's build, rebuild or checkpoint before it builds
its catalog in memory instead."""
CHECKPOINT_BYTES = 4 * 1024 * 1024
"""The write-ahead log is copied back into the database once it grows past this (what
SQLite's own automatic checkpoint does at 1,000 pages), and when a catalog is closed."""
_STAMP_BYTES = 160
TEXT_BATCH = 20_000
"""Messages whose text :meth:`Catalog.fill_text` (or counts :meth:`Catalog.fill_counts`)
writes in one transaction."""
COUNTS_BEHIND_FROM = 100
"""A refresh asked to count behind (``refresh(counts_behind=True)``, the workbench's)
lists each context file from its file-level keys alone, and leaves its messages (their
checks, rows, spans, facts and token counts) to :meth:`Catalog.fill_counts`, only when
it indexes at least this many session folders: a new store's first indexing, where
reading every message is most of the cost (issue 28 point 2), and not a live store's
few changed files, which a page shows whole at once."""

SESSION_FILE = "session.json"

_SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;
CREATE TABLE sessions(
    dir TEXT PRIMARY KEY,          -- relative to the config dir: agents/<role>/<name> or sessions/<name>
    sort_key TEXT NOT NULL,        -- the listing's order
    layout TEXT NOT NULL,
    role TEXT NOT NULL,
    instance TEXT,
    name TEXT NOT NULL,
    uuid_part TEXT NOT NULL,       -- the name without its date prefix
    sig TEXT NOT NULL,             -- of session.json ('' when it is missing)
    mtime_ns INTEGER NOT NULL,     -- of session.json, for "the newest session of a thread"
    uuid TEXT,
    thread_id TEXT,
    is_active INTEGER,
    active_context_id TEXT,
    object_id TEXT,
    rerun INTEGER,
    error TEXT,
    digest TEXT                    -- of session.json's bytes, role and instance
) WITHOUT ROWID;
CREATE INDEX sessions_name ON sessions(name);
CREATE INDEX sessions_uuid ON sessions(uuid);
CREATE INDEX sessions_thread ON sessions(thread_id, role);
CREATE INDEX sessions_sort ON sessions(sort_key);  -- the listing's order, without a sort
CREATE TABLE context_files(
    dir TEXT NOT NULL,
    file TEXT NOT NULL,
    sig TEXT NOT NULL,
    id TEXT,
    origin_context_id TEXT,
    children TEXT,
    messages INTEGER,
    tokens INTEGER,
    first_ts TEXT,
    last_ts TEXT,
    counts BLOB,                   -- true token count of each message, int32 array
    error TEXT,
    digest TEXT,                   -- of the file's bytes: a racy re-read that finds them
                                   -- unchanged changes nothing
    spans BLOB,                    -- of a big file: byte range of each message, int64
                                   -- array (soap_core._spans.message_spans)
    facts BLOB,                    -- of a big file: soap_core._facts.MessageFacts as JSON
    PRIMARY KEY(dir, file)
) WITHOUT ROWID;
CREATE INDEX context_files_id ON context_files(id);
CREATE TABLE messages(
    rowid INTEGER PRIMARY KEY,     -- also the rowid of the message's text in message_text
    dir TEXT NOT NULL,
    file TEXT NOT NULL,
    idx INTEGER NOT NULL,
    id TEXT NOT NULL,
    role TEXT NOT NULL,
    tokens INTEGER,                -- NULL while the file waits in count_backlog
    cached_tokens INTEGER,
    created TEXT,
    chars INTEGER NOT NULL
);
CREATE UNIQUE INDEX messages_at ON messages(dir, file, idx);
CREATE VIRTUAL TABLE message_text USING fts5(text, tokenize='trigram');
CREATE TABLE text_backlog(         -- context files whose messages' text is not in
    dir TEXT NOT NULL,             -- message_text yet: a refresh, and a save of a long
    file TEXT NOT NULL,            -- context, leave it to Catalog.fill_text (trigram
    PRIMARY KEY(dir, file)         -- indexing is most of what indexing a message costs)
) WITHOUT ROWID;
CREATE TABLE count_backlog(        -- context files whose true token counts are not
    dir TEXT NOT NULL,             -- taken yet (their tokens and counts are NULL): a
    file TEXT NOT NULL,            -- first indexing for the workbench leaves them to
    PRIMARY KEY(dir, file)         -- Catalog.fill_counts, run behind it
) WITHOUT ROWID;
CREATE TABLE row_backlog(          -- context files a first indexing for the workbench
    dir TEXT NOT NULL,             -- listed from their file-level keys alone: their
    file TEXT NOT NULL,            -- messages are checked, and their rows, spans and
    PRIMARY KEY(dir, file)         -- facts written, by Catalog.fill_counts (each also
) WITHOUT ROWID;                   -- waits in count_backlog and text_backlog)
CREATE TABLE folders(              -- a session folder's own signature as a walk found
    dir TEXT PRIMARY KEY,          -- it settled, with the names it listed then: a later
    sig TEXT NOT NULL,             -- walk finding the same signature stats those files
    names TEXT NOT NULL            -- without listing the folder (Catalog._found)
) WITHOUT ROWID;
CREATE TABLE record_dirs(dir TEXT NOT NULL, kind TEXT NOT NULL, sig TEXT NOT NULL,
    digest TEXT, PRIMARY KEY(dir, kind)) WITHOUT ROWID;
CREATE TABLE calls(dir TEXT NOT NULL, id TEXT NOT NULL, context_id TEXT, message_index INTEGER,
    message_id TEXT, request_hash TEXT, invocation_id TEXT, started_at TEXT,
    PRIMARY KEY(dir, id)) WITHOUT ROWID;
CREATE TABLE invocations(dir TEXT NOT NULL, id TEXT NOT NULL, parent_invocation_id TEXT,
    callee_session TEXT, caller_session TEXT, started_at TEXT, outcome TEXT,
    PRIMARY KEY(dir, id)) WITHOUT ROWID;
CREATE INDEX invocations_parent ON invocations(parent_invocation_id);
CREATE TABLE token_counts(hash BLOB PRIMARY KEY, tokens INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE listing(              -- the last whole listing (Catalog._whole_listing), as
    key TEXT NOT NULL,             -- JSON rows, for the build and generation in key: a
    rows BLOB NOT NULL             -- new process lists an unchanged store without the query
);
"""


def is_catalog_file(path: Path) -> bool:
    """The catalog's database or one of SQLite's files beside it (not store data)."""
    return path.name.startswith(CATALOG_FILE)


def _cache_home() -> Path:
    configured = os.environ.get("SOAPWB_CACHE_DIR")
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "soapwb"


def cache_catalog_path(config_dir: Path) -> Path:
    """Where the catalog of a store that cannot be written lives: the user's cache."""
    key = hashlib.sha256(str(config_dir.resolve()).encode("utf-8", "surrogatepass")).hexdigest()[:20]
    return _cache_home() / "catalogs" / f"{key}.sqlite3"


@dataclass
class _Listing:
    """A whole listing this process read, with what callers made of its rows."""

    key: tuple[str, int]
    """The catalog's build and generation it was read at."""
    rows: list[SessionRow]
    shaped: dict[Callable[[SessionRow], Any], list[Any]] = field(default_factory=dict)
    """Each shape's values of the rows (:meth:`Catalog.whole_listing`), as it made them."""


_LISTINGS: dict[str, _Listing] = {}
"""The last whole listing of each catalog file, by its build and generation."""
_LISTINGS_LOCK = threading.Lock()


def _storable(value: Any) -> Any:
    """A parameter SQLite can take. Text is stored as UTF-8, which a lone surrogate has no
    form in (a JSON file may hold ``"\\ud800"``; a folder name that is not UTF-8 reads back
    with surrogates): such text is stored with ``?`` in their place, so one odd string
    costs the catalog that string's exactness, not the whole refresh."""
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "replace").decode("utf-8")
    return value


def _storable_row(row: Any) -> Any:
    if isinstance(row, dict):
        return {k: _storable(v) for k, v in row.items()}
    for value in row:  # most rows are ASCII throughout: handed on as they are
        if isinstance(value, str) and not value.isascii():
            return tuple(_storable(v) for v in row)
    return row


class _Connection(sqlite3.Connection):
    """A connection whose statements take any text (see :func:`_storable`)."""

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        return super().execute(sql, _storable_row(parameters))

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> sqlite3.Cursor:
        return super().executemany(sql, (_storable_row(p) for p in parameters))


def stat_signature(info: os.stat_result) -> str:
    """What a file is trusted by: size, modification time, change time and inode. An
    in-place rewrite that keeps the size and restores the modification time (``cp -p``,
    ``rsync --inplace``, ``os.utime``) still moves the change time; a rename brings
    another inode. All of it comes from the one ``stat`` the walk makes anyway."""
    return f"{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}:{info.st_ino}"


_signature = stat_signature


RACY_NS = 2_000_000_000
"""A file modified this recently may change again within the same tick of the file
system's clock without its signature changing (same size, same times): as git does
with "racily clean" entries, its signature is not trusted until it is older. The rule
reads the modification time, as it always did: a file written in place with its
modification time set back has a change time of now, so a second such rewrite is missed
only if it lands in the same tick of the change-time clock as the first one, after the
catalog read the first (milliseconds on a coarse kernel clock, never where change times
are fine-grained, as on Linux 6.13 and later)."""


SETTLED_FOLDER_NS = 2_000_000_000
"""A session folder is remembered by its own signature (so that a later walk stats its
files without listing it) only when its modification and change times are this much
older than the walk: the rule of :data:`RACY_NS` for folders (a file created in the
same tick of the file system's clock as the folder's last change would leave both times
as they were). Its own constant: tests that close the files' window keep this one."""


def _settled(sig: str) -> str:
    """The signature to remember: marked so it never matches while it is racy."""
    if not sig or not sig[0].isdigit():
        return sig  # empty, or the marker of a link leading outside (no time to trust)
    mtime = int(sig.split(":", 2)[1])
    return f"racy:{sig}" if time.time_ns() - mtime < RACY_NS else sig


def _token_key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class SessionRow(NamedTuple):
    """What the catalog knows of one session folder (the listing's row): a named tuple,
    five times cheaper to build than a frozen dataclass (a listing builds 10,000). The
    folder is kept as the store's folder and a relative string: a listing that shows no
    path builds no ``Path`` (2 µs a row)."""

    root: Path
    """The store's folder (where the catalog's relative folders start)."""
    rel: str
    """The session folder, relative to :attr:`root` (``agents/<role>/<folder>``)."""
    layout: str
    role: str
    instance: str | None
    uuid: str | None
    thread_id: str | None
    is_active: bool
    active_context_id: str | None
    context_files: int
    error: str | None
    active_file: str | None
    """The file the active context is read from, if one exists."""
    messages: int | None
    tokens: int | None
    first_timestamp: str | None
    last_timestamp: str | None
    active_error: str | None
    """Why the active context cannot be shown (missing or broken file), as loading says."""

    @property
    def dir(self) -> Path:
        """The session folder."""
        return self.root / self.rel

    @property
    def name(self) -> str:
        """The session folder's name (``dir.name``, without building the path)."""
        return self.rel.rpartition("/")[2]


@dataclass(frozen=True)
class CatalogHit:
    """One message whose searchable text may contain the query."""

    session_dir: str
    role: str
    session: str
    context_id: str
    index: int
    message_id: str
    message_role: str
    text: str


@dataclass(slots=True)
class _Found:
    """One session folder as the walk found it: its files and their signatures (not
    frozen: a frozen dataclass of 12 fields costs 1.4 µs to build, this one 0.3, and a
    walk builds one per session folder)."""

    rel: str
    where: str
    """The folder (a string: the walk makes 10,000 of these and uses few)."""
    layout: str
    role: str
    instance: str | None
    session_sig: str
    session_mtime: int
    context_sigs: dict[str, str]
    record_sigs: dict[str, str]
    with_records: bool = True
    """Whether the walk looked at the record folders (else they are left as indexed)."""
    outside: str | None = None
    """Why the folder is not followed: a link leading outside the store."""
    folder: tuple[str, str] | None = None
    """The folder's own signature and the names it listed, when the walk listed it and
    it had settled (see :meth:`Catalog._found`): what the catalog remembers of it."""
    made_path: Path | None = field(default=None, repr=False, compare=False)

    @property
    def path(self) -> Path:
        """The folder as a ``Path``, made on first use (indexing a folder asks for it
        several times; a listing's walk never does)."""
        if self.made_path is None:
            self.made_path = Path(self.where)
        return self.made_path

    @property
    def session_key(self) -> str:
        """What the session row depends on: session.json, and the role a 0.6 instance gives."""
        return f"{self.session_sig}|{self.role}|{self.instance or ''}"


@dataclass
class _Known:
    """The signatures the catalog holds, to compare with a walk."""

    sessions: dict[str, str]
    files: dict[str, dict[str, str]]
    records: dict[tuple[str, str], str]

    def differs(self, item: _Found) -> bool:
        if self.sessions.get(item.rel) != item.session_key:
            return True
        if self.files.get(item.rel, {}) != item.context_sigs:
            return True
        return item.with_records and any(
            self.records.get((item.rel, k)) != item.record_sigs.get(k) for k in (CALLS_DIR, INVOCATIONS_DIR)
        )


@dataclass(frozen=True)
class _FolderWalk:
    """What a walk brings to each session folder: the signatures and names the catalog
    remembers (``folders``), and the time before which a folder counts as settled."""

    remembered: dict[str, tuple[str, str]]
    settled_before: int


def _found_by_names(
    rel: str,
    path: str,
    layout: str,
    role: str,
    instance: str | None,
    records: bool,
    names: str,
    at: tuple[str, int | None],
) -> _Found | None:
    """A folder found at its remembered signature: each remembered file stat-ed by name
    (the folder is not listed), its record folders too unless for a listing. None when one is
    no longer a file or a folder as it was (a link whose target changed): the caller
    lists the folder. ``at``: the folder as ``os.stat`` takes it (see :meth:`Catalog._found`)."""
    folder, parent = at
    session_sig, session_mtime = "", 0
    contexts: dict[str, str] = {}
    record_sigs: dict[str, str] = {}
    try:
        for name in names.split("\n") if names else ():
            if name[-1] == "/":  # a record folder: a listing leaves it alone
                if records:
                    info = os.stat(f"{folder}/{name}", dir_fd=parent)
                    if not stat.S_ISDIR(info.st_mode):
                        return None
                    record_sigs[name[:-1]] = _signature(info)
                continue
            info = os.stat(f"{folder}/{name}", dir_fd=parent)
            if not stat.S_ISREG(info.st_mode):
                return None
            if name == SESSION_FILE:
                session_sig, session_mtime = _signature(info), info.st_mtime_ns
            else:
                contexts[name] = _signature(info)
    except OSError:
        return None
    return _Found(
        rel, path, layout, role, instance, session_sig, session_mtime, contexts, record_sigs, records
    )


# -- the lock, the stamp, the connection ------------------------------------------------------


class CatalogDamage(Exception):
    """A value read from the catalog that this code cannot have written there."""


class _Busy(Exception):
    """The lock beside the catalog stayed held past :data:`LOCK_TIMEOUT_S`."""


class _Stale(Exception):
    """Another process rebuilt the catalog since this one last looked."""


_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
_ENVIRONMENT_CODES = frozenset(
    {
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_NOMEM,
        sqlite3.SQLITE_PERM,
        sqlite3.SQLITE_AUTH,
        sqlite3.SQLITE_INTERRUPT,
        sqlite3.SQLITE_NOLFS,
    }
)
_FAILURES = (sqlite3.Error, UnicodeError, CatalogDamage, _Busy, OSError)
"""What using a catalog file can raise: each is answered by rebuilding or bypassing it."""


def _failure_kind(exc: BaseException) -> str | None:
    """``busy`` (another process holds it: wait, then bypass), ``environment`` (no disk,
    no permission: bypass), ``damage`` (rebuild), or None: not the catalog's failure."""
    if isinstance(exc, _Busy):
        return "busy"
    if isinstance(exc, (CatalogDamage, UnicodeError)):
        return "damage"
    if isinstance(exc, OSError):  # the catalog's own files (the walk turns the store's into StoreError)
        return "environment"
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        if primary in _BUSY_CODES:
            return "busy"
        return "environment" if primary in _ENVIRONMENT_CODES else "damage"
    return None


@dataclass(frozen=True)
class _Stamp:
    """What the lock file says: the build id of the database and its signature when this
    code last left it."""

    build: str = ""
    sig: str = ""

    def vouches_for(self, info: os.stat_result | None) -> bool:
        return info is not None and bool(self.build) and self.sig == stat_signature(info)


def _open_lock_file(path: Path) -> int:
    """The lock file, created if missing, never through a link (a link planted there
    would have its target written), and only a regular file."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path}: not a regular file")
    return fd


class _CatalogLock:
    """The ``flock`` beside one catalog file, one per process (its catalogs share it:
    two file descriptions of one process would lock each other out), and the stamp."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = _open_lock_file(path)
        self._threads = threading.RLock()
        self._depth = 0
        weakref.finalize(self, os.close, self.fd)  # once no catalog of this process uses it

    def is_current(self) -> bool:
        """Whether the lock file at the path is still the one held open (a lock file
        deleted by hand must not leave two processes with two "the" locks)."""
        try:
            held, there = os.fstat(self.fd), os.lstat(self.path)
        except OSError:
            return False
        return (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)

    @contextlib.contextmanager
    def held(self, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
        if not self._threads.acquire(timeout=timeout):
            raise _Busy(f"{self.path}: held by another thread")
        try:
            if self._depth == 0:
                self._flock(timeout)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            self._threads.release()

    def _flock(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise _Busy(f"{self.path}: held by another process for {timeout:g} s") from None
                time.sleep(0.002)

    def stamp(self) -> _Stamp:
        try:
            parts = os.pread(self.fd, _STAMP_BYTES, 0).decode("ascii", "replace").split()
        except OSError:
            return _Stamp()
        return _Stamp(parts[0], parts[1]) if len(parts) == 2 else _Stamp()

    def write_stamp(self, stamp: _Stamp) -> None:
        """Fixed width, one ``pwrite``: a reader never sees half of it."""
        os.pwrite(self.fd, f"{stamp.build} {stamp.sig}\n".encode().ljust(_STAMP_BYTES), 0)


_LOCKS: weakref.WeakValueDictionary[str, _CatalogLock] = weakref.WeakValueDictionary()
_LOCKS_GUARD = threading.Lock()


def _lock_for(database: Path) -> _CatalogLock:
    key = f"{database}{LOCK_SUFFIX}"
    with _LOCKS_GUARD:
        lock = _LOCKS.get(key)
        if lock is None or not lock.is_current():
            lock = _CatalogLock(Path(key))
            _LOCKS[key] = lock
        return lock


def _forget_locks_in_child() -> None:
    """A forked child shares its parent's lock file descriptions (and so its locks):
    it opens its own."""
    global _LOCKS_GUARD
    _LOCKS_GUARD = threading.Lock()
    _LOCKS.clear()


os.register_at_fork(after_in_child=_forget_locks_in_child)


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except OSError:
        return None


BUSY_WAIT_MS = 30_000
"""How long a statement waits for another connection's write lock."""
REBUILD_WAIT_MS = 2_000
"""How long emptying a catalog in place waits for other connections before the file is
set aside instead."""


def _connect(path: Path | str) -> sqlite3.Connection:
    return sqlite3.connect(
        path, timeout=BUSY_WAIT_MS / 1000, check_same_thread=False, isolation_level=None, factory=_Connection
    )


def _prepare(db: sqlite3.Connection) -> None:
    """WAL, and no checkpoint but those this code makes (under the lock, then stamped)."""
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA wal_autocheckpoint=0")


def _quietly_close(db: sqlite3.Connection | None) -> None:
    if db is not None:
        with contextlib.suppress(sqlite3.Error):
            db.close()


def _meta(db: sqlite3.Connection) -> dict[str, str]:
    rows = db.execute("SELECT key, value FROM meta").fetchall()
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in rows):
        raise CatalogDamage("meta holds values this code never writes")
    return dict(rows)


def _holds_build(db: sqlite3.Connection, build: str) -> bool:
    """The database is of this schema and this build, and answers."""
    try:
        _prepare(db)
        meta = _meta(db)
    except _FAILURES:
        return False
    return meta.get("schema") == SCHEMA_VERSION and meta.get("epoch") == build


def _create_schema(db: sqlite3.Connection, build: str) -> None:
    script = (
        f"BEGIN IMMEDIATE;\n{_SCHEMA}\n"
        f"INSERT INTO meta VALUES ('schema', '{SCHEMA_VERSION}');\n"
        "INSERT INTO meta VALUES ('generation', '1');\n"
        f"INSERT INTO meta VALUES ('epoch', '{build}');\nCOMMIT;"
    )
    try:
        db.executescript(script)
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise


def _empty_in_place(db: sqlite3.Connection, build: str) -> None:
    """Make the database an empty catalog without replacing its file: every other
    connection to it, in any process, goes on through SQLite's own locks and sees the
    change. The schema is forgotten in one transaction (no table is walked, so damaged
    pages are never read) and VACUUM writes the file anew."""
    _prepare(db)
    if db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
        version = int(db.execute("PRAGMA schema_version").fetchone()[0])
        db.execute("PRAGMA writable_schema=ON")
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("DELETE FROM sqlite_master")
                db.execute(f"PRAGMA schema_version={version + 1}")
                db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                raise
        finally:
            db.execute("PRAGMA writable_schema=OFF")
        db.execute("VACUUM")
    _create_schema(db, build)
    if db.execute("PRAGMA quick_check").fetchone() != ("ok",):
        raise CatalogDamage("still damaged after it was emptied")


def _set_aside(path: Path) -> None:
    """Rename the database and its -wal and -shm out of the way (a connection another
    process still holds stays on the renamed file; its inode is not freed for the new
    database to reuse, which would make SQLite take the new file for the one it has)."""
    for suffix in ("-wal", "-shm", ""):
        with contextlib.suppress(FileNotFoundError):
            os.rename(f"{path}{suffix}", f"{path}{SET_ASIDE_SUFFIX}{suffix}")


def _build_at(
    path: Path, lock: _CatalogLock, db: sqlite3.Connection | None
) -> tuple[sqlite3.Connection, str]:
    """An empty catalog at ``path`` (under its lock): the file emptied in place through
    ``db`` when SQLite can, else set aside and made anew. Stamped."""
    build = os.urandom(8).hex()
    try:
        db = db if db is not None else _connect(path)
        db.execute(f"PRAGMA busy_timeout={REBUILD_WAIT_MS}")  # another process holding it: set it aside
        _empty_in_place(db, build)
        db.execute(f"PRAGMA busy_timeout={BUSY_WAIT_MS}")
    except _FAILURES:
        _quietly_close(db)
        _set_aside(path)
        db = _connect(path)
        try:
            _prepare(db)
            _create_schema(db, build)
        except BaseException:
            _quietly_close(db)
            raise
    try:
        db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        lock.write_stamp(_Stamp(build, stat_signature(path.stat())))
    except BaseException:
        _quietly_close(db)
        raise
    return db, build


class _Handle:
    """One open connection to a catalog file (or to memory: ``lock`` None), with the
    build it holds; :meth:`close` copies the log back and stamps the file when it was
    trusted, so that the next process trusts it too."""

    def __init__(
        self, db: sqlite3.Connection, lock: _CatalogLock | None, path: Path | None, build: str, ino: int
    ) -> None:
        self.db = db
        self.lock = lock
        self.path = path
        self.build = build
        self.ino = ino

    def ours(self) -> bool:
        """The file at the path is the one this connection has open."""
        info = _stat(self.path) if self.path is not None else None
        return info is not None and info.st_ino == self.ino

    def checkpoint(self) -> None:
        """Copy the log back into the database, under the lock, and stamp it, if the
        database is still the file the stamp vouches for (else leave it unstamped: the
        next use rebuilds it)."""
        if self.lock is None or self.path is None:
            return
        with self.lock.held():
            stamp = self.lock.stamp()
            if stamp.vouches_for(_stat(self.path)) and self.ours():
                self.db.execute("PRAGMA wal_checkpoint(PASSIVE)")
                self.lock.write_stamp(_Stamp(stamp.build, stat_signature(self.path.stat())))

    def close(self) -> None:
        db = self.db
        if self.lock is None or self.path is None:
            _quietly_close(db)
            return
        try:
            with self.lock.held(timeout=10.0):
                stamp = self.lock.stamp()
                trusted = stamp.vouches_for(_stat(self.path)) and self.ours()
                if trusted:
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)")
                _quietly_close(db)  # the last connection copies the rest back and removes the log
                if trusted:
                    self.lock.write_stamp(_Stamp(stamp.build, stat_signature(self.path.stat())))
        except _FAILURES:
            _quietly_close(db)


def _close_handles(holder: list[_Handle]) -> None:
    for handle in holder:
        handle.close()
    holder.clear()


@dataclass
class _Listed:
    """What a first indexing for the workbench lists (:meth:`Catalog._apply_walk`): the
    rows of sessions and of context files read from their file-level keys, written
    together at its end (:func:`_put_listed`)."""

    sessions: list[tuple[Any, ...]] = field(default_factory=list)
    files: list[tuple[Any, ...]] = field(default_factory=list)
    readers: _Readers | None = None
    """Worker processes listing context files meanwhile (:data:`WORKERS_FROM`)."""
    deferred: list[tuple[str, str, str]] = field(default_factory=list)
    """``(dir, path, signature)`` of each file left to them."""


WORKERS_FROM = 2_000
"""Context files a first indexing for the workbench hands to worker processes
(:mod:`soap_core._list_worker`), from this many on, on a machine of more than one core:
reading and parsing them is most of a first listing, and a worker starts in a few
hundredths of a second. This process reads the sessions' own files meanwhile."""
MAX_WORKERS = 4
_WORKER = str(Path(__file__).with_name("_list_worker.py"))


class _Readers:
    """Worker processes listing context files (:mod:`soap_core._list_worker`): each
    takes every n-th path on its stdin; a thread per worker waits for its output. A
    path one could not list (or every path of one that failed to start or to finish)
    is read by the catalog itself."""

    def __init__(self, paths: list[str], workers: int) -> None:
        self.paths = frozenset(paths)
        self._runs: list[tuple[list[str], subprocess.Popen[bytes], threading.Thread, list[bytes]]] = []
        for part in (paths[i::workers] for i in range(workers)):
            try:
                worker = subprocess.Popen(
                    [sys.executable, "-I", _WORKER],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
            except OSError:
                continue
            output: list[bytes] = []
            given = b"\0".join(os.fsencode(p) for p in part)
            thread = threading.Thread(target=_collect, args=(worker, given, output), daemon=True)
            thread.start()
            self._runs.append((part, worker, thread, output))

    def results(self) -> dict[str, Any]:
        """What each worker listed, by path: its keys as JSON, or None."""
        found: dict[str, Any] = {}
        for part, worker, thread, output in self._runs:
            thread.join()
            if worker.returncode != 0 or not output:
                continue
            lines = output[0].split(b"\n")
            for path, line in zip(part, lines[: len(part)], strict=False):
                with contextlib.suppress(orjson.JSONDecodeError):
                    found[path] = orjson.loads(line)
        return found

    def close(self) -> None:
        """Stop any worker still running (a refresh that failed midway)."""
        for _part, worker, thread, _output in self._runs:
            if worker.poll() is None:
                worker.kill()
            thread.join()


def _collect(worker: subprocess.Popen[bytes], given: bytes, output: list[bytes]) -> None:
    """Hand a worker its paths and keep what it writes (a thread per worker)."""
    with contextlib.suppress(OSError, ValueError):
        output.append(worker.communicate(given)[0])


class Catalog:
    """The index of one store. Open it through :meth:`Store.catalog`.

    Every question goes through :meth:`_run`: the database is first checked against its
    stamp (one ``pread`` and one ``stat``), and a failure of the database while the
    question is asked rebuilds it (or, failing that, moves the catalog to memory) and
    asks again."""

    def __init__(self, layout: StoreLayout, path: Path | None = None) -> None:
        self.layout = layout
        self.config_dir = layout.config_dir
        self.path = path or self._choose_path()
        self._lock = threading.RLock()
        self._roots: list[str] | None = None
        self._depth = 0
        self._holder: list[_Handle] = [self._attach_somewhere()]
        self._finalizer = weakref.finalize(self, _close_handles, self._holder)

    # -- opening --------------------------------------------------------------------------

    def _choose_path(self) -> Path:
        beside = self.config_dir / CATALOG_FILE
        if any(os.path.islink(f"{beside}{suffix}") for suffix in ("", "-wal", "-shm", LOCK_SUFFIX)):
            return cache_catalog_path(self.config_dir)  # a planted link: never written through
        if beside.exists():
            return beside if os.access(beside, os.W_OK) else cache_catalog_path(self.config_dir)
        if self.config_dir.is_dir() and os.access(self.config_dir, os.W_OK):
            return beside
        return cache_catalog_path(self.config_dir)

    @property
    def _handle(self) -> _Handle:
        return self._holder[0]

    @property
    def _db(self) -> sqlite3.Connection:
        return self._holder[0].db

    @property
    def in_memory(self) -> bool:
        """Whether no catalog file could be used, and this one lives in memory."""
        return self._holder[0].lock is None

    def _attach_somewhere(self) -> _Handle:
        """The catalog file chosen, else the one in the user's cache, else memory."""
        cache = cache_catalog_path(self.config_dir)
        for path in dict.fromkeys((self.path, cache)):
            try:
                handle = self._attach(path)
            except _FAILURES:
                continue
            self.path = path
            return handle
        return self._in_memory()

    @staticmethod
    def _attach(path: Path) -> _Handle:
        """A connection to the catalog at ``path``: the file as its stamp vouches for it,
        else an empty catalog built there (under the lock either way)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        if os.path.islink(path):
            raise OSError(f"{path}: a link, not followed")
        lock = _lock_for(path)
        with lock.held():
            stamp = lock.stamp()
            db = _connect(path)
            try:
                if stamp.vouches_for(_stat(path)) and _holds_build(db, stamp.build):
                    build = stamp.build
                else:
                    db, build = _build_at(path, lock, db)
                return _Handle(db, lock, path, build, path.stat().st_ino)
            except BaseException:
                _quietly_close(db)
                raise

    @staticmethod
    def _in_memory() -> _Handle:
        build = os.urandom(8).hex()
        db = _connect(":memory:")
        _create_schema(db, build)
        return _Handle(db, None, None, build, 0)

    def _replace_handle(self, handle: _Handle) -> None:
        old = self._holder[0]
        self._holder[0] = handle
        if old is not handle and old.db is not handle.db:
            old.close()

    # -- keeping it usable ------------------------------------------------------------------

    def _run(self, question: Callable[[], T]) -> T:
        """``question()`` against a catalog that is what this code left and whose
        database works. A failure of the database rebuilds it (refreshed from the
        files) and asks again; a second one, or one a rebuild cannot help, moves the
        catalog to memory; one even there is a StoreError naming the catalog."""
        with self._lock:
            if self._depth:  # inside another question: the outer one recovers
                return question()
            failures = 0
            while True:
                self._depth += 1
                try:
                    self._ensure_current()
                    return question()
                except _Stale:
                    failures += 1
                    if failures > 3:
                        self._recover("damage", failures)
                except Exception as exc:
                    kind = _failure_kind(exc)
                    if kind is None:
                        raise
                    failures += 1
                    self._recover(kind, failures, exc)
                finally:
                    self._depth -= 1

    def _ensure_current(self) -> None:
        """Cheap when nothing happened (one ``pread``, one ``stat``): else catch up with
        another process's rebuild, or rebuild a database changed behind every catalog's
        back (and read the store again into it)."""
        handle = self._handle
        if handle.lock is None or handle.path is None:
            return
        stamp = handle.lock.stamp()
        info = _stat(handle.path)
        if (
            stamp.build == handle.build
            and stamp.vouches_for(info)
            and info is not None
            and info.st_ino == handle.ino
        ):
            return
        if not handle.lock.is_current():  # the lock file itself was deleted or replaced
            self._replace_handle(self._attach_somewhere())
            self._refresh_now(records=True)
            return
        with handle.lock.held():
            stamp = handle.lock.stamp()
            info = _stat(handle.path)
            if stamp.vouches_for(info) and info is not None:
                if stamp.build == handle.build and info.st_ino == handle.ino:
                    return  # a checkpoint of another process was under way
                if info.st_ino == handle.ino:  # emptied in place by another process
                    handle.build = stamp.build
                else:  # built anew by another process
                    self._replace_handle(self._attach(handle.path))
            else:  # changed behind every catalog's back, or deleted
                self._build_in_place_of(handle)
        self._refresh_now(records=True)

    def _recover(self, kind: str, failures: int, exc: BaseException | None = None) -> None:
        """After a failure of the database: wait once for a busy one, rebuild a damaged
        one, else move to memory; each followed by a refresh from the files."""
        if failures <= 4 and not self.in_memory:
            if kind == "busy" and failures == 1:
                return  # another process held it past the timeout: one more wait
            if kind == "damage" and failures == 1:
                with contextlib.suppress(*_FAILURES):
                    self._rebuild()
                    self._refresh_now(records=True)
                    return
            with contextlib.suppress(*_FAILURES):
                self._replace_handle(self._in_memory())
                self._refresh_now(records=True)
                return
        problem = exc or "it kept changing while it was read"
        raise StoreError(self.path, f"the catalog cannot be used, even in memory: {problem}") from None

    def _rebuild(self) -> None:
        """An empty catalog in place of this one, under the lock; if another process
        rebuilt it meanwhile, that one."""
        handle = self._handle
        if handle.lock is None or handle.path is None:
            self._replace_handle(self._in_memory())
            return
        with handle.lock.held():
            stamp = handle.lock.stamp()
            info = _stat(handle.path)
            if stamp.build != handle.build and stamp.vouches_for(info):
                self._replace_handle(self._attach(handle.path))
                return
            self._build_in_place_of(handle)

    def _build_in_place_of(self, handle: _Handle) -> None:
        """An empty catalog where ``handle``'s is (under its lock). This process's own
        connection to the old file is closed first: it would hold the file against being
        emptied."""
        assert handle.lock is not None and handle.path is not None
        handle.close()
        db, build = _build_at(handle.path, handle.lock, None)
        self._holder[0] = _Handle(db, handle.lock, handle.path, build, handle.path.stat().st_ino)

    def close(self) -> None:
        with self._lock:
            self._finalizer()

    @contextlib.contextmanager
    def _write(self, *, checkpoint: bool = True) -> Iterator[sqlite3.Connection]:
        """One write transaction, on the build this catalog last read (another process's
        rebuild since then is caught up with first: :class:`_Stale`); then the log is
        copied back if it grew past :data:`CHECKPOINT_BYTES`, unless not ``checkpoint``
        (the next write does it)."""
        with self._lock:
            handle = self._handle
            db = handle.db
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute("SELECT value FROM meta WHERE key = 'epoch'").fetchone()
                if row is None:
                    raise CatalogDamage("no build id")
                if row[0] != handle.build:
                    raise _Stale()
                yield db
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            if checkpoint:
                self._after_write(handle)

    @staticmethod
    def _after_write(handle: _Handle) -> None:
        if handle.path is None:
            return
        log = _stat(Path(f"{handle.path}-wal"))
        if log is not None and log.st_size > CHECKPOINT_BYTES:
            handle.checkpoint()

    @staticmethod
    def _bump(db: sqlite3.Connection) -> None:
        """Count one change of what the catalog holds (inside a write)."""
        db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")

    @property
    def state(self) -> str:
        """The catalog's identity and generation: changes whenever what it holds does,
        and never repeats across a rebuild (a cache key for pages)."""

        def question() -> str:
            meta = _meta(self._db)
            return f"{meta.get('epoch', '')}:{meta.get('generation', '0')}"

        return self._run(question)

    @property
    def generation(self) -> int:
        """Goes up with every change to what the catalog holds, in any process: a cache
        key for whatever is computed from the store."""
        return self._run(self._generation_now)

    def _generation_now(self) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        if row is None:
            return 0
        if not isinstance(row[0], str) or not row[0].isdigit():
            raise CatalogDamage(f"generation {row[0]!r}")
        return int(row[0])

    def clear(self) -> None:
        """Forget everything (the next refresh reads every file again): the database is
        emptied in place under the lock, as a rebuild does."""
        self._run(self._rebuild)

    # -- walking the store ----------------------------------------------------------------

    def real_roots(self) -> list[str]:
        """The store's folders, symlinks followed (as :meth:`Store.real_roots`); kept for
        one walk."""
        if self._roots is None:
            self._roots = real_folders((self.config_dir, self.layout.agents_dir, self.layout.sessions_dir))
        return self._roots

    def _walk(self, claims: dict[str, InstanceClaim], records: bool) -> list[_Found]:
        """Every session folder with the signatures of its files: one ``scandir`` per
        folder and one ``stat`` per session or context file (strings, not ``Path``
        objects: at 10,000 sessions the walk is the listing's whole cost). A folder that
        is a link leading outside the store is one broken entry, not walked into."""
        self._roots = None
        found: list[_Found] = []
        walk = _FolderWalk(self._run(self._folders), time.time_ns() - SETTLED_FOLDER_NS)
        agents = str(self.layout.agents_dir)
        roles, role_links = _subdirs_and_links(self.layout.agents_dir)
        for role in roles:
            role_dir = os.path.join(agents, role)
            if role in role_links and self._leads_out(role_dir):
                found.append(self._outside(f"{AGENTS_DIR}/{role}", role_dir, "agents", role, None))
                continue
            self._walk_folder(found, role_dir, f"{AGENTS_DIR}/{role}", "agents", records, walk, role=role)
        sessions = str(self.layout.sessions_dir)
        self._walk_folder(found, sessions, SESSIONS_DIR, "sessions", records, walk, claims=claims)
        return found

    def _walk_folder(
        self,
        found: list[_Found],
        folder: str,
        rel_folder: str,
        layout: str,
        records: bool,
        walk: _FolderWalk,
        *,
        role: str | None = None,
        claims: dict[str, InstanceClaim] | None = None,
    ) -> None:
        """The session folders of one role folder (``role``) or of ``sessions/`` (each
        one's role from ``claims``), appended to ``found``: stat-ed from an open
        descriptor of ``folder`` (a path of one or two components instead of seven)."""
        names, links = _subdirs_and_links(Path(folder))
        with _opened_folder(folder) as parent:
            for name in names:
                instance = None
                if role is None:
                    claim = (claims or {}).get(name)
                    session_role, instance = (claim.role, claim.instance) if claim else (UNKNOWN_ROLE, None)
                else:
                    session_role = role
                rel, path = f"{rel_folder}/{name}", f"{folder}/{name}"
                if name in links and self._leads_out(path):
                    found.append(self._outside(rel, path, layout, session_role, instance))
                else:
                    at = (name, parent) if parent is not None else (path, None)
                    found.append(self._found(rel, path, layout, session_role, instance, records, walk, at))

    def _leads_out(self, path: str) -> bool:
        return link_escapes(self.real_roots(), path)

    @staticmethod
    def _outside(rel: str, path: str, layout: str, role: str, instance: str | None) -> _Found:
        """A session (or role) folder that is a link leading outside the store: indexed as
        a broken session whose signature is where the link goes."""
        problem = outside_problem(path, "folder")
        return _Found(rel, path, layout, role, instance, f"outside:{real(path)}", 0, {}, {}, False, problem)

    @staticmethod
    def _found(
        rel: str,
        path: str,
        layout: str,
        role: str,
        instance: str | None,
        records: bool = True,
        walk: _FolderWalk | None = None,
        at: tuple[str, int | None] | None = None,
    ) -> _Found:
        """One session folder with the signatures of its files. A walk remembers each
        folder's own signature (``stat``: size, times, inode) with the names it listed:
        a folder found again at that signature holds the same entries (creating, removing
        or renaming one moves its modification and change times), so its files are
        stat-ed by name without listing it again. Files peteos rewrites in place are
        still stat-ed, each one. Remembered only for a folder whose times are
        :data:`SETTLED_FOLDER_NS` older than the walk: a change in the same tick of the
        file system's clock could leave them as they were.

        ``at``: the folder's name and an open descriptor of its parent, which its stats
        start from (a third less time than a whole path's, at 32,000 stats a listing),
        or the path and None."""
        kept = walk.remembered.get(rel) if walk is not None else None
        at = at or (path, None)
        try:
            folder = os.stat(at[0], dir_fd=at[1]) if walk is not None else None
        except OSError:
            folder = None
        if folder is not None and kept is not None and kept[0] == _signature(folder):
            item = _found_by_names(rel, path, layout, role, instance, records, kept[1], at)
            if item is not None:
                return item
        session_sig, session_mtime = "", 0
        contexts: dict[str, str] = {}
        record_sigs: dict[str, str] = {}
        listed: list[str] = []
        try:
            with os.scandir(path) as scan:
                entries = list(scan)
        except OSError:
            entries, folder = [], None
        temps = [e.name for e in entries if e.name[0] == "." and e.name.endswith(".tmp")]
        if temps:
            sweep_names(path, temps)
            folder = None  # the sweep changed it
        for entry in entries:
            name = entry.name
            try:
                if name.endswith(".json") and name[0] != "." and entry.is_file():
                    info = entry.stat()
                    listed.append(name)
                    if name == SESSION_FILE:
                        session_sig, session_mtime = _signature(info), info.st_mtime_ns
                    else:
                        contexts[name] = _signature(info)
                elif name in (CALLS_DIR, INVOCATIONS_DIR) and entry.is_dir():
                    listed.append(name + "/")
                    if records:
                        record_sigs[name] = _signature(entry.stat())
            except OSError:
                folder = None
                continue  # vanished while we looked: the next walk sees what is there
        remembered = None
        if (
            folder is not None
            and walk is not None
            and max(folder.st_mtime_ns, folder.st_ctime_ns) < walk.settled_before
            and not any("\n" in name for name in listed)
        ):
            remembered = (_signature(folder), "\n".join(listed))
            if remembered == kept:
                remembered = None  # the catalog has it (the folder's files were listed for another reason)
        return _Found(
            rel,
            path,
            layout,
            role,
            instance,
            session_sig,
            session_mtime,
            contexts,
            record_sigs,
            records,
            folder=remembered,
        )

    def refresh(self, *, records: bool = False, counts_behind: bool = False) -> int:
        """Bring the catalog up to date with the files; returns :attr:`generation`.

        ``records=True`` also looks at every session's ``calls/`` and ``invocations/``
        (two more ``stat`` calls a session); listings and lookups do not need them.

        Every figure is complete when it returns, token counts included, unless
        ``counts_behind``: then a refresh that indexes :data:`COUNTS_BEHIND_FROM` or more
        session folders leaves their files' token counts to :meth:`fill_counts` (the
        listing shows no tokens for them until then), as the workbench does for a new
        store, with a thread that fills them in behind."""
        roots = self.real_roots()
        build = self._run(lambda: self._handle.build)  # another process's rebuild: walk again
        unchanged, generation = trust.unchanged_since_walk(roots, records, build)
        if unchanged:  # a file watcher saw nothing happen since the last walk (soap_core._trust)
            done = self.generation
        else:
            claims, _errors = read_instances(self.layout.instances_dir)
            found = self._walk(claims, records)  # stat calls only, outside the lock
            done = self._run(lambda: self._apply_walk(found, counts_behind))
            trust.walked(roots, records, generation, self._handle.build)
        if not counts_behind and self.fill_counts():  # what an earlier refresh left behind
            done = self.generation
        return done

    def _refresh_now(self, *, records: bool) -> int:
        claims, _errors = read_instances(self.layout.instances_dir)
        return self._apply_walk(self._walk(claims, records))

    def _apply_walk(self, found: list[_Found], counts_behind: bool = False) -> int:
        """Read again what the walk found changed, forget what it did not find."""
        with self._lock:
            known = self._known()
            on_disk = {f.rel for f in found}
            changes = [f for f in found if known.differs(f)]
            gone = [d for d in known.sessions if d not in on_disk]
            folders = [(f.rel, *f.folder) for f in found if f.folder is not None]
            if not changes and not gone and not folders:
                return self._generation_now()
            # a new store's first indexing for the workbench lists each file from its
            # file-level keys, into ``listed``, and leaves its messages to fill_counts
            listed = _Listed() if counts_behind and len(changes) >= COUNTS_BEHIND_FROM else None
            if listed is not None and not known.sessions and not known.files:
                listed.readers = _readers_for(changes)
            try:
                return self._apply_changes(changes, gone, folders, known, listed)
            finally:
                if listed is not None and listed.readers is not None:
                    listed.readers.close()

    def _apply_changes(
        self,
        changes: list[_Found],
        gone: list[str],
        folders: list[tuple[str, str, str]],
        known: _Known,
        listed: _Listed | None,
    ) -> int:
        """:meth:`_apply_walk`'s one write."""
        with self._write() as db:
            # an empty catalog, seen inside the write: no row of any file to look up
            # (``known`` was read before it, and another process may have written since)
            empty = db.execute(
                "SELECT NOT EXISTS (SELECT 1 FROM sessions) AND NOT EXISTS (SELECT 1 FROM context_files)"
            ).fetchone()[0]
            # what a listing shows does not change with these: no new generation
            db.executemany("INSERT OR REPLACE INTO folders VALUES (?, ?, ?)", folders)
            changed = bool(gone)
            for rel in gone:
                _delete_session(db, rel)
            progress.report(progress.SESSIONS, 0, len(changes))
            for done, item in enumerate(changes, 1):
                changed = self._index_found(db, item, known, listed, empty) or changed
                progress.report(progress.SESSIONS, done, len(changes))
            if listed is not None:
                self._list_deferred(db, listed)
                _put_listed(db, listed)
            if changed:
                self._bump(db)
        return self._generation_now()

    def _known(self, rel: str | None = None) -> _Known:
        """The signatures the catalog holds (of every session, or of one)."""
        where, params = ("WHERE dir = ?", (rel,)) if rel is not None else ("", ())
        known = _Known({}, {}, {})
        for d, sig in self._db.execute(
            f"SELECT dir, sig || '|' || role || '|' || ifnull(instance, '') FROM sessions {where}", params
        ):
            known.sessions[d] = sig
        for d, f, sig in self._db.execute(f"SELECT dir, file, sig FROM context_files {where}", params):
            known.files.setdefault(d, {})[f] = sig
        for d, k, sig in self._db.execute(f"SELECT dir, kind, sig FROM record_dirs {where}", params):
            known.records[(d, k)] = sig
        return known

    def _folders(self) -> dict[str, tuple[str, str]]:
        """Each session folder's remembered signature and names (``folders``)."""
        return {d: (sig, names) for d, sig, names in self._db.execute("SELECT * FROM folders")}

    def _index_found(
        self,
        db: sqlite3.Connection,
        item: _Found,
        known: _Known,
        listed: _Listed | None = None,
        empty: bool = False,
    ) -> bool:
        """Read again what changed in one session folder, and forget what vanished;
        False when every file read again held what the catalog already had. With
        ``listed``, its rows are listed there (:meth:`_index_context_file`); ``empty``:
        the catalog held no file when this write began (no row is looked up)."""
        changed = False
        if item.outside is not None:
            _delete_messages(db, item.rel)
            for table in ("context_files", "folders", "record_dirs", "calls", "invocations"):
                db.execute(f"DELETE FROM {table} WHERE dir=?", (item.rel,))
            _put_session(db, item, OutsideStoreError(item.path, item.outside))
            return True
        if known.sessions.get(item.rel) != item.session_key:
            changed = self._index_session_file(db, item, not empty, listed)
        files = known.files.get(item.rel, {})
        for name in files.keys() - item.context_sigs.keys():
            _delete_messages(db, item.rel, name)
            db.execute("DELETE FROM context_files WHERE dir=? AND file=?", (item.rel, name))
            changed = True
        for name, sig in item.context_sigs.items():
            if files.get(name) != sig:
                where = os.path.join(item.where, name)
                changed = self._index_context_file(db, item.rel, where, sig, listed, not empty) or changed
        for kind in (CALLS_DIR, INVOCATIONS_DIR) if item.with_records else ():
            record_sig = item.record_sigs.get(kind)
            if known.records.get((item.rel, kind)) != record_sig:
                changed = _index_records(db, item.rel, item.path, kind, record_sig) or changed
        return changed

    def _index_session_file(
        self, db: sqlite3.Connection, item: _Found, known: bool = True, listed: _Listed | None = None
    ) -> bool:
        """Index one session's ``session.json``; with ``listed``, its row waits there
        (:func:`_put_listed`). ``known``: the catalog may hold its row (False: it holds
        none, so none is looked up)."""
        raw, outside = (
            self._read_inside(os.path.join(item.where, SESSION_FILE)) if item.session_sig else (None, False)
        )
        if outside:
            path = item.path / SESSION_FILE
            _put_session(db, item, OutsideStoreError(path, outside_problem(path, SESSION_FILE)))
            return True
        names = (
            item.role.encode("utf-8", "surrogatepass"),
            (item.instance or "").encode("utf-8", "surrogatepass"),
        )
        digest = None if raw is None else _digest(raw, *names)
        row = db.execute("SELECT digest FROM sessions WHERE dir=?", (item.rel,)).fetchone() if known else None
        if digest is not None and row is not None and row[0] == digest:
            db.execute(
                "UPDATE sessions SET sig=?, mtime_ns=? WHERE dir=?",
                (_settled(item.session_sig), item.session_mtime, item.rel),
            )
            return False
        if listed is not None:
            listed.sessions.append(_session_row(item, self._read_session(item, raw), digest))
        else:
            _put_session(db, item, self._read_session(item, raw), digest)
        return True

    @staticmethod
    def _read_session(item: _Found, raw: bytes | None) -> Session | SoapError:
        """What the row of a session is made from (:func:`_session_row`: no number of the
        file, so orjson's reading alone serves where it takes the bytes)."""
        if item.session_sig and raw is not None:
            data = loads_plain(raw)
            if data.__class__ is dict:
                with contextlib.suppress(SoapError):
                    return Session.from_dict(item.role, data)
        path = item.path / SESSION_FILE  # what is wrong, said by the whole reader
        if not item.session_sig or raw is None:
            return StoreError(path, "missing session.json")
        try:
            return Session.from_dict(item.role, parse_json_bytes(path, raw))
        except FormatError as exc:
            return exc.at(path) if exc.path is None else exc
        except SoapError as exc:
            return exc

    def _index_context_file(
        self,
        db: sqlite3.Connection,
        rel: str,
        where: str,
        sig: str,
        listed: _Listed | None = None,
        known: bool = True,
    ) -> bool:
        """Index one context file, its text left to :meth:`fill_text` (the trigram
        index is most of what a first indexing costs). With ``listed``, only what a
        listing shows is taken, from its file-level keys, and appended there for
        :func:`_put_listed` to write: its messages are checked, counted and their rows
        written by :meth:`fill_counts`. False if its bytes are what was indexed before
        (a racy file read again), which then only takes the new signature. ``known``:
        the catalog may hold a row of it (False: it holds none, so none is looked up).
        ``where``: its path."""
        if listed is not None and listed.readers is not None and not known and where in listed.readers.paths:
            listed.deferred.append((rel, where, sig))  # a worker lists it meanwhile
            return True
        raw, outside = self._read_inside(where)
        name = os.path.basename(where)
        row = (
            db.execute("SELECT digest FROM context_files WHERE dir=? AND file=?", (rel, name)).fetchone()
            if known
            else None
        )
        # a file listed first is digested by fill_counts, which reads it again anyway
        digest = None if raw is None or (row is None and listed is not None) else _digest(raw)
        if digest is not None and row is not None and row[0] == digest:
            db.execute("UPDATE context_files SET sig=? WHERE dir=? AND file=?", (_settled(sig), rel, name))
            return False
        if row is not None:  # rows of its bytes before (a new file has none: four queries saved)
            _delete_messages(db, rel, name)
        keys = None if raw is None or listed is None else _listed_keys(keys_of(loads_plain(raw)))
        if keys is not None and listed is not None:
            listed.files.append(_listed_row(rel, name, _settled(sig), keys, digest))
            return True
        path = Path(where)
        try:
            if outside:
                raise OutsideStoreError(path, outside_problem(path, "context file"))
            if raw is None:
                raise StoreError(path, "cannot read: it vanished or is unreadable")
            data = parse_json_bytes(path, raw)
            context = Context.from_dict(data, spanned=None if listed is None else ())  # (): no message read
        except SoapError as exc:
            error = _error_text(exc, path)
            digest = digest if raw is None or digest is not None else _digest(raw)
            db.execute(
                "INSERT OR REPLACE INTO context_files(dir, file, sig, error, digest) VALUES (?, ?, ?, ?, ?)",
                (rel, path.name, _settled(sig), error, digest),
            )
            return True
        if listed is not None:  # JSON only the lenient reader takes, or keys that only look odd
            messages = data.get("messages") or []
            keys = (
                context.id,
                context.origin_context_id,
                context.children,
                len(messages),
                *message_times(messages),
            )
            listed.files.append(_listed_row(rel, name, _settled(sig), keys, digest))
            return True
        counts = self._true_counts(db, context.messages)
        spans = message_spans(raw, len(context.messages)) if len(context.messages) >= SPANNED_FROM else None
        _put_context(db, rel, path.name, sig, context, counts, digest, spans, text_later=True)
        return True

    def _list_deferred(self, db: sqlite3.Connection, listed: _Listed) -> None:
        """List the files left to the workers, from what they found; each one they did
        not list (or whose ids are not names) is read here."""
        readers, listed.readers = listed.readers, None
        if readers is None or not listed.deferred:
            return  # (workers left with nothing to give are stopped by _apply_walk)
        found = readers.results()
        for rel, where, sig in listed.deferred:
            keys = _listed_keys(found.get(where))
            if keys is not None:
                listed.files.append(_listed_row(rel, os.path.basename(where), _settled(sig), keys, None))
            else:
                self._index_context_file(db, rel, where, sig, listed, known=False)
        listed.deferred.clear()

    def _read_inside(self, path: str) -> tuple[bytes | None, bool]:
        """A file's bytes (None if it cannot be read), and whether it is a link leading
        outside the store, then not read: one ``open`` that follows no link, and the
        link's own check (:meth:`_leads_out`) only where it meets one, not an ``lstat``
        of every file a first indexing reads."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                return None, False
            if self._leads_out(path):
                return None, True
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # a link within the store
            except OSError:
                return None, False
        try:
            return read_all(fd), False
        except OSError:
            return None, False
        finally:
            os.close(fd)

    def _true_counts(self, db: sqlite3.Connection, messages: list[Message]) -> list[int]:
        """Each message's true count: from the content-addressed cache where this exact
        text was counted before (a fork's copies, an unchanged message of an edited
        file), encoded otherwise."""
        texts = [message_token_text(m.role, m.raw_content()) for m in messages]
        keys = [_token_key(t) for t in texts]
        known = _cached_counts(db, keys)
        counts: list[int] = []
        new: dict[bytes, int] = {}
        for message, text, key in zip(messages, texts, keys, strict=True):
            count = known.get(key)
            if count is None:
                count = new.get(key)
            if count is None:
                count = count_text(text)
                new[key] = count
            message.set_known_token_count(count)
            counts.append(count)
        db.executemany("INSERT OR IGNORE INTO token_counts VALUES (?, ?)", new.items())
        return counts

    # -- writes through the store ---------------------------------------------------------

    def note_saved(self, session: Session, directory: Path, written: Iterable[Path]) -> None:
        """Index what :meth:`Store.save_session` just wrote into ``directory``, from the
        objects in hand (no file is read again), so this process and the next see it."""
        names = list(written)
        self._run(lambda: self._note_saved_now(session, directory, names))

    def _note_saved_now(self, session: Session, directory: Path, written: Iterable[Path]) -> None:
        rel = self._relative(directory)
        if rel is None:
            return
        written_names = {p.name for p in written}
        by_file = {name: cid for cid, name in session.context_files.items()}
        if self._db.execute("SELECT 1 FROM sessions WHERE dir=?", (rel,)).fetchone() is None:
            self._index_session_dir_now(directory)  # a new session: its files, all of them
            return
        with self._write() as db:
            forks_first = sorted(  # a fork's rows are copied from its parent's before they move
                written_names - {SESSION_FILE},
                key=lambda name: (
                    getattr(session.contexts.get(by_file.get(name, "")), "fork_source", None) is None,
                    name,
                ),
            )
            for name in forks_first:
                context = session.contexts.get(by_file.get(name, ""))
                info = _stat(directory / name)
                if context is None or info is None:
                    continue
                if _forked_rows(db, rel, directory / name, info, context, session.context_files):
                    continue
                if _moved_messages(db, rel, directory / name, info, context):
                    continue
                _delete_messages(db, rel, name)
                counts = [m.count_tokens() for m in context.messages]
                spans, digest = _spans_of(directory / name, info, len(context.messages))
                later = len(context.messages) >= SPANNED_FROM  # a long fork's text: at the next search
                sig = _signature(info)
                _put_context(db, rel, name, sig, context, counts, digest, spans, text_later=later)
            info = _stat(directory / SESSION_FILE)
            if info is not None:
                layout = "sessions" if rel.startswith(f"{SESSIONS_DIR}/") else "agents"
                role, instance = session.role, None
                if layout == "sessions":
                    row = db.execute("SELECT role, instance FROM sessions WHERE dir=?", (rel,)).fetchone()
                    role, instance = row if row else (UNKNOWN_ROLE, None)
                found = _Found(
                    rel, str(directory), layout, role, instance, _signature(info), info.st_mtime_ns, {}, {}
                )
                _put_session(db, found, session)
            self._bump(db)

    def index_session_dir(self, directory: Path) -> None:
        """Index one session folder from its files (a lookup found it on disk)."""
        self._run(lambda: self._index_session_dir_now(directory))

    def _index_session_dir_now(self, directory: Path) -> None:
        rel = self._relative(directory)
        if rel is None:
            return
        layout = "sessions" if rel.startswith(f"{SESSIONS_DIR}/") else "agents"
        if layout == "sessions":
            claims, _errors = read_instances(self.layout.instances_dir)
            claim = claims.get(directory.name)
            role, instance = (claim.role, claim.instance) if claim else (UNKNOWN_ROLE, None)
        else:
            role, instance = directory.parent.name, None
        self._roots = None
        if inside_any(self.real_roots(), directory):
            item = self._found(rel, str(directory), layout, role, instance)
        else:
            item = self._outside(rel, str(directory), layout, role, instance)
        with self._lock:
            known = self._known(rel)
            if not known.differs(item):
                return
            with self._write() as db:
                if self._index_found(db, item, known):
                    self._bump(db)

    def _relative(self, directory: Path) -> str | None:
        try:
            rel = directory.relative_to(self.config_dir).as_posix()
        except ValueError:
            return None
        return rel if rel.startswith((f"{AGENTS_DIR}/", f"{SESSIONS_DIR}/")) else None

    # -- questions ------------------------------------------------------------------------

    def session_rows(self, where: str = "", params: tuple[Any, ...] = ()) -> list[SessionRow]:
        """The sessions (all, or those ``where`` selects), in the listing's order. The
        active context's figures come from the file named after it in the same query;
        only a session whose active file is named otherwise takes a second look."""
        if where:
            return self._run(lambda: self._query_rows(where, params))
        return self._run(lambda: list(self._whole_listing().rows))

    def _query_rows(self, where: str = "", params: tuple[Any, ...] = ()) -> list[SessionRow]:
        query = f"""
            SELECT s.dir, s.layout, s.role, s.instance, s.uuid, s.thread_id, s.is_active,
                   s.active_context_id, s.error,
                   (SELECT count(*) FROM context_files n WHERE n.dir = s.dir),
                   c.file, c.messages, c.tokens, c.first_ts, c.last_ts, c.error
            FROM sessions s LEFT JOIN context_files c
                 ON c.dir = s.dir AND c.file = s.active_context_id || '.json'
            {where} ORDER BY s.sort_key"""
        return [self._row(*row) for row in self._db.execute(query, params).fetchall()]

    def whole_listing(self, shape: Callable[[SessionRow], T]) -> list[T]:
        """Every session's row made into ``shape``'s value (a summary, a listing's row),
        in the listing's order. The values are kept with the rows while the catalog's
        generation stands, per ``shape`` (a function defined once, not a lambda made at
        each call): a long-running process lists 10,000 sessions again without making
        them again (they are to be immutable)."""

        def question() -> list[T]:
            listing = self._whole_listing()
            with _LISTINGS_LOCK:
                shaped = listing.shaped.get(shape)
            if shaped is None:
                shaped = [shape(row) for row in listing.rows]
                with _LISTINGS_LOCK:
                    listing.shaped[shape] = shaped
            return list(shaped)

        return self._run(question)

    def _whole_listing(self) -> _Listing:
        """Every session's row, kept per catalog file for as long as its build and
        generation stand (any change to what it holds moves the generation, in the same
        transaction, in any process): a long-running process lists 10,000 sessions
        without building 10,000 rows again, and a new process reads them from the
        catalog's ``listing`` (one value, where the query and the rows take 50 ms)."""
        handle = self._handle
        key = (handle.build, self._generation_now())
        if handle.path is None:
            return _Listing(key, self._query_rows())  # in memory: kept nowhere
        with _LISTINGS_LOCK:
            kept = _LISTINGS.get(str(handle.path))
        if kept is not None and kept.key == key:
            return kept
        listed = self._kept_listing(key)
        if listed is None:
            listed = self._query_rows()
            self._keep_listing(key, listed)
        kept = _Listing(key, listed)
        with _LISTINGS_LOCK:
            _LISTINGS[str(handle.path)] = kept
        return kept

    def _kept_listing(self, key: tuple[str, int]) -> list[SessionRow] | None:
        """The rows ``listing`` holds for ``key``; None if it holds none for it, or any
        it cannot have written (then the query answers)."""
        row = self._db.execute("SELECT rows FROM listing WHERE key = ?", (f"{key[0]}:{key[1]}",)).fetchone()
        if row is None:
            return None
        try:
            rows = orjson.loads(row[0])
        except orjson.JSONDecodeError:
            return None
        fields = len(SessionRow._fields) - 1
        if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) == fields for r in rows):
            return None
        root = self.config_dir
        return [SessionRow(root, *r) for r in rows]

    def _keep_listing(self, key: tuple[str, int], rows: list[SessionRow]) -> None:
        """``rows``, read after ``key`` was, kept in ``listing`` under it. Rows newer than
        their key are never shown wrong (the generation only goes up: that key is not
        asked for again), but they would replace a listing another process kept for
        the newer generation: kept only while the generation is still ``key``'s. Not
        kept when another process is writing (no wait: the next listing keeps it), when
        the disk is full or the catalog's file cannot be written (the listing is shown
        all the same), nor when a text cannot be JSON (a lone surrogate). The write
        leaves the log as it is (3 MB at 10,000 sessions): the catalog's next write
        copies it back, not a listing."""
        try:
            blob = orjson.dumps([r[1:] for r in rows])
        except orjson.JSONEncodeError:
            return
        db = self._db
        db.execute("PRAGMA busy_timeout = 0")
        try:
            with self._write(checkpoint=False) as written:  # a listing does not wait for a checkpoint
                if self._generation_now() == key[1]:
                    written.execute("DELETE FROM listing")
                    written.execute("INSERT INTO listing VALUES (?, ?)", (f"{key[0]}:{key[1]}", blob))
        except sqlite3.OperationalError as exc:
            if _failure_kind(exc) not in ("busy", "environment"):
                raise  # damage: the catalog is rebuilt (Catalog._run)
        finally:
            db.execute(f"PRAGMA busy_timeout = {BUSY_WAIT_MS}")

    def _row(self, *row: Any) -> SessionRow:
        rel, layout, role, instance, uuid, thread_id, is_active, active, error, files = row[:10]
        file, messages, tokens, first, last, file_error = row[10:]
        figures: tuple[int | None, int | None, str | None, str | None] = (None, None, None, None)
        active_file = active_error = None
        if error is not None:
            pass
        elif file is not None:
            active_file, active_error = (None, file_error) if file_error else (file, None)
            if file_error is None:
                figures = (messages, tokens, first, last)
        else:
            active_file, figures, active_error = self._active_figures(rel, active, uuid or "")
        return SessionRow(
            self.config_dir,
            rel,
            layout,
            role,
            instance,
            uuid,
            thread_id,
            bool(is_active),
            active,
            files,
            error,
            active_file,
            *figures,
            active_error,
        )

    def _active_figures(
        self, rel: str, active: str | None, uuid: str
    ) -> tuple[str | None, tuple[int | None, int | None, str | None, str | None], str | None]:
        """Mirrors :meth:`Store.load_active_context`: the file named after the id (with or
        without a date prefix) first, then any file holding that id."""
        none = (None, None, None, None)
        directory = self.config_dir / rel
        if active is None:
            return None, none, str(ContextNotFoundError(directory, "session has no active context"))
        candidates = self._db.execute(
            """SELECT file, messages, tokens, first_ts, last_ts, error, id FROM context_files
               WHERE dir = ? AND (file = ? OR file LIKE ? ESCAPE '\\' OR id = ?) ORDER BY file""",
            (rel, f"{active}.json", "%-" + _like_escape(active) + ".json", active),
        ).fetchall()
        by_name = [c for c in candidates if c[0] == f"{active}.json"] + sorted(
            (c for c in candidates if c[0] != f"{active}.json" and c[0].endswith(f"-{active}.json")),
            key=lambda c: c[0],
        )
        if by_name:
            file, messages, tokens, first, last, error, _id = by_name[0]
            return (None, none, error) if error else (file, (messages, tokens, first, last), None)
        holding = [c for c in candidates if c[6] == active and c[5] is None]
        if holding:
            file, messages, tokens, first, last, _error, _id = holding[0]
            return file, (messages, tokens, first, last), None
        broken = [
            f
            for (f,) in self._db.execute(
                "SELECT file FROM context_files WHERE dir=? AND error IS NOT NULL", (rel,)
            )
        ]
        for name in broken:
            if active in name:
                error = self._db.execute(
                    "SELECT error FROM context_files WHERE dir=? AND file=?", (rel, name)
                ).fetchone()[0]
                return None, none, error
        problem = f"active context {active} of session {uuid} has no file"
        return None, none, str(ContextNotFoundError(directory / f"{active}.json", problem))

    def _indexed_file(self, directory: Path, file: str, sig: str, columns: str) -> Any:
        """``columns`` of a readable context file's row, if it was indexed at ``sig``."""
        rel = self._relative(directory)
        if rel is None:
            return None
        return self._run(
            lambda: self._db.execute(
                f"SELECT {columns} FROM context_files WHERE dir=? AND file=? AND sig=? AND error IS NULL",
                (rel, file, sig),
            ).fetchone()
        )

    def indexed(self, directory: Path, file: str, sig: str) -> tuple[list[int], array[int] | None] | None:
        """The true counts of a context file's messages and their byte spans (None for a
        small file), if it was indexed at ``sig``."""
        row = self._indexed_file(directory, file, sig, "counts, spans")
        if row is None or row[0] is None:
            return None
        counts, spans = _int_array("i", row[0]), None if row[1] is None else _int_array("q", row[1])
        if counts is None or (row[1] is not None and spans is None):
            self.forget_file(directory, file)  # not what this code writes: read the file
            return None
        return counts.tolist(), spans

    def forget_file(self, directory: Path, file: str) -> None:
        """Stop vouching for one context file (its spans turned out not to frame it): the
        next read parses it whole, the next refresh indexes it again."""
        rel = self._relative(directory)
        if rel is None:
            return

        def forget() -> None:
            with self._write() as db:
                db.execute("UPDATE context_files SET sig = '' WHERE dir=? AND file=?", (rel, file))

        self._run(forget)

    def message_facts(self, directory: Path, file: str, sig: str) -> MessageFacts | None:
        """The :class:`~soap_core._facts.MessageFacts` of a big context file indexed at
        ``sig`` (None if it was not, or is small): one value read, no file."""
        row = self._indexed_file(directory, file, sig, "facts")
        return None if row is None or row[0] is None else decode_facts(row[0])

    def find_dirs(self, ref: str, *, exact_only: bool = False) -> list[Path]:
        """Session folders whose uuid or name is ``ref``, or (if none) starts with it."""

        def question() -> list[Path]:
            exact = self._db.execute(
                "SELECT dir FROM sessions WHERE name = ? OR uuid = ? ORDER BY sort_key", (ref, ref)
            ).fetchall()
            if exact or exact_only:
                return [self.config_dir / d for (d,) in exact]
            prefix = self._db.execute(
                """SELECT dir FROM sessions WHERE substr(name, 1, ?) = ? OR substr(uuid_part, 1, ?) = ?
                   ORDER BY sort_key""",
                (len(ref), ref, len(ref), ref),
            ).fetchall()
            return [self.config_dir / d for (d,) in prefix]

        return self._run(question)

    def thread_sessions(self, role: str, thread_id: str, object_id: str) -> list[Path]:
        """Readable sessions of ``object_id`` for ``thread_id`` (not re-runs), newest first."""
        rows = self._run(
            lambda: self._db.execute(
                """SELECT dir FROM sessions WHERE thread_id = ? AND role = ? AND object_id = ?
                   AND rerun = 0 AND error IS NULL ORDER BY mtime_ns DESC, sort_key""",
                (thread_id, role, object_id),
            ).fetchall()
        )
        return [self.config_dir / d for (d,) in rows]

    def counts_waiting(self) -> int:
        """How many context files wait for their true token counts (a first indexing for
        the workbench leaves them to :meth:`fill_counts`, its messages' rows with them);
        their listing rows show no tokens until then, and a load counts them itself."""
        return int(self._run(lambda: self._db.execute("SELECT count(*) FROM count_backlog").fetchone()[0]))

    def fill_counts(self) -> int:
        """Take the true token counts of every file in the count backlog, reporting
        ``("tokens", done, total)`` files; returns how many files got theirs (or their
        error). A file a first indexing listed unread (``row_backlog``) has its messages
        checked here, and their rows, spans and facts written, as a whole indexing
        writes them; one whose messages do not read takes its error, so the listing
        shows it from then on. As :meth:`fill_text`: files are read, parsed and counted
        outside the catalog's lock and written in batches of :data:`TEXT_BATCH`
        messages, each batch a transaction that moves the generation (a listing then
        shows the new counts); a file that changed since it was indexed is left to the
        refresh that indexes it again. Counts already known by text hash (a fork's
        copies) are not encoded again."""
        waiting = self._run(lambda: self._db.execute(_COUNT_BACKLOG).fetchall())
        if not waiting:
            return 0
        progress.report(progress.TOKENS, 0, len(waiting))
        filled = 0
        batch: list[_Counting] = []
        held = 0
        for done, (rel, file, sig, count, unread) in enumerate(waiting, 1):
            path = self.config_dir / rel / file
            read = None if self._leads_out(str(path)) else _counting(path, rel, sig, count, bool(unread))
            if read is not None:
                batch.append(read)
                held += count
            if done == len(waiting) or held >= TEXT_BATCH:
                filled += self._put_waiting_counts(batch)
                batch, held = [], 0
            progress.report(progress.TOKENS, done, len(waiting))
        return filled

    def _put_waiting_counts(self, batch: list[_Counting]) -> int:
        keys = {_token_key(text): text for item in batch for text in item.texts}
        listed = list(keys)

        known = self._run(lambda: _cached_counts(self._db, listed)) if listed else {}
        new = {key: count_text(text) for key, text in keys.items() if key not in known}  # outside the lock
        counted = known | new

        def put() -> int:
            put = 0
            with self._write() as db:
                db.executemany("INSERT OR IGNORE INTO token_counts VALUES (?, ?)", new.items())
                for item in batch:
                    rel, file = item.rel, item.file
                    row = db.execute(f"{_COUNT_BACKLOG} WHERE b.dir=? AND b.file=?", (rel, file)).fetchone()
                    if row is None or tuple(row[2:]) != (item.sig, item.count, item.unread):
                        continue  # counted meanwhile, or indexed again since it was read
                    put += 1
                    if item.error is not None:  # messages that do not read: as a whole indexing
                        _delete_messages(db, rel, file)
                        db.execute(
                            "INSERT OR REPLACE INTO context_files(dir, file, sig, error, digest) "
                            "VALUES (?, ?, ?, ?, ?)",
                            (rel, file, item.sig, item.error, item.digest),
                        )
                        continue
                    counts = [counted[_token_key(text)] for text in item.texts]
                    if item.context is not None:
                        _put_context(
                            db,
                            rel,
                            file,
                            item.sig,
                            item.context,
                            counts,
                            item.digest,
                            item.spans,
                            text_later=True,
                        )
                        db.execute("DELETE FROM row_backlog WHERE dir=? AND file=?", (rel, file))
                    else:
                        db.execute(
                            "UPDATE context_files SET tokens=?, counts=? WHERE dir=? AND file=?",
                            (sum(counts), array("i", counts).tobytes(), rel, file),
                        )
                        db.executemany(
                            "UPDATE messages SET tokens=? WHERE dir=? AND file=? AND idx=?",
                            ((c, rel, file, i) for i, c in enumerate(counts)),
                        )
                    db.execute("DELETE FROM count_backlog WHERE dir=? AND file=?", (rel, file))
                if put:
                    self._bump(db)
            return put

        return self._run(put)

    def text_waiting(self) -> int:
        """How many context files wait for their text to go into the trigram index (a
        refresh indexes everything else of a file at once and leaves its text to
        :meth:`fill_text`, which every search runs first)."""
        return int(self._run(lambda: self._db.execute("SELECT count(*) FROM text_backlog").fetchone()[0]))

    def fill_text(self) -> int:
        """Put the text of every file in the backlog into the trigram index, reporting
        ``("text", done, total)`` files (:mod:`soap_core._progress`); returns how many
        went in. Files are read and parsed outside the catalog's lock and written in
        batches of :data:`TEXT_BATCH` messages, a transaction each (FTS5 writes a segment
        per transaction: one per file costs twice the indexing), so listings and lookups
        go on meanwhile (a background thread may run this). A file whose signature or
        messages moved since it was indexed is left to the refresh that indexes it
        again (which clears its row)."""
        if self._run(lambda: self._db.execute("SELECT 1 FROM row_backlog LIMIT 1").fetchone()):
            self.fill_counts()  # the rows first: the text goes in by their rowids
        waiting = self._run(lambda: self._db.execute(_BACKLOG).fetchall())
        if not waiting:
            return 0
        progress.report(progress.TEXT, 0, len(waiting))
        filled = 0
        batch: list[tuple[str, str, str, int, dict[int, str]]] = []
        held = 0  # messages in the batch
        for done, (rel, file, sig, count) in enumerate(waiting, 1):
            path = self.config_dir / rel / file
            texts = None if self._leads_out(str(path)) else _texts_of(path, sig, count)
            if texts is not None:
                batch.append((rel, file, sig, count, texts))
                held += len(texts)
            if done == len(waiting) or held >= TEXT_BATCH:
                filled += self._run(functools.partial(self._put_waiting_texts, batch))
                batch, held = [], 0
            progress.report(progress.TEXT, done, len(waiting))
        return filled

    def _put_waiting_texts(self, batch: list[tuple[str, str, str, int, dict[int, str]]]) -> int:
        put = 0
        with self._write() as db:
            for rel, file, sig, count, texts in batch:
                row = db.execute(f"{_BACKLOG} AND b.dir=? AND b.file=?", (rel, file)).fetchone()
                if row is None or tuple(row[2:]) != (sig, count):
                    continue  # filled meanwhile, or indexed again since it was read
                _put_texts(db, rel, file, texts)
                db.execute("DELETE FROM text_backlog WHERE dir=? AND file=?", (rel, file))
                put += 1
        return put

    def search(self, query: str) -> Iterator[CatalogHit]:
        """Messages whose searchable text may contain ``query``, case-insensitively: in
        the listing's order of sessions, the active context's file first, then by file
        and index. Three or more characters use the trigram index; shorter ones read
        every message's text. The caller checks each hit exactly."""
        where = "1"
        params: tuple[str, ...] = ()
        if len(query) >= 3:
            where, params = "message_text MATCH ?", ('"' + query.replace('"', '""') + '"',)
        sql = f"""
            SELECT m.dir, s.role, s.uuid, c.id, m.idx, m.id, m.role, t.text
            FROM message_text t JOIN messages m ON m.rowid = t.rowid
            JOIN sessions s ON s.dir = m.dir
            JOIN context_files c ON c.dir = m.dir AND c.file = m.file
            WHERE {where} AND s.error IS NULL
            ORDER BY s.sort_key, (c.id IS NOT s.active_context_id), m.file, m.idx"""
        self.fill_text()  # outside the lock: a listing in another thread goes on meanwhile
        handed = 0  # hits already yielded: a question asked again after a rebuild skips them
        failures = 0
        while True:
            try:
                with self._lock:
                    self._depth += 1
                    try:
                        self._ensure_current()
                        self.fill_text()
                        cursor = self._db.execute(sql, params)
                        skip = handed
                        while batch := cursor.fetchmany(256):
                            for rel, role, uuid, context_id, idx, message_id, message_role, text in batch:
                                if skip:
                                    skip -= 1
                                    continue
                                hit = CatalogHit(
                                    rel, role, uuid, context_id, int(idx), message_id, message_role, text
                                )
                                handed += 1
                                yield hit
                        return
                    finally:
                        self._depth -= 1
            except Exception as exc:
                kind = "damage" if isinstance(exc, (_Stale, TypeError, ValueError)) else _failure_kind(exc)
                if kind is None:
                    raise
                failures += 1
                with self._lock:
                    self._depth += 1
                    try:
                        self._recover(kind, failures, exc)
                    finally:
                        self._depth -= 1


# -- rows -----------------------------------------------------------------------------------


_BACKLOG = (  # a file whose rows are not written yet waits for them (its text goes in by their rowids)
    "SELECT b.dir, b.file, c.sig, c.messages FROM text_backlog b "
    "JOIN context_files c ON c.dir = b.dir AND c.file = b.file "
    "LEFT JOIN row_backlog r ON r.dir = b.dir AND r.file = b.file WHERE r.dir IS NULL"
)
_COUNT_BACKLOG = (  # the last column: listed unread (its rows are written with its counts)
    "SELECT b.dir, b.file, c.sig, c.messages, r.dir IS NOT NULL FROM count_backlog b "
    "JOIN context_files c ON c.dir = b.dir AND c.file = b.file "
    "LEFT JOIN row_backlog r ON r.dir = b.dir AND r.file = b.file"
)


def _cached_counts(db: sqlite3.Connection, keys: list[bytes]) -> dict[bytes, int]:
    """The counts the content-addressed cache holds for these text keys (500 a query)."""
    known: dict[bytes, int] = {}
    for start in range(0, len(keys), 500):
        chunk = keys[start : start + 500]
        marks = ",".join("?" * len(chunk))
        known.update(db.execute(f"SELECT hash, tokens FROM token_counts WHERE hash IN ({marks})", chunk))
    return known


@dataclass
class _Counting:
    """A file of the count backlog as :meth:`Catalog.fill_counts` read it: its
    messages' token texts and, for a file listed unread, what its rows are written
    from (its messages, digest and spans) or the error its messages make."""

    rel: str
    file: str
    sig: str
    count: int
    unread: bool
    texts: list[str]
    context: Context | None = None
    digest: str | None = None
    spans: array[int] | None = None
    error: str | None = None


def _counting(path: Path, rel: str, sig: str, count: int, unread: bool) -> _Counting | None:
    """What :meth:`Catalog.fill_counts` needs of one waiting file, if it is still the
    file indexed at ``sig`` with ``count`` messages; else None (a refresh indexes it
    again)."""
    if not unread:
        messages = _messages_of(path, sig, count)
        if messages is None:
            return None
        return _Counting(
            rel,
            path.name,
            sig,
            count,
            unread,
            [message_token_text(m.role, m.raw_content()) for m in messages],
        )
    info = _stat(path)
    raw = None if info is None or _signature(info) != sig.removeprefix("racy:") else _read_bytes(path)
    if raw is None:
        return None
    try:
        context = Context.from_dict(parse_json_bytes(path, raw))
    except SoapError as exc:
        return _Counting(
            rel, path.name, sig, count, unread, [], digest=_digest(raw), error=_error_text(exc, path)
        )
    if context.message_count != count:
        return None
    texts = [message_token_text(m.role, m.raw_content()) for m in context.messages]
    spans = message_spans(raw, count) if count >= SPANNED_FROM else None
    return _Counting(rel, path.name, sig, count, unread, texts, context, _digest(raw), spans)


def _error_text(exc: SoapError, path: Path) -> str:
    """What a context file's row says of the error reading it made."""
    return str(exc.at(path) if isinstance(exc, FormatError) and exc.path is None else exc)


def _messages_of(path: Path, sig: str, count: int) -> list[Message] | None:
    """The messages of the context file ``path``, if it is still the file indexed at
    ``sig`` with ``count`` messages; else None."""
    info = _stat(path)
    if info is None or _signature(info) != sig.removeprefix("racy:"):
        return None
    raw = _read_bytes(path)
    try:
        context = Context.from_dict(parse_json_bytes(path, raw)) if raw is not None else None
    except SoapError:
        return None
    if context is None or context.message_count != count:
        return None
    return context.messages


def _texts_of(path: Path, sig: str, count: int) -> dict[int, str] | None:
    """The searchable text of each message of the context file ``path``, by index, if
    it is still the file indexed at ``sig`` with ``count`` messages; else None."""
    messages = _messages_of(path, sig, count)
    if messages is None:
        return None
    return {i: text for i, m in enumerate(messages) if (text := m.searchable_text())}


def _int_array(typecode: str, raw: Any) -> array[int] | None:
    """A BLOB column of integers read back; None if it is not one this code wrote."""
    values = array(typecode)
    if not isinstance(raw, bytes) or len(raw) % values.itemsize:
        return None
    values.frombytes(raw)
    return values


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _spans_of(path: Path, info: os.stat_result, count: int) -> tuple[array[int] | None, str | None]:
    """The message spans of a big context file just written, and the digest of its
    bytes (read back once: the next refresh finds the same bytes and indexes nothing),
    (None, None) for a small one or one that changed since ``info`` was taken."""
    if count < SPANNED_FROM:
        return None, None
    raw = _read_bytes(path)
    after = _stat(path)
    if raw is None or after is None or _signature(after) != _signature(info):
        return None, None
    return message_spans(raw, count), _digest(raw)


_digest = bytes_digest


def _subdirs_and_links(path: Path) -> tuple[list[str], set[str]]:
    """The folders in ``path`` (none if it does not exist), and which of them are links;
    a folder that exists but cannot be listed is an error, not an empty part of the store.
    Leftover temp files of killed writers found here are removed."""
    try:
        with os.scandir(path) as scan:
            entries = list(scan)
    except (FileNotFoundError, NotADirectoryError):
        return [], set()
    except OSError as exc:
        raise StoreError(path, f"cannot list: {exc.strerror}") from exc
    temps = [e.name for e in entries if e.name.startswith(".") and e.name.endswith(".tmp")]
    if temps:
        sweep_names(path, temps)
    dirs = sorted(e.name for e in entries if not e.name.startswith(".") and e.is_dir())
    return dirs, {e.name for e in entries if e.is_symlink()}


@contextlib.contextmanager
def _opened_folder(path: str) -> Iterator[int | None]:
    """A descriptor of the folder ``path`` for the block (None when it cannot be opened:
    the walk then stats by whole paths)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _sort_key(item: _Found) -> str:
    return ("0/" if item.layout == "agents" else "1/") + item.rel.split("/", 1)[1]


def _delete_session(db: sqlite3.Connection, rel: str) -> None:
    _delete_messages(db, rel)
    for table in ("sessions", "context_files", "folders", "record_dirs", "calls", "invocations"):
        db.execute(f"DELETE FROM {table} WHERE dir=?", (rel,))


def _delete_messages(db: sqlite3.Connection, rel: str, file: str | None = None) -> None:
    """The rows of one context file's messages (or a whole session's), and their text:
    the text table is reached through the messages' rowids (an FTS table has no index
    on anything else)."""
    where, params = ("dir=? AND file=?", (rel, file)) if file is not None else ("dir=?", (rel,))
    rowids = db.execute(f"SELECT rowid FROM messages WHERE {where}", params).fetchall()
    waiting = file is not None and db.execute(f"SELECT 1 FROM text_backlog WHERE {where}", params).fetchone()
    if rowids and not waiting:  # by rowid: FTS5 scans its whole table for ``rowid IN (SELECT …)``
        db.executemany("DELETE FROM message_text WHERE rowid=?", rowids)
    if rowids:
        db.execute(f"DELETE FROM messages WHERE {where}", params)
    for backlog in ("text_backlog", "count_backlog", "row_backlog"):
        db.execute(f"DELETE FROM {backlog} WHERE {where}", params)


def _moved_messages(
    db: sqlite3.Connection, rel: str, path: Path, info: os.stat_result, context: Context
) -> bool:
    """Note a file a save wrote around its unchanged messages' bytes (a new ``children``
    entry of a long context): its messages' rows, text, counts and facts stay as they
    are; the file's signature, children, digest and the messages' spans (as the save
    wrote them: the file is not read again) change. False (index it whole) unless the
    row kept is the one of the file as read. The signature taken after the write is
    kept as racy, so the next refresh reads the file once and finds the digest written
    (or another process's bytes)."""
    written = context.written_spans
    if written is None or written[0] is None or context.messages_built:
        return False
    context.written_spans = None
    was, spans, digest = written
    read = context.splice_source()
    moved = None if read is not None and read[1] is spans else spans.tobytes()  # else as they were
    kept = db.execute(
        "UPDATE context_files SET sig=?, children=?, spans=COALESCE(?, spans), digest=? WHERE dir=? AND file=? "
        "AND sig IN (?, ?) AND id=? AND messages=? AND spans IS NOT NULL",
        (
            _settled(_signature(info)),
            json.dumps(context.children),
            moved,
            digest,
            rel,
            path.name,
            was,
            f"racy:{was}",
            context.id,
            context.message_count,
        ),
    )
    return kept.rowcount == 1


def _forked_rows(
    db: sqlite3.Connection,
    rel: str,
    path: Path,
    info: os.stat_result,
    context: Context,
    files: dict[str, str],
) -> bool:
    """Index a new fork's file, written from its parent's messages' bytes
    (:meth:`Context.fork`), from the parent's rows: the messages' rows copied with the
    fork's file and positions, the counts and facts cut from the parent's, the spans and
    digest as the save wrote them, the text left to the next search. False (index it
    whole) unless the fork holds the parent's first messages and the parent's rows are
    those of the file its messages were read from."""
    written, source = context.written_spans, context.fork_source
    if written is None or written[0] is not None or source is None or context.messages_built:
        return False
    context.written_spans = None
    _was, spans, digest = written
    count = len(source.order)
    parent_file = files.get(source.parent_id)
    if not source.is_prefix or source.parent_signature is None or parent_file is None:
        return False
    row = db.execute(
        "SELECT counts, facts FROM context_files WHERE dir=? AND file=? AND sig IN (?, ?) AND id=? "
        "AND messages>=? AND spans IS NOT NULL AND counts IS NOT NULL",
        (
            rel,
            parent_file,
            source.parent_signature,
            f"racy:{source.parent_signature}",
            source.parent_id,
            count,
        ),
    ).fetchone()
    facts = decode_facts(row[1]) if row is not None and row[1] is not None else None
    if row is None or facts is None:
        return False
    counts = array("i")
    counts.frombytes(row[0])
    counts = counts[:count]
    spanned = count >= SPANNED_FROM  # as a refresh indexes it
    _delete_messages(db, rel, path.name)
    copied = db.execute(
        "INSERT INTO messages(dir, file, idx, id, role, tokens, cached_tokens, created, chars) "
        "SELECT dir, ?, idx, id, role, tokens, cached_tokens, created, chars FROM messages "
        "WHERE dir=? AND file=? AND idx<? ORDER BY idx",
        (path.name, rel, parent_file, count),
    ).rowcount
    if copied != count:
        _delete_messages(db, rel, path.name)
        return False
    first, last = db.execute(
        "SELECT min(created), max(created) FROM messages WHERE dir=? AND file=? AND created != ''",
        (rel, path.name),
    ).fetchone()
    db.execute(
        "INSERT OR REPLACE INTO context_files VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            rel,
            path.name,
            _settled(_signature(info)),
            context.id,
            context.origin_context_id,
            json.dumps(context.children),
            count,
            sum(counts),
            first,
            last,
            counts.tobytes(),
            None,
            digest,
            spans.tobytes() if spanned else None,
            encode_facts(prefix_facts(facts, count, source.sequence_numbers)) if spanned else None,
        ),
    )
    db.execute("INSERT OR IGNORE INTO text_backlog VALUES (?, ?)", (rel, path.name))
    return True


def _put_session(
    db: sqlite3.Connection, item: _Found, session: Session | SoapError, digest: str | None = None
) -> None:
    db.execute(
        "INSERT OR REPLACE INTO sessions VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        _session_row(item, session, digest),
    )


def _session_row(item: _Found, session: Session | SoapError, digest: str | None = None) -> tuple[Any, ...]:
    name = item.rel.rsplit("/", 1)[1]
    uuid_part = name[9:] if len(name) > 9 and name[:8].isdigit() and name[8] == "-" else name
    base = (item.rel, _sort_key(item), item.layout, item.role, item.instance, name, uuid_part)
    sig = _settled(item.session_sig)
    if isinstance(session, SoapError):
        return (*base, sig, item.session_mtime, None, None, 0, None, None, 0, str(session), digest)
    object_id = session.state_data.get(OBJECT_KEY)
    return (
        *base,
        sig,
        item.session_mtime,
        session.uuid,
        session.thread_id,
        int(session.is_active),
        session.active_context_id,
        object_id if isinstance(object_id, str) else None,
        int(RERUN_SESSION_KEY in session.state_data),
        None,
        digest,
    )


def _put_context(
    db: sqlite3.Connection,
    rel: str,
    file: str,
    sig: str,
    context: Context,
    counts: list[int] | None,
    digest: str | None = None,
    spans: array[int] | None = None,
    *,
    text_later: bool = False,
) -> None:
    """Index one context file's messages; with ``text_later`` their text waits in the
    backlog for the next search (:meth:`Catalog.search` fills it in first); without
    ``counts`` their token counts wait for :meth:`Catalog.fill_counts`."""
    stamps = sorted(m.creation_timestamp for m in context.messages if m.creation_timestamp)
    db.execute(
        "INSERT OR REPLACE INTO context_files VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            rel,
            file,
            _settled(sig),
            context.id,
            context.origin_context_id,
            json.dumps(context.children),
            len(context.messages),
            None if counts is None else sum(counts),
            stamps[0] if stamps else None,
            stamps[-1] if stamps else None,
            None if counts is None else array("i", counts).tobytes(),
            None,
            digest,
            None if spans is None else spans.tobytes(),
            None if spans is None else encode_facts(facts_of(context.messages)),
        ),
    )
    rows = []
    texts: dict[int, str] = {}
    ascii_only = (rel + file).isascii()
    for index, (message, count) in enumerate(
        zip(
            context.messages,
            counts if counts is not None else repeat(None, len(context.messages)),
            strict=True,
        )
    ):
        text = message.searchable_text()
        created = message.creation_timestamp
        ascii_only = ascii_only and (message.id + message.role + (created or "")).isascii()
        rows.append(
            (
                rel,
                file,
                index,
                message.id,
                message.role,
                count,
                message.token_count,
                created,
                len(text),
            )
        )
        if text:
            texts[index] = text
    insert = sqlite3.Connection.executemany if ascii_only else type(db).executemany  # ASCII needs no check
    insert(
        db,
        "INSERT INTO messages(dir, file, idx, id, role, tokens, cached_tokens, created, chars) "
        "VALUES (?,?,?,?,?,?,?,?,?)",
        rows,
    )
    if counts is None:
        db.execute("INSERT OR IGNORE INTO count_backlog VALUES (?, ?)", (rel, file))
    if text_later:
        db.execute("INSERT OR IGNORE INTO text_backlog VALUES (?, ?)", (rel, file))
        return
    _put_texts(db, rel, file, texts)


_Keys = tuple[str, str | None, list[str], int, str | None, str | None]


def _listed_keys(keys: Any) -> _Keys | None:
    """What :func:`soap_core._list_worker.keys_of` took of a context file (here or in
    a worker, as JSON), when it has their types and its ids are names
    :meth:`Context.from_dict` takes too; None otherwise (the whole reader then says
    what is wrong). The other keys, and the messages themselves, are checked by
    :meth:`Catalog.fill_counts`."""
    if keys.__class__ not in (tuple, list) or len(keys) != 6:  # (a worker's output, read as JSON)
        return None
    context_id, origin, children, count, first, last = keys
    if keys_of({"id": context_id, "origin_context_id": origin, "children": children}) is None:
        return None  # not the types keys_of gives
    if count.__class__ is not int or not all(t is None or t.__class__ is str for t in (first, last)):
        return None
    if identifier_problem(context_id) is not None or (
        origin is not None and identifier_problem(origin) is not None
    ):
        return None
    if any(identifier_problem(c) is not None for c in children):
        return None
    return context_id, origin, children, count, first, last


def _listed_row(rel: str, file: str, sig: str, keys: _Keys, digest: str | None) -> tuple[Any, ...]:
    """A context file's row as listed from its file-level keys (:func:`_listed_keys`).
    The rest of what :func:`_put_context` writes (the messages' checks, rows, counts,
    spans and facts, and the digest of a new file) waits for :meth:`Catalog.fill_counts`."""
    context_id, origin, children, count, first, last = keys
    return (
        rel,
        file,
        sig,
        context_id,
        origin,
        json.dumps(children),
        count,
        None,
        first,
        last,
        None,
        None,
        digest,
    )


def _readers_for(changes: list[_Found]) -> _Readers | None:
    """Workers for the context files of a first indexing (:data:`WORKERS_FROM`)."""
    paths = [os.path.join(f.where, name) for f in changes if f.outside is None for name in f.context_sigs]
    cores = os.cpu_count() or 1
    if len(paths) < WORKERS_FROM or cores < 2 or not sys.executable:  # (an embedded interpreter has none)
        return None
    return _Readers(paths, min(cores, MAX_WORKERS))


def _put_listed(db: sqlite3.Connection, listed: _Listed) -> None:
    """Write what a first indexing listed: its sessions' rows, and its context files'
    (:func:`_listed_row`), each file waiting in the three backlogs."""
    sessions, rows = listed.sessions, listed.files
    texts = "".join(v for row in (*sessions, *rows) for v in row if v.__class__ is str)
    insert = sqlite3.Connection.executemany if texts.isascii() else type(db).executemany  # as _put_context
    insert(db, "INSERT OR REPLACE INTO sessions VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", sessions)
    insert(db, "INSERT OR REPLACE INTO context_files VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,NULL,NULL)", rows)
    files = [(r[0], r[1]) for r in rows]
    for backlog in ("row_backlog", "count_backlog", "text_backlog"):
        insert(db, f"INSERT OR IGNORE INTO {backlog} VALUES (?, ?)", files)


def _put_texts(db: sqlite3.Connection, rel: str, file: str, texts: dict[int, str]) -> None:
    """The searchable text of one file's messages, by index, into the trigram index."""
    rowids = db.execute("SELECT rowid, idx FROM messages WHERE dir=? AND file=?", (rel, file)).fetchall()
    db.executemany(
        "INSERT INTO message_text(rowid, text) VALUES (?, ?)",
        [(rowid, texts[idx]) for rowid, idx in rowids if idx in texts],
    )


def _index_records(db: sqlite3.Connection, rel: str, directory: Path, kind: str, sig: str | None) -> bool:
    """Index one record folder; False when it holds the same files as before (records
    are written once, by rename: the same names are the same records)."""
    table = "calls" if kind == CALLS_DIR else "invocations"
    folder = directory / kind
    names: list[str] = []
    if sig is not None and os.path.islink(folder) and not inside(directory, folder):
        sig = None  # a link leading out of the session: its records are not read
    if sig is not None:
        try:
            with os.scandir(folder) as entries:
                names = sorted(
                    e.name
                    for e in entries
                    if e.name.endswith(".json")
                    and not e.name.startswith(".")
                    and not (e.is_symlink() and not inside(directory, e.path))
                )
        except OSError:
            names = []
    digest = _digest("\n".join(names).encode("utf-8", "surrogatepass")) if sig is not None else None
    row = db.execute("SELECT digest FROM record_dirs WHERE dir=? AND kind=?", (rel, kind)).fetchone()
    if sig is not None and row is not None and row[0] == digest:
        db.execute("UPDATE record_dirs SET sig=? WHERE dir=? AND kind=?", (_settled(sig), rel, kind))
        return False
    db.execute(f"DELETE FROM {table} WHERE dir=?", (rel,))
    db.execute("DELETE FROM record_dirs WHERE dir=? AND kind=?", (rel, kind))
    if sig is None:
        return row is not None
    db.execute("INSERT INTO record_dirs VALUES (?,?,?,?)", (rel, kind, _settled(sig), digest))
    for name in names:
        try:
            data = read_json(folder / name)
            if kind == CALLS_DIR:
                call = CallRecord.from_dict(data, folder / name)
                db.execute(
                    "INSERT OR REPLACE INTO calls VALUES (?,?,?,?,?,?,?,?)",
                    (
                        rel,
                        call.id,
                        call.context_id,
                        call.message_index,
                        call.message_id,
                        call.request_hash,
                        call.invocation_id,
                        call.started_at,
                    ),
                )
            else:
                record = InvocationRecord.from_dict(data, folder / name)
                db.execute(
                    "INSERT OR REPLACE INTO invocations VALUES (?,?,?,?,?,?,?)",
                    (
                        rel,
                        record.id,
                        record.parent_invocation_id,
                        record.callee.session,
                        record.caller.session if record.caller else None,
                        record.started_at,
                        record.outcome,
                    ),
                )
        except SoapError:
            continue  # a broken record is reported where it is read; the index skips it
    return True
