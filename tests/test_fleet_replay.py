"""Replay suites on the engines, against the real local model (deterministic settings,
temperature 0: the same request gets the same answer, so reports compare equal).

The 200-call suite (local against Ray) is in ``test_fleet_replay_200.py``; here the Dask
comparison and the ``--verify``/``--model`` tests use smaller suites to keep the file
fast."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleet import (
    select_sessions,
    suite_entries,
    without_timing,
    write_suite,
)
from local_model import LocalModelServer
from soap_core import Store
from soapwb.cli import main
from tests.fleet_clusters import dask_address  # noqa: F401  (a module fixture)
from tests.fleet_stores import build_suite_store, copy_of, suite_report


@pytest.fixture(scope="module")
def suite_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 sessions of two recorded calls: a suite of 24."""
    return build_suite_store(tmp_path_factory.mktemp("fleet-suite") / "store", sessions=12, turns=2)


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
