"""The store: a sOAP config dir of either peteos generation (:mod:`soap_core._layout`):
``agents/<role>/<session_uuid>/`` (peteos <= 0.5, our runtime) and
``sessions/<session_uuid>/`` with roles from ``instances/`` (peteos 0.6), both listed.

Each session directory holds ``session.json`` and one file per saved context, named
``<id>.json`` or ``<YYYYMMDD>-<id>.json``; files are keyed by the ``id`` inside them.
Listing reads only ``session.json`` files. A broken file never hides the rest of the
store: the listing marks that one session, and loading a session keeps going past a
broken fork.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from soap_core._context import Context
from soap_core._errors import (
    AmbiguousSessionError,
    ContextNotFoundError,
    FormatError,
    SessionNotFoundError,
    SoapError,
    StoreError,
)
from soap_core._jsonio import read_json, write_json_atomic
from soap_core._layout import UNKNOWN_ROLE, InstanceClaim, Layout, locate, read_instances
from soap_core._session import Session

SESSION_FILE = "session.json"
_DATE_PREFIX = re.compile(r"^\d{8}-")


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

    @property
    def broken(self) -> bool:
        return self.error is not None


def _context_paths(session_dir: Path) -> list[Path]:
    return sorted(
        p
        for p in session_dir.glob("*.json")
        if p.name != SESSION_FILE and not p.name.startswith(".") and p.is_file()
    )


def _uuid_part(session_uuid: str) -> str:
    return _DATE_PREFIX.sub("", session_uuid)


class Store:
    """A sOAP store: a config dir of either generation, its ``.peteos``, or the ``agents``
    or ``sessions`` folder itself. New sessions of our runtime go to ``agents/<role>/``."""

    def __init__(self, config_dir: Path | str) -> None:
        self.root = Path(config_dir)
        self.layout = locate(self.root)
        self.agents_dir = self.layout.agents_dir
        self.sessions_dir = self.layout.sessions_dir

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    def session_dir(self, role: str, session_uuid: str) -> Path:
        """Where our runtime creates a session (the ``agents`` layout it always wrote)."""
        return self.agents_dir / role / session_uuid

    def roles(self) -> list[str]:
        if not self.agents_dir.is_dir():
            return []
        return sorted(p.name for p in self.agents_dir.iterdir() if p.is_dir() and not p.name.startswith("."))

    def instance_claims(self) -> dict[str, InstanceClaim]:
        """Session uuid -> the 0.6 instance that claims it (every instance file read once)."""
        claims, _errors = read_instances(self.layout.instances_dir)
        return claims

    def instance_problems(self) -> list[SoapError]:
        """The 0.6 instance files that cannot be read: the sessions they would claim are
        listed with :data:`UNKNOWN_ROLE`, and this says why."""
        _claims, errors = read_instances(self.layout.instances_dir)
        return errors

    def session_parent_dirs(self) -> list[Path]:
        """The folders whose entries are session folders: each role folder, ``sessions``."""
        parents = [self.agents_dir / role for role in self.roles()]
        return [*parents, self.sessions_dir] if self.sessions_dir.is_dir() else parents

    def _session_dirs(self) -> list[tuple[str, Path, Layout, str | None]]:
        if not self.root.is_dir():
            raise StoreError(self.root, "no such store directory")
        try:
            found: list[tuple[str, Path, Layout, str | None]] = [
                (role, path, "agents", None)
                for role in self.roles()
                for path in sorted((self.agents_dir / role).iterdir())
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
        """Every session of every role, read from ``session.json`` only; broken ones marked."""
        return [self._summary(*found) for found in self._session_dirs()]

    def _summary(self, role: str, path: Path, layout: Layout, instance: str | None) -> SessionSummary:
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
        """The session whose uuid is ``ref``, or starts with it (with or without the date)."""
        candidates = self.sessions()
        exact = [s for s in candidates if ref in (s.uuid, s.path.name)]
        if len(exact) == 1:
            return exact[0]
        matches = exact or [
            s for s in candidates if s.path.name.startswith(ref) or _uuid_part(s.path.name).startswith(ref)
        ]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise SessionNotFoundError(self.root, f"no session matches {ref!r}")
        names = ", ".join(f"{s.role}/{s.path.name}" for s in matches[:5])
        raise AmbiguousSessionError(self.root, f"{ref!r} matches {len(matches)} sessions: {names}")

    # -- loading ------------------------------------------------------------------------

    def read_session_file(self, role: str, path: Path) -> Session:
        """Only ``session.json`` of the session folder ``path`` (no contexts)."""
        session_file = path / SESSION_FILE
        if not session_file.is_file():
            raise StoreError(session_file, "missing session.json")
        try:
            return Session.from_dict(role, read_json(session_file))
        except FormatError as exc:
            raise exc.at(session_file) if exc.path is None else exc from None

    def read_context(self, path: Path) -> Context:
        """One context file; FormatError names the file and the JSON path of the fault."""
        try:
            return Context.from_dict(read_json(path))
        except FormatError as exc:
            raise exc.at(path) if exc.path is None else exc from None

    def load_session(self, ref: str, *, require_active: bool = True) -> Session:
        """The session ``ref`` (uuid or unique prefix) with every readable context.

        Unreadable context files are kept in ``session.load_errors``; if the active
        context is among them (or has no file) this raises, unless ``require_active``
        is False.
        """
        summary = self.find(ref)
        session = self.read_session_file(summary.role, summary.path)
        session.directory = summary.path
        session.layout = summary.layout
        for path in _context_paths(summary.path):
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
        for path in (summary.path / f"{active}.json", *summary.path.glob(f"*-{active}.json")):
            if path.is_file():
                return self.read_context(path)
        return self.load_session(summary.path.name).active_context

    # -- saving -------------------------------------------------------------------------

    def save_session(self, session: Session) -> list[Path]:
        """Write the session's contexts, then ``session.json``; return the files written.

        A loaded session goes back to the folder it came from (even if that folder was
        copied under another name). Files whose content is unchanged are not touched,
        and files that failed to load are never overwritten, so saving cannot lose what
        is on disk.
        """
        directory = session.directory or self.session_dir(session.role, session.uuid)
        written: list[Path] = []
        for context_id, context in session.contexts.items():
            name = session.context_files.setdefault(context_id, f"{context_id}.json")
            if name in session.load_errors:
                raise StoreError(directory / name, "refusing to overwrite a file that failed to load")
            if write_json_atomic(directory / name, context.to_dict()):
                written.append(directory / name)
        if write_json_atomic(directory / SESSION_FILE, session.to_dict()):
            written.append(directory / SESSION_FILE)
        return written
