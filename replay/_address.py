"""What ``--at`` and a page's ``?message=`` name: asked of the session's request source,
so that every command and every page mean the same thing by N for every framework.

A source may address its sessions its own way (:class:`AddressingSource`: OpenPoke's
plain ``N`` is log entry N, and it reads its system prompt from a checkout); for every
other source ``N`` (or ``message:N``, or a message id) is a display index of the context.
``entry:N`` is for sources that number entries, and a checkout for sources that read one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from replay._materialize import MaterializeError, materialize
from replay._request import Materialized
from replay._sources import RequestSource, source_for
from soap_core import Context, Session


class AddressError(MaterializeError):
    """``at`` (or the checkout given with it) does not fit the session: the user's
    argument is wrong, not the store."""


class AddressingSource(RequestSource, Protocol):
    """A source whose sessions are addressed its own way (replay looks for the method)."""

    def materialize_at(
        self, session: Session, context_id: str | None, at: str, *, checkout: Path | None = None
    ) -> Materialized:
        """The request ``at`` names in ``context_id`` (the active context when None);
        ``checkout``: the framework's source tree, where its prompts are read from."""
        ...

    def message_index(self, session: Session, context: Context, at: str) -> int | None:
        """The display index of ``context`` that plain ``at`` names, None for none."""
        ...

    def message_address(self, session: Session, context: Context, index: int) -> str:
        """What names display index ``index`` of ``context``: the inverse of message_index."""
        ...


def number_of(text: str, at: str) -> int:
    """The integer of ``message:N`` or ``entry:N``; AddressError naming ``at`` otherwise."""
    if not text.strip().lstrip("-").isdigit():
        raise AddressError(f"--at {at}: {text!r} is not a number (entry:N and message:N take an integer)")
    return int(text)


def materialize_at(
    session: Session, context_id: str | None, at: str, *, checkout: Path | None = None
) -> Materialized:
    """The request ``context_id``/``at`` name, as the session's request source reads
    ``at`` (``checkout``: the framework's source tree, for a source that reads one)."""
    for source in source_for(session)[:1]:
        addressing = getattr(source, "materialize_at", None)
        if addressing is not None:
            found: Materialized = addressing(session, context_id, at, checkout=checkout)
            return found
    if checkout is not None:
        raise AddressError(
            f"--openpoke-root is for sessions imported from OpenPoke; session {session.uuid} is a "
            f"{session.role} session"
        )
    kind, sep, rest = at.partition(":")
    if sep and kind == "entry":
        raise AddressError(
            f"--at {at}: entry numbers address an OpenPoke log, and session {session.uuid} "
            f"({session.role}) was not imported from OpenPoke; give N or message:N (a display index)"
        )
    target: int | str = number_of(rest, at) if sep and kind == "message" else at
    return materialize(session, context_id or session.active_context, target)


def _display_index(text: str) -> int | None:
    return int(text) if text.strip().isascii() and text.strip().isdigit() else None


def message_index(session: Session, context: Context, at: str) -> int | None:
    """The display index of ``context`` that ``at`` names as the session's request
    source reads it (a page's ``?message=``, as ``--at`` does): OpenPoke's plain N is
    log entry N; ``message:N``, and every other source's N, display index N. None when
    ``at`` names no message there (a page then opens where it would without one)."""
    kind, sep, rest = at.partition(":")
    if sep and kind == "message":
        return _display_index(rest)
    own = next((getattr(s, "message_index", None) for s in source_for(session)[:1]), None)
    return own(session, context, at) if own is not None else _display_index(at)


def message_address(session: Session, context: Context, index: int) -> str:
    """What names display index ``index`` of ``context`` in a link or in ``--at``, as
    the session's request source reads it back (:func:`message_index`)."""
    own = next((getattr(s, "message_address", None) for s in source_for(session)[:1]), None)
    return str(own(session, context, index)) if own is not None else str(index)
