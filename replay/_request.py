"""What a materialized request is: the request behind one message (:class:`Materialized`),
where its call was made (:class:`CallSite`) and what it was sent, described rather than
built (:class:`SentPrefix`).

Plain values, apart from :mod:`replay._materialize` (which finds them) and
:mod:`replay._sources` (whose sources build them), so that neither of those two imports
the other's types back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from soap_core import CallRecord, Context, Message, Session, request_hash


@dataclass(frozen=True)
class Materialized:
    """The request behind one message, and where it came from."""

    session: str
    role: str
    context_id: str
    """The context the call was made from (an ancestor, for a message a fork copied)."""
    index: int
    """Display index, in that context, of the message the call produced."""
    message_id: str | None
    request: dict[str, Any]
    request_hash: str
    messages: list[Message]
    """The sOAP messages the request was built from (specials as at that call)."""
    parameters: dict[str, Any]
    """Model and sampling parameters: the body's keys other than messages and tools."""
    call: CallRecord | None = None
    notes: list[str] = field(default_factory=list)
    source: str = "soapwb"
    """The request source that built it (:func:`replay._sources.source_named` gives it back)."""
    sent_from: tuple[str, int] | None = None
    """Where the sent messages were taken from when that is not the first ``index``
    messages of ``context_id``: (context id, how many of its messages)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "role": self.role,
            "context_id": self.context_id,
            "index": self.index,
            "message_id": self.message_id,
            "request_hash": self.request_hash,
            "recorded_call": self.call.id if self.call else None,
            "source": self.source,
            "sent_from": list(self.sent_from) if self.sent_from else None,
            "notes": self.notes,
            "request": self.request,
        }


@dataclass
class CallSite:
    """Where the call behind a message was made, and what is known of it."""

    context: Context
    index: int
    call: CallRecord | None
    notes: list[str]

    @property
    def message_id(self) -> str | None:
        return self.context.messages[self.index].id if self.index < len(self.context.messages) else None

    def materialized(
        self,
        session: Session,
        request: dict[str, Any],
        messages: list[Message],
        parameters: dict[str, Any],
        source: str,
        sent_from: tuple[str, int] | None = None,
        *,
        hashed: str | None = None,
    ) -> Materialized:
        """The result a source gives for this call site; ``hashed`` is the request's
        hash when the source computed it already (as it went)."""
        return Materialized(
            session=session.uuid,
            role=session.role,
            context_id=self.context.id,
            index=self.index,
            message_id=self.message_id,
            request=request,
            request_hash=hashed if hashed is not None else request_hash(request),
            messages=messages,
            parameters=parameters,
            call=self.call,
            notes=self.notes,
            source=source,
            sent_from=sent_from,
        )


@dataclass
class SentPrefix:
    """What one call was sent, described rather than built: the first ``count``
    messages of ``context`` (the call site's), where the special ones among them (at
    display indices ``specials``) read as ``substituted`` says when it has them.

    A pass over many calls reads this where it needs less than the request: its message
    list and its request each cost as much as the whole prefix, at every call. The
    request's hash is computed when asked for (a source may extend one running hash
    from call to call).
    """

    site: CallSite
    specials: list[int]
    """Display indices, below ``count``, of the special messages."""
    substituted: dict[int, Message]
    """The specials that read differently at the call, by display index."""
    compute_hash: Callable[[], str] = field(repr=False)
    """Computes the request's hash (as the source does: perhaps extending a running one)."""

    @property
    def context(self) -> Context:
        return self.site.context

    @property
    def count(self) -> int:
        return self.site.index

    def messages(self) -> list[Message]:
        """The messages sent, as :attr:`Materialized.messages` holds them."""
        sent = self.context.messages[: self.count]
        for index, message in self.substituted.items():
            sent[index] = message
        return sent

    def special_messages(self) -> list[Message]:
        """The special messages sent, in order."""
        return [self.substituted.get(i) or self.context.messages[i] for i in self.specials]

    def request_hash(self) -> str:
        return self.compute_hash()
