"""The store: a sOAP config dir of either peteos generation (:mod:`soap_core._layout`):
``agents/<role>/<session_uuid>/`` (peteos <= 0.5, our runtime) and
``sessions/<session_uuid>/`` with roles from ``instances/`` (peteos 0.6), both listed.

Each session directory holds ``session.json`` and one file per saved context, named
``<id>.json`` or ``<YYYYMMDD>-<id>.json``; files are keyed by the ``id`` inside them.
A broken file never hides the rest of the store: the listing marks that one session,
and loading a session keeps going past a broken fork.

Listing, lookup and search go through the store's catalog (:mod:`soap_core._catalog`),
which reads only the files that changed since it last looked; :meth:`Store.scan_sessions`
is the same listing from the files alone, and the store falls back to it when no
catalog can be opened.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import random
import re
import sqlite3
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from soap_core._catalog import Catalog, SessionRow, stat_signature
from soap_core._context import Context
from soap_core._errors import (
    AmbiguousSessionError,
    ContextNotFoundError,
    FormatError,
    SessionNotFoundError,
    SoapError,
    StoreError,
)
from soap_core._facts import MessageFacts, facts_of
from soap_core._jsonio import (
    dump_json,
    fingerprint,
    parse_json_bytes,
    read_json,
    syncing,
    write_bytes_atomic,
    write_json_atomic,
)
from soap_core._layout import UNKNOWN_ROLE, InstanceClaim, Layout, locate, read_instances
from soap_core._names import distinct_names, pick_role
from soap_core._paths import (
    OutsideStoreError,
    UnsafeNameError,
    confine,
    is_safe_name,
    link_escapes,
    outside_problem,
    real_folders,
    safe_name,
)
from soap_core._save_plan import FileWrite, checked_against_disk, plan_save, saved
from soap_core._saves import (
    UNKNOWN,
    SaveConflictError,
    SavedBase,
    file_signature,
    read_token,
    save_lock,
    save_lock_path,
)
from soap_core._session import SESSION_FILE as SESSION_FILE
from soap_core._session import Session
from soap_core._spans import SpannedMessages, spliced_parts, without_messages
from soap_core._tempfiles import new_folder, sweep_leftovers

_DATE_PREFIX = re.compile(r"^\d{8}-")
T = TypeVar("T")


@dataclass(frozen=True)
class SessionSummary:
    """What the listing knows from ``session.json`` and the file names alone."""

    role: str
    uuid: str
    path: Path
    thread_id: str | None
    is_active: bool
    active_context_id: str | None
    context_files: int
    error: str | None = None
    layout: Layout = "agents"
    """Which generation's folder the session lives in (``sessions``: peteos 0.6)."""
    instance: str | None = None
    """For a 0.6 session: the name of the instance whose ``thread_store`` claims it."""
    figures: ActiveFigures | None = field(default=None, compare=False)
    """The active context's figures, when the catalog knows them (no file read); a
    cache, so it takes no part in comparing summaries."""

    @property
    def broken(self) -> bool:
        return self.error is not None

    @property
    def ref(self) -> str:
        """``ROLE/FOLDER``: names this session to :meth:`Store.find` even where its uuid or
        folder name is not unique in the store (a copied folder, twin roles)."""
        return f"{self.role}/{self.path.name}"


@dataclass(frozen=True)
class ActiveFigures:
    """What the listing shows of a session's active context, as the catalog indexed it."""

    file: str | None
    messages: int | None
    tokens: int | None
    first_timestamp: str | None
    last_timestamp: str | None
    error: str | None
    """Why the active context cannot be read (as loading it would say), or None."""


def _summary_of(row: SessionRow) -> SessionSummary:
    figures = ActiveFigures(
        row.active_file, row.messages, row.tokens, row.first_timestamp, row.last_timestamp, row.active_error
    )
    return SessionSummary(
        row.role,
        row.uuid if row.uuid is not None else row.name,
        row.dir,
        row.thread_id,
        row.is_active,
        row.active_context_id,
        row.context_files,
        row.error,
        "sessions" if row.layout == "sessions" else "agents",
        row.instance,
        None if row.error else figures,
    )


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise StoreError(path, f"cannot read: {exc.strerror or exc}") from exc


def _parse_context_bytes(
    path: Path, raw: bytes, spans: array[int] | None, on_stale: Callable[[], None] | None = None
) -> tuple[Any, SpannedMessages | None]:
    """The context file's dict, and with ``spans`` (that still frame a ``messages``
    array in ``raw``) its messages apart, unparsed: the dict then has none.

    Spans that do not frame the file (it changed under a signature that could not
    tell) are not used: the whole file is parsed, as without a catalog, and
    ``on_stale`` is called (the catalog stops vouching for it); a message whose span
    turns out not to parse later does the same (:class:`SpannedMessages`). Only a file
    that does not parse whole is reported broken."""
    frames = (
        spans is not None
        and len(spans) >= 2
        and raw[spans[0] : spans[0] + 1] == b"["
        and raw[spans[1] - 1 : spans[1]] == b"]"
    )
    if spans is not None and frames:
        try:
            data = parse_json_bytes(path, without_messages(raw, spans))
        except FormatError:
            data = None
        if isinstance(data, dict) and data.get("messages") == []:
            return data, SpannedMessages(path, raw, spans, on_stale=on_stale)
    if spans is not None and on_stale is not None:
        on_stale()
    return parse_json_bytes(path, raw), None


def _context_paths(session_dir: Path) -> list[Path]:
    """The folder's context files (a link to one, or a dangling link, included), by name:
    one ``scandir``, whose entries know their type without a ``stat``."""
    try:
        with os.scandir(session_dir) as entries:
            names = [
                e.name
                for e in entries
                if e.name.endswith(".json")
                and e.name != SESSION_FILE
                and not e.name.startswith(".")
                and (e.is_file() or e.is_symlink())
            ]
    except OSError:
        return []
    return [session_dir / name for name in sorted(names)]


def _uuid_part(session_uuid: str) -> str:
    return _DATE_PREFIX.sub("", session_uuid)


class Store:
    """A sOAP store: a config dir of either generation, its ``.peteos``, or the ``agents``
    or ``sessions`` folder itself. New sessions of our runtime go to ``agents/<role>/``."""

    def __init__(
        self, config_dir: Path | str, *, use_catalog: bool = True, counts_behind: bool = False
    ) -> None:
        """``counts_behind``: a listing that finds a new store (or one that changed a lot)
        leaves its token counts to :meth:`Catalog.fill_counts` instead of taking them
        first (``Catalog.refresh``); for a process that fills them in behind (the
        workbench). Everything else gets complete figures."""
        self.counts_behind = counts_behind
        self.root = Path(config_dir)
        self.layout = locate(self.root)
        self.agents_dir = self.layout.agents_dir
        self.sessions_dir = self.layout.sessions_dir
        self._use_catalog = use_catalog and not os.environ.get("SOAPWB_NO_CATALOG")
        self._catalog: Catalog | None = None
        self._held = threading.local()  # the roots one load resolved (_roots_once)

    def catalog(self) -> Catalog | None:
        """The store's catalog, opened on first use; None if it cannot be (then every
        question is answered from the files)."""
        if self._catalog is None and self._use_catalog and self.root.is_dir():
            try:  # a damaged or unwritable catalog is rebuilt, moved or kept in memory by Catalog
                self._catalog = Catalog(self.layout)
            except (OSError, sqlite3.Error, ValueError, SoapError):
                self._use_catalog = False
        return self._catalog

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    def session_dir(self, role: str, session_uuid: str) -> Path:
        """Where our runtime creates a session (the ``agents`` layout it always wrote);
        UnsafeNameError for a role or uuid that is not a plain name."""
        safe_name(role, "role", self.agents_dir)
        safe_name(session_uuid, "session uuid", self.agents_dir / role)
        return self.agents_dir / role / session_uuid

    def folder_of(self, session: Session) -> Path:
        """The folder ``session`` was read from, else the one a save creates for it."""
        return session.directory or self.session_dir(session.role, session.uuid)

    def real_roots(self) -> list[str]:
        """The store's folders with symlinks followed: a path is inside the store when it
        leads into one of them (the config dir, ``agents``, ``sessions``, wherever the
        user put them)."""
        held: list[str] | None = getattr(self._held, "roots", None)
        if held is not None:
            return held
        return real_folders((self.layout.config_dir, self.agents_dir, self.sessions_dir))

    @contextlib.contextmanager
    def _roots_once(self) -> Iterator[None]:
        """The store's folders resolved once for the block's confines, in this thread (a
        load confines its folder and each file: three ``stat`` calls each otherwise)."""
        if getattr(self._held, "roots", None) is not None:
            yield
            return
        self._held.roots = self.real_roots()
        try:
            yield
        finally:
            self._held.roots = None

    def confine(self, path: Path, what: str = "path") -> Path:
        """``path`` if it leads inside the store; OutsideStoreError (not followed) if not."""
        return confine(self.real_roots(), path, what)

    def roles(self) -> list[str]:
        """The role folders, a link leading outside the store included (the listing marks
        it broken, and nothing reads through it)."""
        if not self.agents_dir.is_dir():
            return []
        return sorted(p.name for p in self.agents_dir.iterdir() if p.is_dir() and not p.name.startswith("."))

    def _escapes(self, path: Path) -> str | None:
        """Why a role or session folder is not followed, or None (it stays inside)."""
        return outside_problem(path, "folder") if link_escapes(self.real_roots(), path) else None

    def instance_claims(self) -> dict[str, InstanceClaim]:
        """Session uuid -> the 0.6 instance that claims it (every instance file read once)."""
        return read_instances(self.layout.instances_dir)[0]

    def instance_problems(self) -> list[SoapError]:
        """The 0.6 instance files that cannot be read: the sessions they would claim are
        listed with :data:`UNKNOWN_ROLE`, and this says why."""
        return read_instances(self.layout.instances_dir)[1]

    def session_parent_dirs(self) -> list[Path]:
        """The folders whose entries are session folders: each role folder, ``sessions``."""
        parents = [self.agents_dir / role for role in self.roles()]
        return [*parents, self.sessions_dir] if self.sessions_dir.is_dir() else parents

    def _session_dirs(self) -> list[tuple[str, Path, Layout, str | None]]:
        """(role, folder, layout, instance) of every session folder; a role or session
        folder that is a link leading outside the store is listed itself (and reported
        broken by :meth:`_summary`), never listed through."""
        if not self.root.is_dir():
            raise StoreError(self.root, "no such store directory")
        sweep_leftovers(self.agents_dir)
        try:
            found: list[tuple[str, Path, Layout, str | None]] = []
            for role in self.roles():
                role_dir = self.agents_dir / role
                if self._escapes(role_dir):
                    found.append((role, role_dir, "agents", None))
                    continue
                sweep_leftovers(role_dir)
                found += [
                    (role, path, "agents", None)
                    for path in sorted(role_dir.iterdir())
                    if path.is_dir() and not path.name.startswith(".")
                ]
            if self.sessions_dir.is_dir():
                claims = self.instance_claims()
                for path in sorted(self.sessions_dir.iterdir()):
                    if path.is_dir() and not path.name.startswith("."):
                        claim = claims.get(path.name)
                        role = claim.role if claim else UNKNOWN_ROLE
                        found.append((role, path, "sessions", claim.instance if claim else None))
        except OSError as exc:
            raise StoreError(exc.filename or self.root, f"cannot list: {exc.strerror}") from exc
        return found

    # -- listing ------------------------------------------------------------------------

    def sessions(self) -> list[SessionSummary]:
        """Every session of every role; broken ones marked. Through the catalog, which
        first reads what changed on disk."""
        summaries = self.listing(_summary_of)
        return self.scan_sessions() if summaries is None else summaries

    def listing(self, shape: Callable[[SessionRow], T], *, refresh: bool = True) -> list[T] | None:
        """Each session's catalog row made into ``shape``'s value, in the listing's order,
        once the catalog has read what changed on disk (:meth:`Catalog.whole_listing`:
        kept while nothing changes); None for a store without a catalog
        (:meth:`scan_sessions` is then the listing). What :meth:`sessions` and
        :func:`~soap_core.session_overviews` are made from. ``refresh=False``: the
        caller has just refreshed the catalog (a page that took the store's state), so
        the rows are read as they are: a walk of a store nobody watches yet costs a
        quarter of a second at 10,000 sessions."""
        catalog = self.catalog()
        if catalog is None:
            return None
        if not self.root.is_dir():
            raise StoreError(self.root, "no such store directory")
        if refresh:
            catalog.refresh(counts_behind=self.counts_behind)
        return catalog.whole_listing(shape)

    def scan_sessions(self) -> list[SessionSummary]:
        """The listing from the files alone (``session.json`` of every session)."""
        return [self._summary(*found) for found in self._session_dirs()]

    def _summary(self, role: str, path: Path, layout: Layout, instance: str | None) -> SessionSummary:
        problem = self._escapes(path)
        if problem is not None:
            error = str(OutsideStoreError(path, problem))
            return SessionSummary(role, path.name, path, None, False, None, 0, error, layout, instance)
        sweep_leftovers(path)
        files = len(_context_paths(path))
        try:
            session = self.read_session_file(role, path)
        except SoapError as exc:
            return SessionSummary(role, path.name, path, None, False, None, files, str(exc), layout, instance)
        return SessionSummary(
            role,
            session.uuid,
            path,
            session.thread_id,
            session.is_active,
            session.active_context_id,
            files,
            None,
            layout,
            instance,
        )

    def find(self, ref: str) -> SessionSummary:
        """The session whose uuid is ``ref``, or starts with it (with or without the date).

        ``ROLE/UUID`` (or ``ROLE/PREFIX``, ``ROLE/FOLDER``) looks among that role's
        sessions only: the way to name a session whose uuid is not unique (a copied
        folder, twin role names). ROLE must be one of the store's roles, as typed, as the
        text output shows it (escapes read back: ``Cafe\\u0301``), or the only role equal
        to it in another Unicode normalization; it is compared with the roles, never
        joined to a path, and anything else is refused like a path.

        A full uuid or folder name is looked up in the catalog and only that session's
        files are checked; a prefix, or a name the catalog does not know yet, refreshes
        the catalog first (a new session of another process, a copied folder)."""
        role: str | None = None
        spelled, slash, name = ref.partition("/")
        if slash:
            if not is_safe_name(name):
                safe_name(name, "session", self.root)  # one plain name after the role
            roles = set(self.roles())
            if self.sessions_dir.is_dir():
                roles.update({claim.role for claim in self.instance_claims().values()}, {UNKNOWN_ROLE})
            role = pick_role(spelled, roles)
            if role is None:
                raise UnsafeNameError(
                    self.root,
                    f"session {ref!r}: {spelled!r} is not a role of this store: refused "
                    "(a session is a uuid, a prefix of one, or ROLE/UUID)",
                )
            ref = name
        elif ref and not is_safe_name(ref):
            safe_name(ref, "session", self.root)  # a uuid or a prefix of one: never a path
        catalog = self.catalog()
        if catalog is None:
            return self._resolve(ref, [s for s in self.scan_sessions() if role in (None, s.role)], role)
        if not self.root.is_dir():
            raise StoreError(self.root, "no such store directory")
        for directory in self._direct_candidates(catalog, ref):
            catalog.index_session_dir(directory)
        where, params = "WHERE (s.name = ? OR s.uuid = ?)", [ref, ref]
        if role is not None:
            where, params = f"{where} AND s.role = ?", [ref, ref, role]
        rows = [r for r in catalog.session_rows(where, tuple(params)) if r.dir.is_dir()]
        if len(rows) != 1:
            catalog.refresh(counts_behind=self.counts_behind)
            rows = [r for r in catalog.session_rows() if role in (None, r.role)]
            return self._resolve(ref, [_summary_of(r) for r in rows], role)
        return _summary_of(rows[0])

    def ref_for(self, directory: Path) -> str:
        """What names the session folder ``directory`` to :meth:`find` alone: ``ROLE/FOLDER``
        for a folder of ``agents/<role>/``, the folder's name for a 0.6 session."""
        if directory.parent.parent == self.agents_dir:
            return f"{directory.parent.name}/{directory.name}"
        return directory.name

    def _direct_candidates(self, catalog: Catalog, ref: str) -> list[Path]:
        """The folders ``ref`` names exactly: known to the catalog, or present on disk."""
        if not ref or "/" in ref or "\\" in ref or ref in (".", ".."):
            return []
        known = [d for d in catalog.find_dirs(ref, exact_only=True) if d.is_dir()]
        if known:
            return known
        roles = [r for r in self.roles() if not self._escapes(self.agents_dir / r)]
        on_disk = [self.agents_dir / role / ref for role in roles] + [self.sessions_dir / ref]
        return [d for d in on_disk if d.is_dir()]

    def _resolve(self, ref: str, candidates: list[SessionSummary], role: str | None = None) -> SessionSummary:
        """The one of ``candidates`` (one role's sessions, given ``role``) that ``ref``
        names; an ambiguity lists the sessions as the ``ROLE/FOLDER`` forms that name
        each of them alone (twin role names shown apart)."""
        if role is not None:  # a folder name is unique within a role, whatever the uuids inside
            named = [s for s in candidates if s.path.name == ref]
            if len(named) == 1:
                return named[0]
        exact = [s for s in candidates if ref in (s.uuid, s.path.name)]
        if len(exact) == 1:
            return exact[0]
        matches = exact or [
            s for s in candidates if s.path.name.startswith(ref) or _uuid_part(s.path.name).startswith(ref)
        ]
        if len(matches) == 1:
            return matches[0]
        shown = distinct_names([s.role for s in candidates] + ([role] if role is not None else []))
        if not matches:
            where = f" of role {shown[role]}" if role is not None else ""
            raise SessionNotFoundError(self.root, f"no session{where} matches {ref!r}")
        forms = [f"{shown[s.role]}/{s.path.name}" for s in matches[:5]]
        more = f" and {len(matches) - 5} more" if len(matches) > 5 else ""
        raise AmbiguousSessionError(
            self.root,
            f"{ref!r} matches {len(matches)} sessions: {', '.join(forms)}{more}; "
            f"name one as ROLE/UUID as listed here (e.g. {forms[0]})",
        )

    # -- loading ------------------------------------------------------------------------

    def read_session_file(self, role: str, path: Path) -> Session:
        """Only ``session.json`` of the session folder ``path`` (no contexts); a folder
        or file leading outside the store is OutsideStoreError, never read."""
        session_file = path / SESSION_FILE
        self.confine(session_file, "session.json")
        if not session_file.is_file():
            raise StoreError(session_file, "missing session.json")
        try:
            return Session.from_dict(role, read_json(session_file))
        except FormatError as exc:
            raise exc.at(session_file) if exc.path is None else exc from None

    def read_context(self, path: Path) -> Context:
        """One context file; FormatError names the file and the JSON path of the fault.

        The true token counts come from the catalog when it indexed this very file
        (same signature before and after the read), so a warm load encodes nothing; for a
        big file it also has each message's byte span, and only the rest of the file is
        parsed now (soap_core._spans: a message is parsed when first asked for). Spans
        that turn out not to frame the file are dropped with the counts, and the catalog
        stops vouching for it: an intact file is never reported broken."""
        self.confine(path, "context file")
        before = _signature_of(path)
        catalog = self._catalog
        indexed = None
        if catalog is not None and before is not None:
            indexed = catalog.indexed(path.parent, path.name, before)
        try:
            if indexed is None:
                data, spanned = read_json(path), None
            else:
                raw = _read_bytes(path)
                if _signature_of(path) != before:
                    indexed = None  # changed while read: check it all
                spans = None if indexed is None else indexed[1]
                stale = None
                if catalog is not None:  # a span that does not frame the file: stop vouching for it
                    stale = functools.partial(catalog.forget_file, path.parent, path.name)
                data, spanned = _parse_context_bytes(path, raw, spans, stale)
                if spans is not None and spanned is None:
                    indexed = None  # the spans did not frame it: neither they nor the counts hold
            counts = None if indexed is None else indexed[0]
            context = Context.from_dict(data, known_token_counts=counts, spanned=spanned)
        except FormatError as exc:
            raise exc.at(path) if exc.path is None else exc from None
        if spanned is not None:
            data["messages"] = spanned
        if context.messages_built:
            context.saved_fingerprint = fingerprint([str(path), data])
        else:
            context.remember_read_as(str(path), data, before)
        return context

    def message_facts(self, context: Context) -> MessageFacts:
        """The :class:`~soap_core._facts.MessageFacts` of ``context``'s messages: from the
        catalog while they are unbuilt (no message is built), else from the messages."""
        read = context.read_signature
        catalog = self.catalog() if read is not None else None
        if read is not None and catalog is not None:
            path = Path(read[0])
            facts = catalog.message_facts(path.parent, path.name, read[1])
            if facts is not None and len(facts) == context.message_count:
                return facts
        return facts_of(context.messages)

    def load_session(self, ref: str, *, require_active: bool = True) -> Session:
        """The session ``ref`` (uuid or unique prefix) with every readable context.

        Unreadable context files are kept in ``session.load_errors``; if the active
        context is among them (or has no file) this raises, unless ``require_active``
        is False.
        """
        summary = self.find(ref)
        with self._roots_once():
            return self._load_found(summary, require_active)

    def _load_found(self, summary: SessionSummary, require_active: bool) -> Session:
        self.catalog()  # token counts come from it
        self.confine(summary.path, "session folder")
        token = read_token(save_lock_path(self.layout.config_dir, summary.path))  # before the files
        session_signature = file_signature(summary.path / SESSION_FILE)
        session = self.read_session_file(summary.role, summary.path)
        session.directory = summary.path
        session.layout = summary.layout
        base = SavedBase(token, {SESSION_FILE: session_signature or UNKNOWN}, session.to_dict())
        for path in _context_paths(summary.path):
            signature = file_signature(path)  # before the read: a change after it is seen
            try:
                context = self.read_context(path)
            except SoapError as exc:
                session.load_errors[path.name] = exc
                continue
            if context.id in session.contexts:
                first = session.context_files[context.id]
                session.load_errors[path.name] = FormatError(
                    path, "$.id", f"duplicate context id, also in {first}"
                )
                continue
            session.contexts[context.id] = context
            session.context_files[context.id] = path.name
            context.saved_children = tuple(context.children)
            base.signatures[path.name] = signature or UNKNOWN
        session.base = base
        if require_active:
            self._check_active(session, summary.path)
        return session

    def _check_active(self, session: Session, path: Path) -> None:
        active = session.active_context_id
        if active is None or active in session.contexts:
            return
        for name, error in session.load_errors.items():
            if active in name:
                raise error
        raise ContextNotFoundError(
            path / f"{active}.json", f"active context {active} of session {session.uuid} has no file"
        )

    def load_active_context(self, summary: SessionSummary) -> Context:
        """Only the active context of a listed session (cheaper than the whole session)."""
        active = summary.active_context_id
        if summary.error is not None:
            raise StoreError(summary.path, summary.error)
        if active is None:
            raise ContextNotFoundError(summary.path, "session has no active context")
        safe_name(active, "active_context_id", summary.path / SESSION_FILE)
        if summary.figures is not None and summary.figures.file is not None:
            path = summary.path / summary.figures.file
            if path.is_file():
                return self.read_context(path)
        for path in (summary.path / f"{active}.json", *summary.path.glob(f"*-{glob.escape(active)}.json")):
            if path.is_file():
                return self.read_context(path)
        return self.load_session(summary.ref).active_context

    def load_context(self, ref: str, context_ref: str | None = None) -> tuple[Session, Context]:
        """One context of the session ``ref`` (uuid or unique prefix): ``context_ref`` (id
        or unique id prefix), else the active one; it raises what ``load_session`` then
        ``session.context`` (or ``active_context``) would.

        The catalog knows which file holds which context id, so this reads
        ``session.json`` and that one file whatever the size of the session (``show`` of
        a session of 30,000 contexts read them all: 11.4 s). The session comes back for
        reading only: it holds no context, and its ``load_errors`` name the session's
        unreadable files as the catalog found them. Without a catalog, or when a file no
        longer holds the id it did, the whole session is read, and comes back whole."""
        summary = self.find(ref)
        catalog = self.catalog()
        self.confine(summary.path, "session folder")

        def whole() -> tuple[Session, Context]:
            session = self.load_session(ref, require_active=context_ref is None)
            return session, session.context(context_ref) if context_ref else session.active_context

        rel = catalog._relative(summary.path) if catalog is not None else None
        if catalog is None or rel is None:
            return whole()
        try:
            with catalog._lock:
                files: list[tuple[str, str | None, str | None]] = catalog._db.execute(
                    "SELECT file, id, error FROM context_files WHERE dir=? ORDER BY file", (rel,)
                ).fetchall()
        except (sqlite3.Error, OSError, ValueError):
            return whole()
        token = read_token(save_lock_path(self.layout.config_dir, summary.path))
        signature = file_signature(summary.path / SESSION_FILE)
        session = self.read_session_file(summary.role, summary.path)
        session.directory = summary.path
        session.layout = summary.layout
        session.base = SavedBase(token, {SESSION_FILE: signature or UNKNOWN}, session.to_dict())
        holders: dict[str, str] = {}  # context id -> the first file holding it
        for name, context_id, error in files:
            if error is not None or context_id is None:
                session.load_errors[name] = SoapError(error or "not indexed")
            elif context_id in holders:
                problem = f"duplicate context id, also in {holders[context_id]}"
                session.load_errors[name] = FormatError(summary.path / name, "$.id", problem)
            else:
                holders[context_id] = name
        wanted = context_ref or session.active_context_id
        if context_ref and context_ref not in holders:
            matches = [cid for cid in holders if cid.startswith(context_ref)]
            if len(matches) != 1:
                problem = "matches several contexts" if matches else "no such context in this session"
                raise ContextNotFoundError(summary.path, f"context {context_ref!r}: {problem}")
            wanted = matches[0]
        if wanted is None:
            raise ContextNotFoundError(session.session_file, "session has no active context")
        if wanted not in holders:  # the active context has no readable file
            for name in session.load_errors:
                if wanted in name:
                    self.read_context(summary.path / name)  # raises what loading the session would
            problem = f"active context {wanted} of session {session.uuid} has no file"
            raise ContextNotFoundError(summary.path / f"{wanted}.json", problem)
        context = self.read_context(summary.path / holders[wanted])
        return (session, context) if context.id == wanted else whole()

    # -- saving -------------------------------------------------------------------------

    def save_session(self, session: Session) -> list[Path]:
        """Write the session's contexts, then ``session.json``; return the files written.

        A loaded session goes back to the folder it came from (even if that folder was
        copied under another name). Files whose content is unchanged are not touched,
        and files that failed to load are never overwritten. Another process's save
        since this session was loaded is never undone: under the session's save lock,
        each file is compared with what was read, merged where the two saves changed
        different things (new forks, new children, other keys of ``session.json``), and
        anything else is a :class:`SaveConflictError` naming the file, raised before a
        byte is written (:mod:`soap_core._saves`). Each file is replaced atomically, and
        a new session's folder appears whole (written beside it, then renamed), so a
        crash never leaves a session folder without its ``session.json``. A folder or
        file that leads outside the store is refused (OutsideStoreError), never written
        through.
        """
        directory = self.folder_of(session)
        roots = self.real_roots()
        confine(roots, directory, "session folder")
        for name in (SESSION_FILE, *session.context_files.values()):
            if link_escapes(roots, directory / name):
                raise OutsideStoreError(directory / name, outside_problem(directory / name, name))
        plans: list[FileWrite] | None = None
        if not os.path.lexists(directory):  # a new session appears whole or not at all
            try:
                with new_folder(directory, sync=syncing()) as staging:
                    plans = plan_save(session, directory, staging)
                    written = self._write_planned(plans, directory, staging)
                    saved(session, plans, staging, "")
            except FileExistsError:
                plans = None  # another process made it meanwhile: saved into like any other
        if plans is None:
            plans = plan_save(session, directory, directory)
            if not plans:
                return []  # nothing changed: not even the lock is taken
            with save_lock(save_lock_path(self.layout.config_dir, directory)) as lock:
                plans = checked_against_disk(plans, session, directory, lock.token)
                written = self._write_planned(plans, directory, directory, lock.replace_token)
                saved(session, plans, directory, lock.token)
        catalog = self.catalog()
        if catalog is not None and written:
            if any(p.on_disk_only or p.header is not None for p in plans):
                catalog.index_session_dir(directory)  # the files hold more than memory does
            else:
                catalog.note_saved(session, directory, written)
        return written

    def update_session(self, ref: str, change: Callable[[Session], T], *, attempts: int = 50) -> T:
        """Load the session ``ref``, apply ``change`` to it and save it; on a
        :class:`SaveConflictError` (another process saved the same part meanwhile), load
        it again and apply ``change`` again, up to ``attempts`` times. ``change``'s
        result is returned."""
        for attempt in range(attempts):
            session = self.load_session(ref, require_active=False)
            result = change(session)
            try:
                self.save_session(session)
            except SaveConflictError:
                if attempt + 1 == attempts:
                    raise
                time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 20)))
                continue
            return result
        raise AssertionError("unreachable")

    @staticmethod
    def _write_planned(
        plans: list[FileWrite], directory: Path, folder: Path, new_token: Callable[[], object] | None = None
    ) -> list[Path]:
        """Write the planned files into ``folder`` (contexts first, ``session.json``
        last); the files written, as paths in ``directory``. ``new_token`` runs once,
        before the first file that is replaced: a save that changes no file leaves the
        save token as it was."""
        written: list[Path] = []
        token_replaced = new_token is None

        def first_write() -> None:
            nonlocal token_replaced
            if not token_replaced and new_token is not None:
                new_token()
                token_replaced = True

        for plan in plans:
            if plan.already_there:
                continue
            if plan.splice is not None:
                _write_spliced(folder / plan.name, plan, first_write)
                written.append(directory / plan.name)
            elif write_json_atomic(folder / plan.name, plan.value, first_write):
                written.append(directory / plan.name)
        return written


def _write_spliced(path: Path, plan: FileWrite, before_write: Callable[[], None]) -> None:
    """Write a context file as its rest dumped around its unchanged messages' bytes: the
    text ``json.dumps(indent=2)`` of the whole dict gives, at the cost of the rest (the
    plan knows it differs from the file's), the messages' bytes written from where they
    lie, never copied. A rest without its ``messages`` key (never seen) is dumped whole."""
    assert plan.splice is not None
    region, spans = plan.splice
    parts = spliced_parts(dump_json(plan.value), spans)
    if parts is None:
        plan.whole()
        write_json_atomic(path, plan.value, before_write)
        return
    head, tail, written_spans = parts
    before_write()
    plan.written_digest = write_bytes_atomic(path, [head, region, tail])
    plan.written_spans = written_spans


def _signature_of(path: Path) -> str | None:
    """The signature the catalog indexes a file at (with the change time: an in-place
    rewrite that restores the modification time is still seen)."""
    try:
        info = path.stat()
    except OSError:
        return None
    return stat_signature(info)
