"""Request sources: who built the wire body of a session's calls, and how to rebuild it.

Every framework builds the request its model receives in its own way: our runtime sends
:func:`soap_core.chat_request` and records each call; peteos's OpenAI adapter has its
own body (:mod:`replay._peteos_body`); OpenPoke's interaction agent sends one user
message of XML-ish blocks. Replay does not know any of them: it asks the session's
source. A source registers itself with :func:`register_source`; sources outside this
package (importers) are found through the ``soapwb.request_sources`` entry-point group,
so replay never imports them (importers build on replay, not the other way round).

A source that can also describe what a call was sent without building the request
(:class:`DescribingSource`) keeps passes over many calls, such as verify and the
budgets, linear in the session; the others are asked to materialize each call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any, Protocol

from replay._request import Materialized, SentPrefix
from soap_core import CallRecord, Context, Message, Session

ENTRY_POINT_GROUP = "soapwb.request_sources"


class RequestSource(Protocol):
    """One framework's way of building requests."""

    name: str
    """Shown with every materialized request (``soapwb``, ``peteos-0.6``, ``openpoke``)."""

    def claims(self, session: Session) -> bool:
        """Whether this source wrote ``session``."""
        ...

    def materialize(
        self, session: Session, context: Context, index: int, calls: Sequence[CallRecord]
    ) -> Materialized | None:
        """The request behind display ``index`` of ``context``; None to let the next
        source try (a message this source did not produce)."""
        ...

    def build_request(
        self, messages: Sequence[Message], *, model: str | None, parameters: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The body this framework sends for ``messages`` (a replay's edited ones)."""
        ...


class DescribingSource(RequestSource, Protocol):
    """A source that can say what a call was sent without building its request (replay
    looks for the method: a source need not declare this protocol)."""

    def sent_prefix(
        self, session: Session, context: Context, index: int, calls: Sequence[CallRecord]
    ) -> SentPrefix | None:
        """The call behind display ``index`` of ``context`` as the first messages of its
        call site with the specials it was sent; None where this source builds that
        request otherwise (it is then materialized)."""
        ...


_SOURCES: list[RequestSource] = []
_FALLBACKS: list[RequestSource] = []
_loaded_entry_points = False


def register_source(source: RequestSource, *, fallback: bool = False) -> None:
    """Add ``source``; fallbacks are asked after every other source (peteos: a session
    no other source claims was written by peteos). Registering a name again replaces it."""
    for registry in (_SOURCES, _FALLBACKS):
        registry[:] = [s for s in registry if s.name != source.name]
    (_FALLBACKS if fallback else _SOURCES).append(source)


def _load_entry_points() -> None:
    global _loaded_entry_points
    if _loaded_entry_points:
        return
    _loaded_entry_points = True
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        loaded = entry.load()
        if not any(s.name == loaded.name for s in (*_SOURCES, *_FALLBACKS)):
            register_source(loaded)


def sources() -> list[RequestSource]:
    """Every registered source, in the order they are asked."""
    _load_entry_points()
    return [*_SOURCES, *_FALLBACKS]


def source_for(session: Session) -> list[RequestSource]:
    """The sources that claim ``session``, most specific first."""
    return [s for s in sources() if s.claims(session)]


def source_named(name: str) -> RequestSource:
    for source in sources():
        if source.name == name:
            return source
    raise KeyError(f"no request source named {name!r} (known: {', '.join(s.name for s in sources())})")


def runs_code(name: str) -> bool:
    """Whether the source ``name`` can re-run its sessions with the app's own code (its
    framework's loop: ``rerun_with_code``)."""
    try:
        return callable(getattr(source_named(name), "rerun_with_code", None))
    except KeyError:
        return False


def built_as(name: str) -> str:
    """How the source ``name`` makes its requests, in words: a source's own ``built``
    where it has one ("rebuilt from its OpenTelemetry trace"), else "built as NAME sends it"."""
    try:
        built = getattr(source_named(name), "built", None)
    except KeyError:
        built = None
    return built if isinstance(built, str) else f"built as {name} sends it"
