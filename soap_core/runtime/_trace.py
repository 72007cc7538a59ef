"""Cross-object invocation chains, walked from the invocation records alone.

Each invocation record names its caller (role, session, context and message index of
the call site) and the invocation that was running there (``parent_invocation_id``),
and it is written into both sessions. So from any session the chain can be walked up
to the outermost invocation, and down through every invocation it made, by reading
``invocations/`` folders, without any process state.

Every invocation of the walk is listed once: :func:`invocation_chains` gives each chain
through the session once, depth first from its outermost invocation, with the depth of
each frame, so its size is the number of invocations whatever their nesting. A chain of
2,000 invocations of one session, each invoked by the one before, reprinted the whole
chain for each of them (:func:`invocation_chain` still gives one stack per invocation,
built from the chains: 4 million frames there).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
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

    def children(self, record: InvocationRecord) -> list[InvocationRecord]:
        directory = self.dirs.get(record.callee.session or "")
        if directory is None:
            return []
        return sorted(self.records_of(directory)[1].get(record.id, []), key=lambda r: r.started_at)


@dataclass
class InvocationChain:
    """One chain of invocations through a session, each listed once: depth first from
    the outermost invocation, its callees in the order they started. It holds the
    session's own invocations, every invocation above them and every one they made
    (directly or not); ``depth`` counts from the outermost invocation (0)."""

    frames: list[TraceFrame] = field(default_factory=list)
    traced: list[str] = field(default_factory=list)
    """The ids of the session's own invocations in this chain, in the order of
    ``frames``."""
    loop: str | None = None
    """Set when the records' parent links loop (read from files, they can): which link
    leads back. Every invocation is still listed once."""

    def as_dict(self) -> dict[str, Any]:
        return {"frames": [f.as_dict() for f in self.frames], "traced": list(self.traced), "loop": self.loop}

    _index: dict[str, int] | None = field(default=None, init=False, repr=False, compare=False)
    _parents: list[int] | None = field(default=None, init=False, repr=False, compare=False)

    def position(self, invocation_id: str) -> int:
        """Where ``invocation_id`` is in ``frames``; KeyError if it is not there."""
        if self._index is None:
            self._index = {}
            for at, frame in enumerate(self.frames):
                self._index.setdefault(frame.invocation_id, at)
        return self._index[invocation_id]

    def parents(self) -> list[int]:
        """The position of each frame's caller in ``frames`` (-1 for the outermost), in
        one pass: in depth-first order a frame's caller is the nearest frame above it
        that is one level less deep."""
        if self._parents is None:
            self._parents = []
            path: list[int] = []  # the positions from the outermost frame to the current one
            for at, frame in enumerate(self.frames):
                del path[frame.depth :]
                self._parents.append(path[-1] if path else -1)
                path.append(at)
        return self._parents

    def stack_sizes(self) -> dict[str, tuple[int, int]]:
        """Invocation id → how many invocations are above it (its callers) and below it
        (its callees, at any depth), in one pass over the chain."""
        sizes: dict[str, tuple[int, int]] = {}
        ends = [len(self.frames)] * len(self.frames)  # where each frame's callees end
        path: list[int] = []
        for at, frame in enumerate(self.frames):
            for done in path[frame.depth :]:
                ends[done] = at
            del path[frame.depth :]
            path.append(at)
        for at, frame in enumerate(self.frames):
            sizes.setdefault(frame.invocation_id, (frame.depth, ends[at] - at - 1))
        return sizes

    def stacks(self) -> list[TraceFrame]:
        """The frames on the stacks through the session's own invocations (their callers,
        themselves, their callees at any depth), each once, in one pass over the chain;
        ``depth`` counts from the first of the session's invocations whose stack holds
        the frame (callers negative), as :meth:`trace` would give it."""
        parents, sizes = self.parents(), self.stack_sizes()
        taken = [False] * len(self.frames)
        out: list[TraceFrame] = []
        covered = 0  # callees of earlier own invocations are taken up to here
        for invocation_id in self.traced:
            at = self.position(invocation_id)
            own = self.frames[at]
            places, above = [], parents[at]
            while above >= 0 and not taken[above]:  # above a taken caller, all are taken
                places.append(above)
                above = parents[above]
            places.reverse()
            places += [at] if not taken[at] else []
            end = at + 1 + sizes[invocation_id][1]
            places += [p for p in range(max(at + 1, covered), end) if not taken[p]]
            for place in places:
                taken[place] = True
                out.append(replace(self.frames[place], depth=self.frames[place].depth - own.depth))
            covered = max(covered, end)
        return out

    def trace(self, invocation_id: str) -> InvocationTrace:
        """The stack through one invocation of the chain, as :class:`InvocationTrace`
        holds it (depths counted from that invocation), in time linear in that stack."""
        at = self.position(invocation_id)
        own = self.frames[at]
        parents = self.parents()
        callers = []
        above = parents[at]
        while above >= 0:
            callers.append(replace(self.frames[above], depth=self.frames[above].depth - own.depth))
            above = parents[above]
        callees = []
        for later in self.frames[at + 1 :]:
            if later.depth <= own.depth:
                break
            callees.append(replace(later, depth=later.depth - own.depth))
        return InvocationTrace(callers[::-1], replace(own, depth=0), callees, self.loop)


def _place(walker: _Walker, own: list[InvocationRecord]) -> tuple[list[InvocationChain], list[str]]:
    """The chains through ``own`` (the session's invocations, in record order) and their
    ids in that order.

    Each record is placed once: walking up from an invocation stops at the first one an
    earlier walk placed, walking down skips what is placed, so a chain of n invocations
    of one session costs about n steps (a walk per invocation cost n² / 2)."""
    records: dict[str, InvocationRecord] = {}
    parent: dict[str, str] = {}  # the tree: child -> parent, each link followed once
    tops: list[str] = []
    loops: dict[str, str] = {}
    for record in own:
        if record.id in records:
            continue
        records[record.id] = record
        walked = {record.id}
        current = record
        while True:
            parent_id = current.parent_invocation_id
            if current.caller is None or not parent_id:
                tops.append(current.id)
                break
            if parent_id in walked:
                loops[current.id] = (
                    f"invocation {current.id} names {parent_id} as its parent, "
                    "which the chain already holds: the records' parent links loop"
                )
                tops.append(current.id)
                break
            if parent_id in records:  # an earlier walk went on from here
                parent[current.id] = parent_id
                break
            above = walker.record(current.caller.session, parent_id)
            if above is None:
                tops.append(current.id)
                break
            records[above.id] = above
            parent[current.id] = above.id
            walked.add(above.id)
            current = above
    explored: set[str] = set()  # whose callees are listed: each invocation's once
    for record in own:
        stack = [record]
        while stack:
            node = stack.pop()
            if node.id in explored:
                continue
            explored.add(node.id)
            for child in walker.children(node):
                if child.id not in records:
                    records[child.id] = child
                    parent[child.id] = node.id
                if child.id not in explored:
                    stack.append(records[child.id])
    below: dict[str, list[str]] = {}
    for child_id, parent_id in parent.items():
        below.setdefault(parent_id, []).append(child_id)
    for listed in below.values():
        listed.sort(key=lambda i: (records[i].started_at, i))
    own_ids = {r.id for r in own}
    chains = []
    for top in tops:
        chain = InvocationChain(loop=loops.get(top))
        to_list: list[tuple[str, int]] = [(top, 0)]
        while to_list:
            invocation_id, depth = to_list.pop()
            chain.frames.append(_frame(records[invocation_id], depth))
            if invocation_id in own_ids:
                chain.traced.append(invocation_id)
            to_list.extend((c, depth + 1) for c in reversed(below.get(invocation_id, ())))
        chains.append(chain)
    return chains, [r.id for r in own]


def _own_records(store: Store, session_ref: str) -> tuple[_Walker, list[InvocationRecord]]:
    summary = store.find(session_ref)
    walker = _Walker(store)
    records, _by_parent = walker.records_of(summary.path, strict=True)
    # a record of a call this session made shows up as a callee
    return walker, [r for r in records.values() if r.callee.session == summary.uuid]


def invocation_chains(store: Store, session_ref: str) -> list[InvocationChain]:
    """Every chain through an invocation of the session ``session_ref`` (uuid or
    prefix), each invocation listed once: linear in the invocations walked."""
    walker, own = _own_records(store, session_ref)
    return _place(walker, own)[0]


def invocation_chain(store: Store, session_ref: str) -> list[InvocationTrace]:
    """One trace per invocation of the session ``session_ref`` (uuid or prefix): the
    whole stack through each, callers and callees. The walk is linear; the answer is
    not when the session's invocations call each other (n stacks of up to n frames):
    :func:`invocation_chains` lists each chain once."""
    walker, own = _own_records(store, session_ref)
    chains, order = _place(walker, own)
    chain_of = {invocation_id: chain for chain in chains for invocation_id in chain.traced}
    return [chain_of[invocation_id].trace(invocation_id) for invocation_id in order]
