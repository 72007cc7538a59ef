"""The replay runs and re-runs a store keeps: rebuilt from their forks, so that they
outlast a process.

:func:`replay.replay` saves every sample as a fork whose ``soapwb_replay`` record names
the message it re-ran (``of_context``, ``of_index``, ``of_message_id``), the overrides,
the sample number, an optional label and the id of its call record; the call record in
``calls/`` holds the request, the endpoint, usage and latency, and the answer is the
fork's message that call produced. Everything needed to show a run again is in those
two files: this module reads them back, and writes nothing.

Which samples one :func:`replay.replay` call made is not recorded as such, but it can
be told: a call makes its forks one after another, numbering the samples from 0 and
giving each a call id that sorts by creation time (:func:`soap_core.new_record_id`).
So the runs of one message, label and overrides, in call-id order, split into batches
where the sample number starts again (:func:`split_batches`, the rule the fork tree's
runs are told by too).

A re-run (:func:`replay.rerun`) is a fork too, its record of kind ``rerun``; the branch
goes on in the compaction forks the re-run made of it, and its answer is in the re-run's
invocation record (or, for a session whose code is not here, its last message).

Records come from files, which anyone may have edited: a value of the wrong type is
taken as absent, never raised on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from replay._branch import BranchDiff, diff_branches
from replay._rerun import RERUN_KIND, RerunResult, branch_of
from replay._run import Overrides, ReplayRun
from soap_core import (
    BranchMark,
    CallRecord,
    Context,
    Message,
    Session,
    canonical_json,
    mark_of,
    read_invocation,
)
from soap_core.runtime import TOOL_FAILURES_KEY

T = TypeVar("T")

INTERRUPTED_RUN = "the run saved no answer and no error (its process may have been stopped)"


@dataclass(frozen=True)
class SavedRun:
    """One replay sample as the store keeps it: the run, and what the page groups it by."""

    run: ReplayRun
    label: str | None
    """The experiment's name (``noise band``, a compaction drift run), None for a plain run."""
    base_url: str
    """The endpoint its call went to ("" when its call record is missing)."""
    started_at: str
    """When its call started (ISO 8601, UTC; "" when its call record is missing)."""

    @property
    def overrides(self) -> Overrides:
        return overrides_from_record(self.run.overrides)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: Any) -> int | float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def overrides_from_record(data: Any) -> Overrides:
    """The :class:`Overrides` a record's ``overrides`` dict (``Overrides.as_dict()``) holds.

    Keys of the wrong type are left out, so a hand-edited record still shows."""
    if not isinstance(data, Mapping):
        return Overrides()
    edits = data.get("edits")
    drops = data.get("drops")
    temperature = _number(data.get("temperature"))
    return Overrides(
        model=_text(data.get("model")),
        temperature=float(temperature) if temperature is not None else None,
        seed=_integer(data.get("seed")),
        max_tokens=_integer(data.get("max_tokens")),
        system_prompt=_text(data.get("system_prompt")),
        edits={
            int(k): v
            for k, v in (edits.items() if isinstance(edits, Mapping) else ())
            if isinstance(k, str) and k.isascii() and k.isdigit() and isinstance(v, str)
        },
        drops=tuple(sorted(d for d in drops if _integer(d) is not None)) if isinstance(drops, list) else (),
        tool_calls=_indexed(data.get("tool_calls"), _call_pair),
        tool_results=_indexed(data.get("tool_results"), _text),
    )


def _call_pair(value: Any) -> tuple[str, str] | None:
    if (
        isinstance(value, Mapping)
        and isinstance(value.get("name"), str)
        and isinstance(value.get("arguments"), str)
    ):
        return value["name"], value["arguments"]
    return None


def _indexed(data: Any, item: Callable[[Any], Any]) -> dict[int, list[Any]]:
    """``{"5": [...]}`` → ``{5: [...]}``; an entry with a malformed item is left out whole."""
    out: dict[int, list[Any]] = {}
    for key, values in data.items() if isinstance(data, Mapping) else ():
        if not (isinstance(key, str) and key.isascii() and key.isdigit() and isinstance(values, list)):
            continue
        read = [item(v) for v in values]
        if all(r is not None for r in read):
            out[int(key)] = read
    return out


def _answer(fork: Context, call: CallRecord | None) -> Message | None:
    """The message the run's call produced: by the call's message id, else (no call
    record) the fork's last message when it is an assistant's."""
    messages = fork.messages
    if call is not None:
        if call.message_id is None:
            return None
        if messages and messages[-1].id == call.message_id:
            return messages[-1]
        return next((m for m in reversed(messages) if m.id == call.message_id), None)
    last = messages[-1] if messages else None
    return last if last is not None and last.role == "assistant" else None


def saved_run(fork: Context, mark: BranchMark, call: CallRecord | None) -> SavedRun:
    """The run ``fork`` holds, with its call record when there is one."""
    output = _answer(fork, call)
    error = mark.error or (call.error if call else None)
    if output is None and error is None:
        error = INTERRUPTED_RUN
    run = ReplayRun(
        fork_id=fork.id,
        call_id=mark.call_id or "",
        sample=mark.sample or 0,
        request=call.request if call else {},
        request_hash=call.request_hash if call else "",
        overrides=overrides_from_record(mark.overrides).as_dict(),
        output=output if error is None else None,
        response=call.response if call else None,
        usage=call.usage if call else None,
        latency_s=call.latency_s if call else None,
        error=error,
    )
    return SavedRun(run, mark.label, call.base_url if call else "", call.started_at if call else "")


def saved_runs(
    session: Session,
    context_id: str,
    index: int,
    *,
    message_id: str | None = None,
    calls: Iterable[CallRecord] | None = None,
) -> list[SavedRun]:
    """Every saved replay run of message ``index`` of ``context_id`` (the call site, as
    :attr:`Materialized.context_id` and ``index`` name it), oldest first.

    ``message_id``, when given, must match the record's too (a record made before the
    context file was changed does not count as a run of the message now there).
    ``calls`` is the session's call log when the caller has read it already.
    """
    forks = _forks_from(session, "replay", context_id, index, message_id)
    if not forks:
        return []
    log = calls if calls is not None else session.calls()
    wanted = {mark.call_id for _, mark in forks}
    by_id = {c.id: c for c in log if c.id in wanted}
    runs = [saved_run(fork, mark, by_id.get(mark.call_id or "")) for fork, mark in forks]
    return sorted(runs, key=lambda s: (s.run.call_id, s.run.sample))


def split_batches(
    items: Iterable[T],
    *,
    key: Callable[[T], str],
    sample: Callable[[T], int | None],
    order: Callable[[T], Any] | None = None,
) -> list[list[T]]:
    """``items`` (forks, or the runs saved in them) split into the calls that made them,
    oldest first: those of one ``key`` (origin, label, overrides, tool modes), in the
    order they were made, cut wherever the sample number starts again (each call numbers
    its samples from 0; a re-run has none, so its runs of one key stay together). The
    order is ``order``'s, else the order ``items`` come in. The one rule the Replay
    page's batches and the fork tree's runs are both told by."""
    ordered = list(items) if order is None else sorted(items, key=order)  # sorted() is stable
    groups: dict[str, list[tuple[int, T]]] = {}
    for place, item in enumerate(ordered):
        groups.setdefault(key(item), []).append((place, item))
    batches: list[list[tuple[int, T]]] = []
    for members in groups.values():
        previous: int | None = None
        for position, (place, item) in enumerate(members):
            number = sample(item)
            if position == 0 or (number is not None and previous is not None and number <= previous):
                batches.append([])
            batches[-1].append((place, item))
            previous = number
    return [[item for _, item in batch] for batch in sorted(batches, key=lambda batch: batch[0][0])]


def replay_batches(runs: Sequence[SavedRun]) -> list[list[SavedRun]]:
    """``runs`` (oldest first) split into the :func:`replay.replay` calls that made them
    (see :func:`split_batches`): their key is the label and the overrides."""
    return split_batches(
        runs,
        key=lambda saved: canonical_json([saved.label, saved.run.overrides]),
        sample=lambda saved: saved.run.sample,
    )


# ── re-runs of the agent ─────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class SavedRerun:
    """One re-run of the agent as the store keeps it (:func:`replay.rerun`'s branch)."""

    result: RerunResult
    """The branch, how it ended and its calls; ``tools`` is empty: which result answered
    each tool call is not saved (:attr:`tools` says the modes it ran with)."""
    overrides: Overrides
    tools: dict[str, Any]
    """The tool modes of the re-run (``ToolModes.as_dict()``), as saved."""
    label: str | None
    started_at: str
    """When its first call started ("" when it made none)."""


def _forks_from(
    session: Session, kind: str, context_id: str, index: int, message_id: str | None
) -> list[tuple[Context, BranchMark]]:
    """The forks marked ``kind`` that ran from message ``index`` of ``context_id``, with
    their marks: a mark made before the context file was changed (its message id
    differs) is not of that message."""
    return [
        (context, mark)
        for context in session.contexts.values()
        if (mark := mark_of(context)) is not None
        and mark.kind == kind
        and mark.of_context == context_id
        and mark.of_index == index
        and (message_id is None or mark.of_message_id in (None, message_id))
    ]


def branch_contexts(session: Session, fork: Context) -> list[str]:
    """The fork and the contexts the re-run went on in (compaction forks of it, each the
    last child of the one before), in order; the last is where the branch ended."""
    branch = [fork.id]
    current = fork
    while True:
        children = [c for c in current.children if c in session.contexts and c not in branch]
        if not children:
            return branch
        current = session.contexts[children[-1]]
        branch.append(current.id)


def _ending(
    session: Session, end: Context, made: Sequence[CallRecord]
) -> tuple[Any, str | None, list[dict[str, Any]]]:
    """The answer, error and failed tool calls of a re-run: from its invocation record
    (our runtime's re-runs), else from its last call and the branch's last message."""
    invocation_id = next((c.invocation_id for c in made if c.invocation_id), None)
    if invocation_id is not None and session.directory is not None:
        record = read_invocation(session.directory, invocation_id)
        if record is not None and record.rerun is not None:
            listed = record.rerun.get(TOOL_FAILURES_KEY)
            failures = [f for f in listed if isinstance(f, dict)] if isinstance(listed, list) else []
            if record.outcome == "ok":
                return record.result, None, failures
            return None, record.error or f"the re-run ended {record.outcome}", failures
    if made and made[-1].error:
        return None, made[-1].error, []
    last = end.messages[-1] if end.messages else None
    if last is not None and last.role == "assistant" and not last.tool_uses():
        return last.text(), None, []
    return None, "the branch ends without an answer (the re-run stopped or was interrupted)", []


def saved_reruns(
    session: Session,
    context_id: str,
    index: int,
    *,
    message_id: str | None = None,
    calls: Iterable[CallRecord] | None = None,
) -> list[SavedRerun]:
    """Every saved re-run of the agent from message ``index`` of ``context_id``, oldest
    first; as :func:`saved_runs` finds replays."""
    forks = _forks_from(session, RERUN_KIND, context_id, index, message_id)
    if not forks:
        return []
    by_context: dict[str, list[CallRecord]] = {}  # one pass over the log, not one a re-run
    for call in calls if calls is not None else session.calls():
        by_context.setdefault(call.context_id, []).append(call)
    reruns: list[SavedRerun] = []
    for fork, mark in forks:
        branch = branch_contexts(session, fork)
        made = sorted((c for cid in branch for c in by_context.get(cid, ())), key=lambda c: c.id)
        answer, error, failures = _ending(session, session.contexts[branch[-1]], made)
        result = RerunResult(branch[-1], fork.id, context_id, index, answer, error, [c.id for c in made])
        result.tool_failures = failures
        reruns.append(
            SavedRerun(
                result,
                overrides_from_record(mark.overrides),
                dict(mark.tools or {}),
                mark.label,
                made[0].started_at if made else "",
            )
        )
    return sorted(reruns, key=lambda r: (r.result.calls[:1], r.result.fork_id))


def diff_saved_rerun(session: Session, result: RerunResult, calls: Iterable[CallRecord]) -> BranchDiff:
    """:func:`replay.diff_rerun` with the call log the caller has read already (it
    would read it again for every re-run shown)."""
    return diff_branches(*branch_of(session, result, list(calls)))
