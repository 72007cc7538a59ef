"""``replay --suite`` over partitions: each session's entries re-sent to each model.

Every run is saved as a fork, as ``soapwb replay`` saves it; a partition holds all the
entries of one session, so only one worker ever writes a session's files. A row says
what the run answered, how far that is from the recorded answer, and the verdicts of
``--check`` and of the ``--verify`` command; the fork, call id and latency go to the
row's ``timing`` part, which differs from run to run and is left out when two reports
are compared.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Any

from fleet._engines import PartitionResult
from fleet._store import Location, open_location
from fleet._suite import SuiteEntry
from replay import Output, Overrides, diff_outputs, materialize_at, replay
from soap_core import Session, SoapError, Store
from soap_core.runtime import LLMEndpoint

RECORDED_MODEL = "(recorded)"
"""The model column of runs sent to each call's recorded model (no ``--model``)."""

VERIFY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ReplayPlan:
    """What every partition of a suite shares: the endpoints, models and verdicts."""

    base_urls: tuple[str, ...]
    """One endpoint per worker where there are several (the partition's index picks)."""
    models: tuple[str | None, ...] = (None,)
    temperature: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    threshold: float = 0.0
    verify: str | None = None
    timeout: float = 120.0
    max_retries: int = 2
    max_response_bytes: int = 16 * 1024 * 1024


@dataclass(frozen=True)
class ReplayPartition:
    """One session's entries and the plan, with the partition's place in the suite."""

    plan: ReplayPlan
    session: str
    entries: tuple[SuiteEntry, ...]
    index: int


def replay_task(location: Location, partition: ReplayPartition) -> list[dict[str, Any]]:
    """Re-send each entry of the partition's session to each model of the plan."""
    plan = partition.plan
    store = open_location(location)
    endpoint = plan_endpoint(plan, partition.index)
    session = store.load_session(partition.session, require_active=False)
    return [
        _run_one(store, session, entry, model, endpoint, plan)
        for entry in partition.entries
        for model in plan.models
    ]


def plan_endpoint(plan: ReplayPlan, index: int) -> LLMEndpoint:
    """The endpoint of partition ``index``: the plan's endpoints taken in turn, so that
    with one model server per worker the partitions spread over the servers."""
    return LLMEndpoint(
        plan.base_urls[index % len(plan.base_urls)],
        timeout=plan.timeout,
        max_retries=plan.max_retries,
        max_response_bytes=plan.max_response_bytes,
    )


def _run_one(
    store: Store,
    session: Session,
    entry: SuiteEntry,
    model: str | None,
    endpoint: LLMEndpoint,
    plan: ReplayPlan,
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "session": entry.session,
        "context": entry.context,
        "at": entry.at,
        "model": model or RECORDED_MODEL,
    }
    try:
        found = materialize_at(session, entry.context, entry.at)
    except SoapError as exc:
        return row | _failed(f"cannot address the call: {exc}")
    row |= {"context": found.context_id, "index": found.index}
    overrides = Overrides(model, plan.temperature, plan.seed, plan.max_tokens)
    [run] = replay(store, session, found, endpoint, overrides, samples=1, concurrency=1)
    timing = {
        "fork_id": run.fork_id if run.saved else None,
        "call_id": run.call_id,
        "latency_s": run.latency_s,
    }
    if not run.ok:
        return row | _failed(run.error) | {"timing": timing}
    messages = session.contexts[found.context_id].messages
    call = found.call
    original = Output.of(messages[found.index], call.usage if call else None) if found.message_id else None
    distance = diff_outputs(original, Output.of(run.output)).distance if original is not None else None
    text = run.output.text() if run.output else ""
    return row | {
        "ok": True,
        "error": None,
        "text": text,
        "tool_calls": [[u.name, u.parsed_arguments()] for u in run.output.tool_uses()] if run.output else [],
        "distance": distance,
        "check": None if distance is None else distance <= plan.threshold,
        "verify": _verify(plan.verify, text, entry.session, found.index, row["model"]),
        "tokens": _tokens(run.usage),
        "timing": timing,
    }


def _failed(error: str | None) -> dict[str, Any]:
    return {
        "ok": False,
        "error": error,
        "text": None,
        "tool_calls": [],
        "distance": None,
        "check": None,
        "verify": None,
        "tokens": None,
    }


def _tokens(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    if not usage:
        return None
    return {k: usage[k] for k in ("prompt_tokens", "completion_tokens") if k in usage}


def _verify(command: str | None, text: str, session: str, index: int, model: str) -> dict[str, Any] | None:
    """The ``--verify`` command's verdict on one answer: the text on its stdin, the call
    in its environment; exit 0 passes, 1 fails, anything else is an error."""
    if command is None:
        return None
    env = {**os.environ, "SOAPWB_SESSION": session, "SOAPWB_AT": str(index), "SOAPWB_MODEL": model}
    try:
        done = subprocess.run(
            command, shell=True, input=text, text=True, capture_output=True, env=env, timeout=VERIFY_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return {"verdict": "error", "detail": f"no exit within {VERIFY_TIMEOUT_S:g} s"}
    verdict = {0: "pass", 1: "fail"}.get(done.returncode, "error")
    detail = None if verdict == "pass" else (done.stderr.strip() or done.stdout.strip())[-300:] or None
    if verdict == "error":
        detail = f"exit {done.returncode}" + (f": {detail}" if detail else "")
    return {"verdict": verdict, "detail": detail}


def replay_report(results: list[PartitionResult], models: tuple[str | None, ...]) -> dict[str, Any]:
    """Rows in a stable order (session, context, index, model), a summary per model,
    and the failed partitions; timings apart, under each row's ``timing``."""
    from fleet._verify_job import failed_partitions

    rows = [row for r in results if r.ok for row in r.value]
    order = {name or RECORDED_MODEL: n for n, name in enumerate(models)}
    rows.sort(key=lambda r: (r["session"], r["context"] or "", r.get("index", -1), order.get(r["model"], 0)))
    summary = []
    for name in order:
        mine = [r for r in rows if r["model"] == name]
        summary.append(
            {
                "model": name,
                "calls": len(mine),
                "check_passed": sum(1 for r in mine if r["check"]),
                "verify_passed": sum(1 for r in mine if r["verify"] and r["verify"]["verdict"] == "pass"),
                "errors": sum(1 for r in mine if not r["ok"]),
            }
        )
    return {"models": summary, "calls": rows, "failed_partitions": failed_partitions(results)}


def mean_latency(rows: list[dict[str, Any]], model: str) -> float | None:
    """The mean latency of a model's answered calls (timing: shown, never compared)."""
    seen = [r["timing"]["latency_s"] for r in rows if r["model"] == model and r.get("timing")]
    seen = [s for s in seen if s is not None]
    return sum(seen) / len(seen) if seen else None


def without_timing(report: dict[str, Any]) -> dict[str, Any]:
    """The part of a report that must be the same on every engine."""
    return report | {"calls": [{k: v for k, v in r.items() if k != "timing"} for r in report["calls"]]}
