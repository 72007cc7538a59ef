"""Batch engines: verify and replay-suite throughput with 1, 2 and 4 workers.

``verify`` of a generated store and a replay suite of short recorded calls, run through
:func:`fleet.run_partitions` on the local engine (a process pool) with 1, 2 and 4
workers; each figure is calls per second, and the 2- and 4-worker figures are also
ratios against the 1-worker one. The replay suite runs against one local model server
per worker (started here on free ports; a partition takes the servers in turn), so the
model is not one queue for all workers. The two-worker Ray cluster's figure on the same
verify is given beside them: it pays for Ray's start and its task overhead.

There are no goals: the machine has few cores and is shared, so the ratios say how far
partitioning carries here, not a target.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path
from typing import Any

from benchmarks._harness import Bench, peak_rss_mb
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
    verify_partitions,
    verify_report,
    verify_task,
)
from local_model import LocalModelServer
from soap_core import Store
from soap_core._catalog import is_catalog_file
from soap_gen import generate_store

WORKERS = (1, 2, 4)


def verify_throughput(root: Path, workers: int, **engine: Any) -> float:
    """Calls verified per second, the pool's start included (a user pays for it)."""
    store = Store(root)
    started = time.perf_counter()
    results = run_partitions(
        Location(str(root)), verify_partitions(store), verify_task, workers=workers, **engine
    )
    seconds = time.perf_counter() - started
    report = verify_report(results)
    assert report["mismatches"] == 0 and not report["failed_partitions"], report["failed_partitions"]
    return float(report["calls"]) / seconds


def replay_throughput(root: Path, workers: int, calls: int) -> float:
    """Replays per second with one local model server per worker."""
    store = Store(root)
    entries = suite_entries(store, select_sessions(store, "all"))[:calls]
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(LocalModelServer(deterministic=True)) for _ in range(workers)]
        plan = ReplayPlan(tuple(s.base_url for s in servers))
        partitions = {
            ref: ReplayPartition(plan, ref, tuple(group), n)
            for n, (ref, group) in enumerate(by_session(entries).items())
        }
        started = time.perf_counter()
        results = run_partitions(Location(str(root)), partitions, replay_task, workers=workers)
        seconds = time.perf_counter() - started
    report = replay_report(results, plan.models)
    assert not report["failed_partitions"] and all(row["ok"] for row in report["calls"])
    return len(report["calls"]) / seconds


def figures(bench: Bench, what: str, rates: dict[int, float]) -> None:
    for workers, rate in rates.items():
        bench.figure(f"{what}, {workers} worker{'s' if workers > 1 else ''}", rate, "calls/s")
    for workers in WORKERS[1:]:
        bench.figure(
            f"{what}, {workers} workers against 1",
            rates[workers] / rates[1],
            "x",
            baseline=f"{what}, 1 worker",
        )


VERIFY_RSS_GOAL_MB = 512
"""Per process of a verify: a laptop runs it beside a browser and an editor."""


def verify_memory(bench: Bench, root: Path) -> None:
    """Peak memory of `soapwb verify` of a whole store, against the bytes it reads."""
    size = sum(p.stat().st_size for p in root.rglob("*.json") if not is_catalog_file(p))
    own, worker = peak_rss_mb(["verify", "--store", str(root), "--json", "--workers", "2"])
    rss = max(own, worker)
    bench.figure(
        "`soapwb verify --json` of the whole store, 2 workers: peak memory of its largest process",
        rss,
        "MB",
        f"≤ {VERIFY_RSS_GOAL_MB} MB",
        rss <= VERIFY_RSS_GOAL_MB,
        note=f"the command {own:.0f} MB, its largest worker {worker:.0f} MB; reads every session and call "
        f"record ({size / 1e6:,.0f} MB of JSON), a session at a time per worker",
    )


def run(bench: Bench) -> None:
    from tests.fleet_stores import build_suite_store

    generated = bench.workdir / "fleet-verify"
    if not generated.exists():
        generate_store(
            generated,
            sessions=bench.scale(1000, 300),  # a throughput: the rate, not the size, is the figure
            messages=20,
            fork_rate=0.2,
            chain_depth=3,
            seed=27,
        )
    figures(bench, "verify", {w: verify_throughput(generated, w) for w in WORKERS})
    verify_memory(bench, generated)
    bench.figure("verify, Ray local cluster of 2", verify_throughput(generated, 2, engine="ray"), "calls/s")
    sessions = bench.scale(40, 20)  # a throughput: 80 calls at each worker count
    suite = bench.workdir / "fleet-suite"
    if not suite.exists():
        build_suite_store(suite, sessions=sessions, turns=2)
    rates = {}
    for workers in WORKERS:
        copy = bench.workdir / f"fleet-suite-{workers}"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(suite, copy)
        rates[workers] = replay_throughput(copy, workers, 2 * sessions)
    figures(bench, "replay suite", rates)
