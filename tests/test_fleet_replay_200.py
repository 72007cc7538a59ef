"""The done-when of issue 27 point 2: a suite of 200 recorded calls, replayed against the
real local model (deterministic settings, temperature 0), gives the same report on the
local engine (two worker processes) and on a two-worker Ray cluster.

At 200 calls this file takes over two minutes: 400 model calls, answered one at a time by
the one local model server on a shared two-core machine. ``make test`` runs the same
comparison on a suite of 40 (20 sessions of two calls); ``SOAPWB_FLEET=full`` (``make
fleet``) runs the 200. The smaller comparisons (Dask, --verify, --model) are in
``test_fleet_replay.py``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleet import without_timing
from local_model import LocalModelServer
from tests.fleet_clusters import ray_cluster  # noqa: F401  (a module fixture)
from tests.fleet_stores import build_suite_store, copy_of, suite_report

CALLS = 200 if os.environ.get("SOAPWB_FLEET") == "full" else 40


@pytest.fixture(scope="module")
def suite_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sessions of two recorded calls: a suite of CALLS."""
    return build_suite_store(tmp_path_factory.mktemp("fleet-suite") / "store", sessions=CALLS // 2, turns=2)


@pytest.mark.usefixtures("ray_cluster")
def test_a_suite_of_recorded_calls_gives_the_same_report_on_a_ray_cluster_as_locally(
    suite_store: Path, tmp_path: Path, llm_server: LocalModelServer
) -> None:
    local = suite_report(copy_of(suite_store, tmp_path, "a"), llm_server, CALLS, engine="local", workers=2)
    on_ray = suite_report(copy_of(suite_store, tmp_path, "b"), llm_server, CALLS, engine="ray")
    assert len(local["calls"]) == CALLS and local["failed_partitions"] == []
    assert all(row["ok"] and row["text"] for row in local["calls"]), local["calls"][:3]
    assert without_timing(on_ray) == without_timing(local)
    assert local["models"] == [
        {
            "model": "(recorded)",
            "calls": CALLS,
            "check_passed": local["models"][0]["check_passed"],
            "verify_passed": 0,
            "errors": 0,
        }
    ]
