"""What one save writes, decided before anything is written (:mod:`soap_core._saves`
says why and how). :func:`plan_save` returns one :class:`FileWrite` per file the save
changes, each checked against the disk while the save lock is held, merged with another
process's save where the two can be merged, or it raises :class:`SaveConflictError`."""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soap_core._context import Context
from soap_core._errors import SoapError, StoreError
from soap_core._jsonio import fingerprint, read_json
from soap_core._paths import safe_name
from soap_core._saves import (
    UNKNOWN,
    SaveConflictError,
    SavedBase,
    file_signature,
    merged_children,
    merged_session_dict,
    only_children_differ,
    with_children,
)
from soap_core._session import SESSION_FILE, Session


@dataclass
class FileWrite:
    """One file of a save: what goes into it, and what memory holds once it is written."""

    name: str
    value: dict[str, Any]
    context: Context | None = None
    """The context the file holds; None for ``session.json``."""
    digest: bytes | None = None
    """The context's fingerprint as memory holds it after the save."""
    children: list[str] | None = None
    """Children merged with another process's (memory takes them too)."""
    header: Session | None = None
    """``session.json`` merged with another process's (memory takes its fields)."""
    on_disk_only: bool = False
    """The file gets the other process's content with this save's children merged in:
    memory keeps its older messages, and the next save compares content again."""
    already_there: bool = False
    """The disk holds this very content already: nothing to write."""
    splice: tuple[memoryview, array[int]] | None = None
    """The bytes of the file's ``messages`` array, unchanged since it was read, and
    their spans in it:
    ``value`` is then the dict without them, and the file is written as the two
    spliced (:func:`~soap_core._spans.spliced_parts`), not dumped whole."""
    path: str = ""
    """The file as memory names it (its fingerprint's path)."""
    written_spans: array[int] | None = None
    """The messages' spans in the spliced file written."""
    written_digest: str = ""
    """The digest of the spliced file's bytes (:func:`~soap_core._jsonio.bytes_digest`)."""

    def whole(self) -> None:
        """Turn a spliced write into a whole one (a merge needs every message)."""
        if self.splice is None or self.context is None:
            return
        self.value, self.splice = self.context.to_dict(), None
        self.digest = fingerprint([self.path, self.value])


def plan_save(session: Session, directory: Path, folder: Path) -> list[FileWrite]:
    """The files a save of ``session`` into ``folder`` (``directory`` itself, or the temp
    folder that becomes it) writes: those memory changed since they were read or last
    written (every one, for a session made in memory). Nothing is compared with the disk
    yet (:func:`checked_against_disk` does that, under the save lock)."""
    plans: list[FileWrite] = []
    for context_id, context in session.contexts.items():
        if context_id not in session.context_files:  # a new context: its file is named after it
            session.context_files[context_id] = f"{safe_name(context_id, 'context id', directory)}.json"
        name = session.context_files[context_id]
        safe_name(name, "context file name", directory)
        if name in session.load_errors:
            raise StoreError(directory / name, "refusing to overwrite a file that failed to load")
        splice = context.splice_source()
        if splice is not None:  # the messages are the file's own bytes: only the rest can differ
            if context.rest_unchanged() and (folder / name).is_file():
                continue
            rest = context.dict_without_messages()
            plans.append(FileWrite(name, rest, context, splice=splice, path=str(directory / name)))
            continue
        value = context.to_dict()
        digest = fingerprint([str(directory / name), value])
        if digest is not None and digest == context.saved_fingerprint and (folder / name).is_file():
            continue  # unchanged since it was read or written: not even dumped
        plans.append(FileWrite(name, value, context, digest))
    value = session.to_dict()
    base = session.base
    if base is None or value != base.session_dict or not (folder / SESSION_FILE).is_file():
        plans.append(FileWrite(SESSION_FILE, value))
    return plans


def checked_against_disk(
    plans: list[FileWrite], session: Session, directory: Path, token: str
) -> list[FileWrite]:
    """``plans`` as they may be written over what is on disk now, ``token`` being the
    save lock's: merged with another process's save where they can be, else
    SaveConflictError. A session made in memory (no ``base``) replaces the files it holds."""
    base = session.base
    if base is None:
        return plans
    trusted = base.token == token
    return [
        _checked_context(plan, base, directory, trusted)
        if plan.context is not None
        else _checked_session(plan, session, base, directory, trusted)
        for plan in plans
    ]


def _conflict(path: Path, problem: str) -> SaveConflictError:
    return SaveConflictError(
        path, f"{problem} since this session was loaded: nothing was saved; load the session again"
    )


def _theirs(path: Path) -> Any:
    try:
        return read_json(path)
    except SoapError as exc:
        raise _conflict(path, f"another process left this file unreadable ({exc})") from None


def _checked_context(plan: FileWrite, base: SavedBase, directory: Path, trusted: bool) -> FileWrite:
    """``plan`` as it may be written over what is on disk now, merged if need be."""
    assert plan.context is not None
    path = directory / plan.name
    now = file_signature(path)
    was = base.signatures.get(plan.name)
    if now is not None and was is not None and trusted and now == was:
        return plan  # as it was read (nobody saved since)
    if was is None and now is None:  # a context this session made, its file still new
        return plan
    plan.whole()  # compared with another process's file: by content, messages and all
    if was is None:  # a context this session made: another process wrote a file of its name
        if _theirs(path) == plan.value:
            plan.already_there = True
            return plan
        raise _conflict(path, "another process saved a context file of this name")
    if now is None or (trusted and now == was):
        return plan  # as it was read (nobody saved since), or removed: nothing there to lose
    theirs = _theirs(path)
    base_digest = plan.context.saved_fingerprint
    their_digest = fingerprint([str(path), theirs])
    if base_digest is not None and their_digest == base_digest:
        return plan  # touched, not changed
    if their_digest is not None and their_digest == plan.digest:
        plan.already_there = True
        return plan
    base_children = plan.context.saved_children
    their_children = theirs.get("children") if isinstance(theirs, dict) else None
    if (
        base_digest is None
        or base_children is None
        or not isinstance(their_children, list)
        or not all(isinstance(c, str) for c in their_children)
    ):
        raise _conflict(path, "another process changed this context")
    ours = plan.value
    children = merged_children(base_children, ours["children"], their_children)
    if only_children_differ(path, ours, base_children, base_digest):
        plan.value, plan.on_disk_only = with_children(theirs, children), True
    elif only_children_differ(path, theirs, base_children, base_digest):
        plan.value = with_children(ours, children)
    else:
        raise _conflict(path, "another process changed the messages of this context too")
    plan.children = children
    plan.digest = fingerprint([str(path), with_children(ours, children)])
    return plan


def _checked_session(
    plan: FileWrite, session: Session, base: SavedBase, directory: Path, trusted: bool
) -> FileWrite:
    path = directory / SESSION_FILE
    now = file_signature(path)
    was = base.signatures.get(SESSION_FILE)
    if now is None or base.session_dict is None or (trusted and now == was):
        return plan
    try:
        theirs = Session.from_dict(session.role, _theirs(path)).to_dict()
    except SoapError as exc:
        raise _conflict(path, f"another process left this file unreadable ({exc})") from None
    if theirs == base.session_dict:
        return plan
    if theirs == plan.value:
        plan.already_there = True
        return plan
    plan.header = Session.from_dict(
        session.role, merged_session_dict(path, base.session_dict, plan.value, theirs)
    )
    plan.value = plan.header.to_dict()
    return plan


def saved(session: Session, plans: list[FileWrite], folder: Path, token: str) -> None:
    """Memory after the planned files were written into ``folder``: merged children and
    headers taken, fingerprints and signatures noted as the next save's base."""
    signatures = dict(session.base.signatures) if session.base is not None else {}
    for plan in plans:
        if plan.context is not None:
            if plan.children is not None:
                plan.context.children = list(plan.children)
            if plan.splice is not None and plan.written_spans is not None:
                signature = file_signature(folder / plan.name)
                plan.context.note_spliced_write(
                    plan.path, plan.value, signature, plan.written_spans, plan.written_digest
                )
            else:
                plan.context.saved_fingerprint = plan.digest
                plan.context.written_spans = None  # written whole: the catalog reads it again
            plan.context.saved_children = tuple(plan.context.children)
        elif plan.header is not None:
            session.adopt_header(plan.header)
        signature = None if plan.on_disk_only else file_signature(folder / plan.name)
        signatures[plan.name] = signature or UNKNOWN
    session.base = SavedBase(token, signatures, session.to_dict())
