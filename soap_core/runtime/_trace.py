"""Cross-object invocation chains, walked from the invocation records alone.

Each invocation record names its caller (role, session, context and message index of
the call site) and the invocation that was running there (``parent_invocation_id``),
and it is written into both sessions. So from any session the chain can be walked up
to the outermost invocation, and down through every invocation it made, by reading
``invocations/`` folders, without any process state.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from soap_core._records import InvocationRecord, read_invocations
from soap_core._store import Store


@dataclass(frozen=True)
class TraceFrame:
    """One invocation: who ran, in which session, called from where, and how it ended."""

    invocation_id: str
    role: str
    object_id: str
    session: str
    caller_role: str | None
    caller_session: str | None
    context_id: str | None
    """The caller's context at the call site (None when plain Python called)."""
    message_index: int | None
    """The display index, in that context, of the message that made the call."""
    started_at: str
    ended_at: str | None
    outcome: str
    error: str | None
    depth: int
    prompt: str = ""
    rerun: str | None = None
    """``rerun`` for a re-run's own invocation, ``rerun-callee`` for an object it invoked."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class InvocationTrace:
    """The chain through one invocation of a session: callers, itself, callees."""

    callers: list[TraceFrame] = field(default_factory=list)
    """Outermost first."""
    invocation: TraceFrame | None = None
    callees: list[TraceFrame] = field(default_factory=list)
    """Depth first; ``depth`` counts from the traced invocation (1 = called by it)."""
    loop: str | None = None
    """Set when the records' parent links loop (read from files, they can): which link
    leads back. Every invocation is still listed once."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "callers": [f.as_dict() for f in self.callers],
            "invocation": self.invocation.as_dict() if self.invocation else None,
            "callees": [f.as_dict() for f in self.callees],
            "loop": self.loop,
        }


def _frame(record: InvocationRecord, depth: int) -> TraceFrame:
    caller = record.caller
    return TraceFrame(
        invocation_id=record.id,
        role=record.callee.role,
        object_id=record.callee.object_id,
        session=record.callee.session or "",
        caller_role=caller.role if caller else None,
        caller_session=caller.session if caller else None,
        context_id=caller.context_id if caller else None,
        message_index=caller.message_index if caller else None,
        started_at=record.started_at,
        ended_at=record.ended_at,
        outcome=record.outcome,
        error=record.error,
        depth=depth,
        prompt=record.prompt,
        rerun=str(record.rerun.get("kind")) if record.rerun else None,
    )


class _Walker:
    """Walks invocation links across sessions. Each session's records are read once,
    kept by id and by parent, so a trace opens each record file once whatever the
    chain's length (a chain of n invocations used to open about n^2 files). Links that
    loop (a record naming itself or a descendant as its parent) are followed once."""

    def __init__(self, store: Store) -> None:
        self.dirs = {s.uuid: s.path for s in store.sessions()}
        self._read: dict[
            Path, tuple[dict[str, InvocationRecord], dict[str | None, list[InvocationRecord]]]
        ] = {}

    def records_of(
        self, directory: Path, *, strict: bool = False
    ) -> tuple[dict[str, InvocationRecord], dict[str | None, list[InvocationRecord]]]:
        """One session's records by id and by parent. A broken record of another session
        is left out (``strict``: the traced session's own raise)."""
        found = self._read.get(directory)
        if found is None:
            records = read_invocations(directory, errors=None if strict else [])
            by_id: dict[str, InvocationRecord] = {}
            by_parent: dict[str | None, list[InvocationRecord]] = {}
            for record in records:
                by_id.setdefault(record.id, record)
                by_parent.setdefault(record.parent_invocation_id, []).append(record)
            found = self._read[directory] = (by_id, by_parent)
        return found

    def record(self, session: str | None, invocation_id: str) -> InvocationRecord | None:
        directory = self.dirs.get(session or "")
        return self.records_of(directory)[0].get(invocation_id) if directory else None

    def callers(self, record: InvocationRecord) -> tuple[list[InvocationRecord], str | None]:
        """The invocations up the chain, outermost first, and where the links loop."""
        chain: list[InvocationRecord] = []
        seen = {record.id}
        current = record
        while current.caller is not None and current.parent_invocation_id:
            if current.parent_invocation_id in seen:
                return chain[::-1], (
                    f"invocation {current.id} names {current.parent_invocation_id} as its parent, "
                    "which the chain already holds: the records' parent links loop"
                )
            parent = self.record(current.caller.session, current.parent_invocation_id)
            if parent is None:
                break
            seen.add(parent.id)
            chain.append(parent)
            current = parent
        return chain[::-1], None

    def _children(self, record: InvocationRecord) -> list[InvocationRecord]:
        directory = self.dirs.get(record.callee.session or "")
        if directory is None:
            return []
        return sorted(self.records_of(directory)[1].get(record.id, []), key=lambda r: r.started_at)

    def callees(self, record: InvocationRecord, depth: int, seen: set[str]) -> list[TraceFrame]:
        """Depth first, without recursion (a chain may be deeper than Python's stack)."""
        frames: list[TraceFrame] = []
        stack = [(child, depth) for child in reversed(self._children(record))]
        while stack:
            child, at = stack.pop()
            if child.id in seen:
                continue
            seen.add(child.id)
            frames.append(_frame(child, at))
            stack.extend((grandchild, at + 1) for grandchild in reversed(self._children(child)))
        return frames


def invocation_chain(store: Store, session_ref: str) -> list[InvocationTrace]:
    """One trace per invocation of the session ``session_ref`` (uuid or prefix)."""
    summary = store.find(session_ref)
    walker = _Walker(store)
    traces = []
    own, _by_parent = walker.records_of(summary.path, strict=True)
    for record in own.values():
        if record.callee.session != summary.uuid:
            continue  # a record of a call this session made: it shows up as a callee
        chain, loop = walker.callers(record)
        traces.append(
            InvocationTrace(
                callers=[_frame(r, i - len(chain)) for i, r in enumerate(chain)],
                invocation=_frame(record, 0),
                callees=walker.callees(record, 1, {record.id, *(r.id for r in chain)}),
                loop=loop,
            )
        )
    return traces
