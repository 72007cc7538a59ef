"""The mark the workbench leaves on a context it made, so it is never taken for the
agent's own history: a replay's fork, a re-run's branch, a continued conversation, the
copy a re-run's live tool ran another object in.

The mark is a dict in the context file's ``extra["soapwb_replay"]`` (peteos keeps
``extra`` as it is). :func:`set_mark` is its one writer and :func:`mark_of` its one
reader; a mark edited by hand into the wrong shape reads with the wrong fields as None,
so its context still shows as ours.

A replay's mark has no ``kind`` key (the first marks had none); the others name theirs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from soap_core._context import Context

REPLAY_KEY = "soapwb_replay"
"""The key of ``Context.extra`` that holds the mark."""
BranchKind = Literal["replay", "rerun", "continue", "rerun-callee"]
KINDS: tuple[BranchKind, ...] = ("replay", "rerun", "continue", "rerun-callee")


@dataclass(frozen=True)
class BranchMark:
    """Where a context of ours came from and how it was made."""

    kind: str
    """One of :data:`KINDS`; a mark of a kind this version does not know keeps its name."""
    of_context: str | None
    """The context whose message it re-ran (or went on from)."""
    of_index: int | None
    """That message's index there (for a continued conversation: where the branch starts)."""
    of_message_id: str | None = None
    of_invocation: str | None = None
    """A re-run of our runtime: the invocation it re-ran."""
    label: str | None = None
    """The experiment's name: ``noise band``, ``drift keep-last at call 3``."""
    overrides: Mapping[str, Any] | None = None
    """``Overrides.as_dict()``: what the run changed (replays and re-runs)."""
    tools: Mapping[str, Any] | None = None
    """``ToolModes.as_dict()``: how a re-run's tools were answered."""
    sample: int | None = None
    """A replay: its sample's number in its batch, from 0."""
    call_id: str | None = None
    """A replay: the id of its call record."""
    error: str | None = None
    """A replay whose call failed: the error."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Keys this version does not know, kept as they were."""

    def as_dict(self) -> dict[str, Any]:
        """The mark as the context file holds it."""
        data: dict[str, Any] = {} if self.kind == "replay" else {"kind": self.kind}
        for name in _READERS:
            value = getattr(self, name)
            if value is not None or (name in _ALWAYS and self.kind in ("replay", "rerun")):
                data[name] = dict(value) if isinstance(value, Mapping) else value
        if self.kind in ("replay", "rerun") and data.get("overrides") is None:
            data["overrides"] = {}
        return {**data, **self.extra}

    def failed(self, error: str) -> BranchMark:
        return dataclasses.replace(self, error=error)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _mapping(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


_READERS: dict[str, Callable[[Any], Any]] = {
    "of_context": _text,
    "of_index": _integer,
    "of_message_id": _text,
    "of_invocation": _text,
    "label": _text,
    "overrides": _mapping,
    "tools": _mapping,
    "sample": _integer,
    "call_id": _text,
    "error": _text,
}
"""Each field of a mark after ``kind``, in the order it is written, and how it is read
(a value of the wrong type reads as None)."""
_ALWAYS = ("of_message_id",)
"""Written even when None: a replay's and a re-run's mark always said which message."""


def is_marked(context: Context) -> bool:
    """Whether ``context`` is one the workbench made (whatever its mark holds)."""
    return REPLAY_KEY in context.extra


def mark_of(context: Context) -> BranchMark | None:
    """The mark of a context the workbench made, None for the agent's own contexts (and
    for a mark that is no dict at all)."""
    data = context.extra.get(REPLAY_KEY)
    return read_mark(data) if isinstance(data, Mapping) else None


def read_mark(data: Mapping[str, Any]) -> BranchMark:
    """A mark as a context file holds it (values of the wrong type read as None)."""
    kind = data.get("kind")
    return BranchMark(
        kind=kind if isinstance(kind, str) else "replay",
        **{name: read(data.get(name)) for name, read in _READERS.items()},
        extra={k: v for k, v in data.items() if k not in _READERS and k != "kind"},
    )


def set_mark(context: Context, mark: BranchMark) -> None:
    """Mark ``context`` as the workbench's (replacing any mark it had)."""
    context.extra[REPLAY_KEY] = mark.as_dict()


APP_BRANCH_KEY = "soapwb_app_branch"
"""The key of ``Context.extra`` an importer sets on a fork the app itself made as a
branch (LangGraph's ``update_state``): not the workbench's, and not a compaction."""


def set_app_branch(context: Context, framework: str, how: str) -> None:
    """Say that ``framework``'s app branched into ``context`` (``how``: its own word)."""
    context.extra[APP_BRANCH_KEY] = {"framework": framework, "how": how}


def app_branch(context: Context) -> Mapping[str, Any] | None:
    """What :func:`set_app_branch` said of ``context``; None for any other context."""
    data = context.extra.get(APP_BRANCH_KEY)
    return data if isinstance(data, Mapping) else None
