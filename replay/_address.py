"""What ``--at`` names: asked of the session's request source, so that every command
means the same thing by it for every framework.

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
from soap_core import Session


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
