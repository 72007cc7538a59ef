"""Stores for the fleet tests: many short recorded calls, written in a second or two by
the real runtime against a scripted endpoint (the files are real; the answers are
fixed), so that a replay suite of 200 calls against the local model stays quick: the
requests are a few dozen tokens each."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from fleet import (
    Location,
    ReplayPartition,
    ReplayPlan,
    by_session,
    replay_report,
    replay_task,
    run_partitions,
    select_sessions,
    suite_entries,
)
from local_model import LocalModelServer
from soap_core import Store
from soap_core.runtime import AgenticObject, ModelSettings, Runtime
from tests.scripted import ScriptedEndpoint, says

QUESTIONS = ("Name a colour.", "Name a fruit.", "Say yes.", "Count to two.", "Name a day.")


class Terse(AgenticObject):
    system_prompt = "You answer in one word."
    settings = ModelSettings(max_tokens=4, temperature=0.0)


def build_suite_store(root: Path, *, sessions: int, turns: int) -> Path:
    """``sessions`` sessions of ``turns`` recorded calls each (one call per turn)."""
    answers = [says(f"Answer {n}.") for n in range(sessions * turns)]
    runtime = Runtime(root, ScriptedEndpoint(*answers))  # type: ignore[arg-type]
    for number in range(sessions):
        agent = Terse(runtime=runtime, object_id=f"terse-{number}")
        for turn in range(turns):
            agent.invoke(QUESTIONS[(number + turn) % len(QUESTIONS)], thread="main")
    return root


def copy_of(store: Path, tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(store, tmp_path / name))


def suite_report(store: Path, server: LocalModelServer, limit: int, **engine: Any) -> dict[str, Any]:
    entries = suite_entries(Store(store), select_sessions(Store(store), "all"))[:limit]
    plan = ReplayPlan((server.base_url,))
    partitions = {
        ref: ReplayPartition(plan, ref, tuple(group), n)
        for n, (ref, group) in enumerate(by_session(entries).items())
    }
    return replay_report(run_partitions(Location(str(store)), partitions, replay_task, **engine), plan.models)
