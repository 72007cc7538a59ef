"""Replay suites on the engines, against the real local model (deterministic settings,
temperature 0: the same request gets the same answer, so reports compare equal).

The 200-call suite runs on the local engine and on a two-worker Ray cluster (about a
minute each here, the model answering one request at a time); the Dask comparison and
the ``--verify``/``--model`` tests use a smaller suite to keep the file fast."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

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
    without_timing,
    write_suite,
)
from local_model import LocalModelServer
from soap_core import Store
from soapwb.cli import main
from tests.fleet_clusters import dask_address, ray_cluster  # noqa: F401  (module fixtures)
from tests.fleet_stores import build_suite_store


@pytest.fixture(scope="module")
def suite_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """100 sessions of two recorded calls: a suite of 200."""
    return build_suite_store(tmp_path_factory.mktemp("fleet-suite") / "store", sessions=100, turns=2)


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


@pytest.mark.usefixtures("ray_cluster")
def test_a_suite_of_200_recorded_calls_gives_the_same_report_on_a_ray_cluster_as_locally(
    suite_store: Path, tmp_path: Path, llm_server: LocalModelServer
) -> None:
    local = suite_report(copy_of(suite_store, tmp_path, "a"), llm_server, 200, engine="local", workers=2)
    on_ray = suite_report(copy_of(suite_store, tmp_path, "b"), llm_server, 200, engine="ray")
    assert len(local["calls"]) == 200 and local["failed_partitions"] == []
    assert all(row["ok"] and row["text"] for row in local["calls"]), local["calls"][:3]
    assert without_timing(on_ray) == without_timing(local)
    assert local["models"] == [
        {
            "model": "(recorded)",
            "calls": 200,
            "check_passed": local["models"][0]["check_passed"],
            "verify_passed": 0,
            "errors": 0,
        }
    ]


def test_each_replay_of_a_suite_is_saved_as_a_fork_of_its_session(
    suite_store: Path, tmp_path: Path, llm_server: LocalModelServer
) -> None:
    store = copy_of(suite_store, tmp_path, "c")
    report = suite_report(store, llm_server, 8, engine="local", workers=2)
    forks = {row["timing"]["fork_id"] for row in report["calls"]}
    assert len(forks) == 8 and None not in forks
    saved = {
        context_id
        for summary in Store(store).sessions()
        for context_id in Store(store).load_session(summary.ref, require_active=False).contexts
    }
    assert forks <= saved


def test_a_small_suite_gives_the_same_report_on_a_dask_cluster_as_locally(
    suite_store: Path, tmp_path: Path, llm_server: LocalModelServer, request: pytest.FixtureRequest
) -> None:
    address = request.getfixturevalue("dask_address")
    local = suite_report(copy_of(suite_store, tmp_path, "d"), llm_server, 24, engine="local", workers=2)
    on_dask = suite_report(
        copy_of(suite_store, tmp_path, "e"), llm_server, 24, engine="dask", address=address
    )
    assert len(local["calls"]) == 24
    assert without_timing(on_dask) == without_timing(local)


VERIFY = (
    'python -c "import os, sys; text = sys.stdin.read(); '
    "sys.exit(0 if text and os.environ['SOAPWB_MODEL'] == 'alpha' and os.environ['SOAPWB_AT'].isdigit() else 1)\""
)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().out


def test_replay_suite_shows_a_table_per_model_with_the_verify_commands_verdicts(
    suite_store: Path, tmp_path: Path, llm_server: LocalModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    store = copy_of(suite_store, tmp_path, "f")
    entries = suite_entries(Store(store), select_sessions(Store(store), "all"))[:4]
    suite = tmp_path / "suite.jsonl"
    suite.write_text(write_suite(entries), "utf-8")
    argv = ("replay", "--suite", suite, "--store", store, "--base-url", llm_server.base_url, "--workers", "2")
    models = ("--model", "alpha", "--model", "beta", "--verify", VERIFY)
    code, out = run_cli(capsys, *argv, *models)
    assert code == 1  # beta fails the command
    header, alpha, beta = out.splitlines()[:3]
    assert header.split() == [
        "MODEL",
        "CALLS",
        "CHECK",
        "PASSED",
        "VERIFY",
        "PASSED",
        "ERRORS",
        "MEAN",
        "LATENCY",
    ]
    assert alpha.split()[:5] == ["alpha", "4", alpha.split()[2], "4", "0"]
    assert beta.split()[:5] == ["beta", "4", beta.split()[2], "0", "0"]
    code, out = run_cli(capsys, *argv, "--model", "alpha", "--verify", VERIFY, "--json")
    report = json.loads(out)
    assert code == 0
    assert [row["verify"] for row in report["calls"]] == [{"verdict": "pass", "detail": None}] * 4
    assert [row["model"] for row in report["calls"]] == ["alpha"] * 4


def test_a_verify_command_that_exits_otherwise_is_an_error_not_a_failure(
    suite_store: Path, tmp_path: Path, llm_server: LocalModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    store = copy_of(suite_store, tmp_path, "g")
    entries = suite_entries(Store(store), select_sessions(Store(store), "all"))[:1]
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps([e.as_dict() for e in entries]), "utf-8")
    code, out = run_cli(
        capsys,
        "replay",
        "--suite",
        suite,
        "--store",
        store,
        "--base-url",
        llm_server.base_url,
        "--verify",
        "echo broken >&2; exit 3",
        "--json",
        "--workers",
        "1",
    )
    [row] = json.loads(out)["calls"]
    assert code == 1
    assert row["verify"] == {"verdict": "error", "detail": "exit 3: broken"}
