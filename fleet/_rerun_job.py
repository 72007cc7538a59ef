"""``rerun --suite`` over partitions: the agent again from each entry's answer.

A partition is one session's entries, re-run one after the other, so that only one
worker writes a session's files (a re-run saves its branch into the session). A row
says how the re-run ended and how far its branch is from the original's; the branch
ids go to ``timing`` (they differ from run to run)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fleet._engines import PartitionResult
from fleet._replay_job import ReplayPlan, plan_endpoint
from fleet._store import Location, open_location
from fleet._suite import SuiteEntry
from fleet._verify_job import failed_partitions
from replay import Overrides, ToolModes, diff_rerun, rerun
from soap_core import SoapError


@dataclass(frozen=True)
class RerunPartition:
    """One session's entries, the endpoint plan and the tool modes."""

    plan: ReplayPlan
    session: str
    entries: tuple[SuiteEntry, ...]
    index: int
    tools: ToolModes = field(default_factory=ToolModes)


def rerun_task(location: Location, partition: RerunPartition) -> list[dict[str, Any]]:
    """Re-run every entry of the partition's session with the plan's first model."""
    plan = partition.plan
    store = open_location(location)
    endpoint = plan_endpoint(plan, partition.index)
    overrides = Overrides(plan.models[0], plan.temperature, plan.seed, plan.max_tokens)
    rows = []
    for entry in partition.entries:
        row: dict[str, Any] = {"session": entry.session, "context": entry.context, "at": entry.at}
        try:
            session = store.load_session(entry.session, require_active=False)
            result = rerun(
                store, session, entry.context, entry.at, endpoint, overrides=overrides, tools=partition.tools
            )
            diff = diff_rerun(store.load_session(entry.session, require_active=False), result)
        except SoapError as exc:
            rows.append(row | {"ok": False, "error": str(exc), "answer": None, "calls": 0, "distance": None})
            continue
        rows.append(
            row
            | {
                "ok": result.ok,
                "error": result.problem,
                "answer": result.answer,
                "calls": len(result.calls),
                "distance": diff.distance,
                "beyond": diff.distance > plan.threshold,
                "timing": {"branch_id": result.branch_id, "fork_id": result.fork_id},
            }
        )
    return rows


def rerun_report(results: list[PartitionResult]) -> dict[str, Any]:
    """The rows in suite order (partitions in order, entries in order), and the failures."""
    rows = [row for r in results if r.ok for row in r.value]
    return {
        "reruns": rows,
        "failed": sum(1 for r in rows if not r["ok"]),
        "beyond_threshold": sum(1 for r in rows if r.get("beyond")),
        "failed_partitions": failed_partitions(results),
    }
