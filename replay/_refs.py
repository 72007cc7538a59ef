"""Naming what to diff: a context, a message of one, or a replay run, store-wide.

A reference is ``CONTEXT`` or ``CONTEXT@INDEX`` where CONTEXT is a context id or a
unique prefix of one (context ids are uuid4s, unique across a store) and INDEX a
display index. A replay run is named by its fork's context id.
"""

from __future__ import annotations

from dataclasses import dataclass

from replay._materialize import resolve_index
from soap_core import Context, Message, Session, SoapError, Store, is_marked


@dataclass
class Reference:
    """What a reference names: a whole context, or one message (an output) of it."""

    session: Session
    context: Context
    index: int | None

    @property
    def is_run(self) -> bool:
        return is_marked(self.context)

    @property
    def message(self) -> Message | None:
        """The output named: the message at the index, or a run's answer."""
        if self.index is not None:
            return self.context.messages[self.index] if self.index < len(self.context.messages) else None
        if self.is_run:
            last = self.context.messages[-1] if self.context.messages else None
            return last if last is not None and last.role == "assistant" else None
        return None

    @property
    def names_output(self) -> bool:
        return self.index is not None or self.is_run


def find_context(store: Store, ref: str) -> tuple[Session, Context]:
    """The context whose id is ``ref`` or starts with it, in any session of the store."""
    hits = sorted(
        {p.parent for p in store.agents_dir.glob(f"*/*/{ref}*.json")}
        | {p.parent for p in store.agents_dir.glob(f"*/*/*-{ref}*.json")}
    )
    found: list[tuple[Session, Context]] = []
    for directory in hits:
        session = store.load_session(store.ref_for(directory), require_active=False)
        found += [(session, c) for cid, c in session.contexts.items() if cid.startswith(ref)]
    if len(found) != 1:
        problem = f"matches {len(found)} contexts" if found else "matches no context"
        raise SoapError(f"{store.agents_dir}: context reference {ref!r} {problem}")
    return found[0]


def resolve_reference(store: Store, ref: str) -> Reference:
    context_ref, _, index_ref = ref.partition("@")
    session, context = find_context(store, context_ref)
    index = resolve_index(context, index_ref) if index_ref else None
    return Reference(session, context, index)
