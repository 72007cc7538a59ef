"""How the workbench names a session's contexts: by their place and by what made them.

After a few replays a session holds dozens of contexts whose ids say nothing, so every
picker, tree and heading names them instead. The active context is ``main``, the first
one ``root``, other forks ``fork 1``, ``fork 2`` in tree order, and the forks a replay,
re-run or drift run saved are named by that run and what it changed:
``replay of main@12: temperature 0.9``.

A run is the batch of forks one call of ``replay.replay`` (or ``replay.rerun``) saved:
they share their origin, label, overrides and tool modes, and a replay's samples count
up from 0 in the order of their call ids, which begin with the time they were made. So
the forks of one origin and settings split into runs wherever the sample number starts
again. A re-run records no sample and no call id: its forks of the same origin and
settings (the branches of a noise band) make one run.

Plain functions without Streamlit; names are computed once per session object and
state (one pass over its fork tree), since a picker asks for one label per option.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from replay._ranges import message_ranges_text
from replay._saved import split_batches
from soap_core import BranchMark, ContextNode, Session, fork_tree, mark_of

MAIN = "main"
"""The name of the active context."""

_VALUE_LIMIT = 40
_DATE_PREFIX = re.compile(r"^\d{8}-(?=[0-9A-Za-z]{8}(?:-|$))")
"""A date before an id's first block of eight; a uuid4 that begins with eight digits
keeps them (its next block has four)."""
_CALL_ID_TIME = re.compile(r"^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})")
_ISO_MINUTE = re.compile(r"^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2})")

_VERBS = {"rerun": "re-run of", "continue": "continued from", "rerun-callee": "callee copy of"}
"""How each kind of replay record reads before its origin; a plain replay is ``replay of``."""

_NOUNS = {"rerun": "runs", "continue": "branches", "rerun-callee": "copies"}
"""What the forks of a run are called when it has several; a replay's are samples."""


def short_id(identifier: str | None) -> str:
    """A session or context id cut to its first block after peteos's ``YYYYMMDD-`` date
    prefix (every 0.6 id starts with the same date), for labels."""
    if not identifier:
        return "-"
    return _DATE_PREFIX.sub("", identifier)[:8]


def minute(stamp: str | None) -> str | None:
    """An ISO timestamp or a record id (``YYYYMMDDTHHMMSS…``) as ``YYYY-MM-DD HH:MM``.

    Record ids are made from the UTC time; they are shown in local time, as message
    timestamps are written (peteos and our runtime both write local naive times)."""
    if not stamp:
        return None
    found = _CALL_ID_TIME.match(stamp)
    if found:
        year, month, day, hour, mins = (int(part) for part in found.groups())
        try:
            moment = datetime(year, month, day, hour, mins, tzinfo=UTC).astimezone()
        except (ValueError, OverflowError):
            return None
        return moment.strftime("%Y-%m-%d %H:%M")
    iso = _ISO_MINUTE.match(stamp)
    return f"{iso.group(1)} {iso.group(2)}" if iso else None


def _cut(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= _VALUE_LIMIT else text[: _VALUE_LIMIT - 1] + "…"


def _numbers(values: Any) -> list[str]:
    """Message indices as the record keeps them (edit keys, drop lists), sorted as numbers."""
    items = list(values) if isinstance(values, (Mapping, list, tuple)) else []
    return sorted((_cut(v) for v in items), key=lambda v: (not v.isdigit(), int(v) if v.isdigit() else 0, v))


def _messages_phrase(what: str, indices: list[str]) -> str:
    noun = "message" if len(indices) == 1 else "messages"
    if all(i.isascii() and i.isdigit() for i in indices):  # runs as ranges: "messages #1-#14990"
        return f"{what} {noun} {message_ranges_text((int(i) for i in indices), mark='')}"
    return f"{what} {noun} {', '.join(indices)}"


def _tool_phrases(tools: Any) -> list[str]:
    """What a re-run's tool modes change from the default (recorded results, stop)."""
    if not isinstance(tools, Mapping):
        return []
    phrases = []
    if tools.get("default") not in (None, "recorded"):
        phrases.append(f"tools {_cut(tools['default'])}")
    per_tool = tools.get("per_tool")
    if isinstance(per_tool, Mapping):
        phrases.extend(f"{_cut(name)} {_cut(mode)}" for name, mode in per_tool.items())
    injected = tools.get("injected")
    if isinstance(injected, Mapping):
        phrases.extend(f"{_cut(name)} injected" for name in injected)
    if tools.get("unserved") not in (None, "stop"):
        phrases.append(f"unrecorded tools {_cut(tools['unserved'])}")
    return phrases


def change_phrases(mark: BranchMark) -> list[str]:
    """What a replay or re-run changed, each as a few words: ``edit of message 12``,
    ``temperature 0.2``, ``model X``, ``system prompt``, ``tools live``."""
    overrides = mark.overrides or {}
    phrases = []
    edited = [overrides.get(key) for key in ("edits", "tool_calls", "tool_results")]
    if any(edited):
        numbers = _numbers(list({n for keys in edited if keys for n in _numbers(keys)}))
        phrases.append(_messages_phrase("edit of", numbers))
    if overrides.get("drops"):
        phrases.append(_messages_phrase("dropped", _numbers(overrides["drops"])))
    if overrides.get("system_prompt") is not None:
        phrases.append("system prompt")
    for key in ("model", "temperature", "seed", "max_tokens"):
        if overrides.get(key) is not None:
            phrases.append(f"{key.replace('_', ' ')} {_cut(overrides[key])}")
    return phrases + _tool_phrases(mark.tools)


@dataclass(frozen=True)
class ForkRun:
    """The forks one replay, re-run or drift run saved, in sample order."""

    fork_ids: tuple[str, ...]
    kind: str
    """``replay``, or the record's kind: ``rerun``, ``continue``, ``rerun-callee``."""
    of_context: str | None
    of_index: int | None
    label: str | None
    """The record's own label: ``noise band``, ``drift keep-last at call 3``."""
    changes: tuple[str, ...]
    started: str | None
    """When it ran (``YYYY-MM-DD HH:MM``, UTC for replays), if the record tells."""
    failed: int
    """Forks whose record holds an error."""

    @property
    def id(self) -> str:
        """The run's first fork: what opening the run opens."""
        return self.fork_ids[0]

    @property
    def count_phrase(self) -> str:
        """``3 samples`` (``2 runs`` for re-runs); empty for a run of one fork."""
        count = len(self.fork_ids)
        if count == 1:
            return ""
        return f"{count} {_NOUNS.get(self.kind, 'samples')}"


def _run_kind(mark: BranchMark) -> str:
    return mark.kind if mark.kind in _VERBS else "replay"


def _run_key(mark: BranchMark) -> str:
    """What the forks of one run share: origin, label, overrides and tool modes."""
    shared = [_run_kind(mark), mark.of_context, mark.of_index, mark.label, mark.overrides, mark.tools]
    return json.dumps(shared, sort_keys=True, ensure_ascii=False, default=str)


def _started(session: Session, context_id: str, mark: BranchMark) -> str | None:
    """The run's time: its call id's, else the first message the run added (one message
    read, never the whole context)."""
    if mark.call_id and minute(mark.call_id):
        return minute(mark.call_id)
    index = mark.of_index
    messages = session.contexts[context_id].message_view
    if index is not None and 0 <= index < len(messages):
        stamp = messages[index].creation_timestamp
        return minute(stamp) if isinstance(stamp, str) else None
    return None


def _order(member: tuple[str, BranchMark]) -> tuple[str, int, str]:
    mark = member[1]
    return (mark.call_id or "", -1 if mark.sample is None else mark.sample, member[0])


def replay_marks(session: Session) -> dict[str, BranchMark]:
    """The mark of every context the workbench made in ``session`` (replays, re-runs,
    continued branches), by context id."""
    return {cid: mark for cid, context in session.contexts.items() if (mark := mark_of(context)) is not None}


def replay_runs(session: Session, marks: Mapping[str, BranchMark] | None = None) -> list[ForkRun]:
    """Every run that saved replay forks in ``session``, oldest first."""
    marks = replay_marks(session) if marks is None else marks
    runs = []
    for batch in split_batches(
        marks.items(), key=lambda m: _run_key(m[1]), order=_order, sample=lambda m: m[1].sample
    ):
        first_id, first = batch[0]
        runs.append(
            ForkRun(
                fork_ids=tuple(cid for cid, _ in batch),
                kind=_run_kind(first),
                of_context=first.of_context or session.contexts[first_id].origin_context_id,
                of_index=first.of_index,
                label=_cut(first.label) if first.label is not None else None,
                changes=tuple(change_phrases(first)),
                started=_started(session, first_id, first),
                failed=sum(1 for _, mark in batch if mark.error),
            )
        )
    return sorted(
        runs, key=lambda run: (run.started is None, run.started or "", _order((run.id, marks[run.id])))
    )


def describe_run(run: ForkRun, names: Mapping[str, str]) -> str:
    """What a run did, without its count: ``replay of main@12: temperature 0.9``; an
    unchanged replay says so, a labelled one (drift, noise band) leads with its label."""
    origin = names.get(run.of_context or "", short_id(run.of_context))
    if ":" in origin or " · " in origin:  # the origin is itself a replay fork
        origin = f"({origin.replace(' · ', ' ')})"
    at = "" if run.of_index is None else f"@{run.of_index}"
    text = f"{_VERBS.get(run.kind, 'replay of')} {origin}{at}"
    if run.label:
        text = f"{run.label}: {text}"
    if run.changes:
        text += ": " + ", ".join(run.changes)
    elif not run.label and run.kind == "replay":
        text += ": unchanged"
    return text


def run_label(run: ForkRun, names: Mapping[str, str]) -> str:
    """A run as one node: ``replay of main@12: temperature 0.9 (3 samples)``."""
    extras = [part for part in (run.count_phrase, f"{run.failed} failed" if run.failed else "") if part]
    return describe_run(run, names) + (f" ({', '.join(extras)})" if extras else "")


@dataclass(frozen=True)
class SessionNames:
    """Every context of a session named, with the replay runs its forks belong to."""

    nodes: tuple[ContextNode, ...]
    names: dict[str, str]
    runs: tuple[ForkRun, ...]
    run_of: dict[str, ForkRun]
    """Replay fork id → its run."""
    run_names: dict[str, str]
    """Run id → :func:`run_label`, with the time added where two runs did the same."""


def _place_names(nodes: Sequence[ContextNode]) -> dict[str, str]:
    """``main`` for the active context, ``root`` for the first, ``fork N`` for the rest."""
    names: dict[str, str] = {}
    counts = {"root": 0, "fork": 0, "discarded": 0}
    for node in nodes:
        if node.kind == "replay":
            continue
        if node.active:
            names[node.id] = MAIN
            continue
        kind = node.kind if node.kind in counts else "fork"
        counts[kind] += 1
        if kind == "root":
            names[node.id] = "root" if counts["root"] == 1 else f"root {counts['root']}"
        elif kind == "discarded":
            names[node.id] = f"discarded fork {counts['discarded']}"
        else:
            names[node.id] = f"fork {counts['fork']}"
    return names


def _name_runs(session: Session, nodes: Sequence[ContextNode]) -> SessionNames:
    names = _place_names(nodes)
    runs = replay_runs(session)
    run_of = {cid: run for run in runs for cid in run.fork_ids}
    described: dict[str, str] = {}
    # A run's origin may itself be a replay fork: name runs in the order their forks
    # appear in the tree, so each origin is named before the runs made from it.
    for node in nodes:
        run = run_of.get(node.id)
        if run is None or run.id in described:
            continue
        described[run.id] = describe_run(run, names)
        for position, cid in enumerate(run.fork_ids, start=1):
            names[cid] = described[run.id] + (
                f" · sample {position} of {len(run.fork_ids)}" if len(run.fork_ids) > 1 else ""
            )
    for run in runs:  # a run the tree did not list (cannot happen, but never unnamed)
        if run.id not in described:
            described[run.id] = describe_run(run, names)
            names.update({cid: described[run.id] for cid in run.fork_ids})
    run_names = {run.id: run_label(run, names) for run in runs}
    alike: dict[str, list[ForkRun]] = {}
    for run in runs:
        alike.setdefault(described[run.id], []).append(run)
    for same in alike.values():
        if len(same) > 1:
            times = [run.started for run in same]
            by_time = None not in times and len(set(times)) == len(times)
            for run in same:
                when = f" · {run.started}" if by_time else f" · run {short_id(run.id)}"
                run_names[run.id] += when
                for cid in run.fork_ids:
                    names[cid] = names[cid].replace(described[run.id], described[run.id] + when, 1)
    return SessionNames(tuple(nodes), names, tuple(runs), run_of, run_names)


_NAMED: weakref.WeakKeyDictionary[Session, tuple[tuple[Any, ...], SessionNames]] = weakref.WeakKeyDictionary()


def _state(session: Session) -> tuple[Any, ...]:
    """What the names depend on and a page may change: the contexts and the active one."""
    last = next(reversed(session.contexts), None) if session.contexts else None
    return (len(session.contexts), last, session.active_context_id)


def session_names(session: Session) -> SessionNames:
    """The names of ``session``'s contexts, computed once per session object and state."""
    state = _state(session)
    cached = _NAMED.get(session)
    if cached is not None and cached[0] == state:
        return cached[1]
    named = _name_runs(session, fork_tree(session))
    _NAMED[session] = (state, named)
    return named
