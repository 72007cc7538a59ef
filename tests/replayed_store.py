"""A copy of the workbench store after the replays a person makes in an afternoon, run
against the real local model: three samples at a higher temperature, an edit of the
last user message, and a two-sample noise band, beside the store's own edited replay.
The Fork tree tests look at how these are grouped and named."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from replay import Overrides, ReplayRun, materialize, replay
from soap_core import Store
from soap_core.runtime import LLMEndpoint


@dataclass(frozen=True)
class ReplayedStore:
    root: Path
    session: str
    active: str
    index: int
    """The message every run replayed."""
    edited_message: int
    """The message the edited runs changed (the store's own edit and ours)."""
    hot: tuple[str, ...]
    edited: tuple[str, ...]
    noise: tuple[str, ...]


def _forks(runs: list[ReplayRun]) -> tuple[str, ...]:
    assert all(run.ok for run in runs), [run.error for run in runs]
    return tuple(run.fork_id for run in runs)


def replayed_store(workbench_store: Path, target: Path, base_url: str) -> ReplayedStore:
    shutil.copytree(workbench_store, target)
    store = Store(target)
    [summary] = [s for s in store.sessions() if s.role == "Analyst"]
    session = store.load_session(summary.uuid)
    found = materialize(session, None, -1)
    endpoint = LLMEndpoint(base_url, max_retries=0)
    hot = replay(store, session, found, endpoint, Overrides(temperature=0.9), samples=3)
    last_user = len(found.messages) - 1
    edited = replay(store, session, found, endpoint, Overrides(edits={last_user: "Count twice."}))
    noise = replay(store, session, found, endpoint, Overrides(), samples=2, label="noise band")
    return ReplayedStore(
        target,
        session.uuid,
        session.active_context_id or "",
        found.index,
        last_user,
        _forks(hot),
        _forks(edited),
        _forks(noise),
    )
