"""The batch commands on the engines, as a user runs them: ``verify --engine``,
``rerun --suite``, ``compact --sessions`` and ``suite``, the same report on the local
engine and on a cluster."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from local_model import LocalModelServer
from soap_core import Store
from soap_gen import generate_store
from soapwb.cli import main
from tests.cli_process import soapwb
from tests.fleet_stores import build_suite_store


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fleet-cli") / "store"
    generate_store(root, sessions=6, messages=14, fork_rate=0.3, chain_depth=2, seed=5, processes=1)
    return root


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_suite_store(tmp_path_factory.mktemp("fleet-cli-suite") / "store", sessions=3, turns=2)


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    out, err = capsys.readouterr()
    return code, out, err


def test_verify_json_is_the_same_on_a_two_worker_ray_cluster_as_locally(generated: Path) -> None:
    local = soapwb("verify", "--store", generated, "--engine", "local", "--workers", "2", "--json")
    on_ray = soapwb("verify", "--store", generated, "--engine", "ray", "--workers", "2", "--json")
    assert local.returncode == 0, local.stderr
    assert on_ray.returncode == 0, on_ray.stderr
    assert json.loads(on_ray.stdout) == json.loads(local.stdout)
    assert json.loads(local.stdout)["calls"] > 20


def test_verify_text_counts_the_calls_as_before(generated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "verify", "--store", generated, "--workers", "2")
    calls = json.loads(run(capsys, "verify", "--store", generated, "--json")[1])["calls"]
    assert code == 0
    assert out.splitlines()[-1] == f"{calls} of {calls} recorded calls match"


def test_an_engine_whose_library_is_missing_says_what_to_install(
    generated: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)
    code, _, err = run(capsys, "verify", "--store", generated, "--engine", "dask")
    assert code == 2
    assert "pip install 'soap-workbench[cluster]'" in err
    assert "Traceback" not in err


def test_suite_writes_every_recorded_call_of_the_sessions_a_query_selects(
    small_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "suite", "--sessions", "all", "--store", small_store)
    entries = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(entries) == 6
    assert {e["session"].split("/")[0] for e in entries} == {"Terse"}
    assert [e["at"] for e in entries] == [3, 5] * 3  # each session's two answers, in log order
    _, by_text, _ = run(capsys, "suite", "--sessions", "name a fruit", "--store", small_store)
    fruit = {json.loads(line)["session"] for line in by_text.splitlines()}
    assert 0 < len(fruit) < 3
    _, none, _ = run(capsys, "suite", "--sessions", "role:Nobody", "--store", small_store)
    assert none == ""


def without_timing(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "timing"} for row in rows]


def test_rerun_suite_gives_the_same_report_on_dask_as_locally(
    small_store: Path, tmp_path: Path, llm_server: LocalModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = tmp_path / "suite.jsonl"
    assert run(capsys, "suite", "--sessions", "all", "--store", small_store, "--out", suite)[0] == 0
    reports = {}
    for engine in ("local", "dask"):
        store = shutil.copytree(small_store, tmp_path / engine)
        code, out, err = run(
            capsys,
            "rerun",
            "--suite",
            suite,
            "--store",
            store,
            "--base-url",
            llm_server.base_url,
            "--engine",
            engine,
            "--workers",
            "2",
            "--json",
        )
        assert code == 0, err
        reports[engine] = json.loads(out)
    rows = reports["local"]["reruns"]
    assert len(rows) == 6 and all(r["ok"] and r["calls"] == 1 for r in rows)
    assert without_timing(reports["dask"]["reruns"]) == without_timing(rows)
    branches = {r["timing"]["branch_id"] for r in rows}
    session = Store(tmp_path / "local").load_session(rows[0]["session"], require_active=False)
    assert rows[0]["timing"]["branch_id"] in session.contexts and len(branches) == 6


def test_compact_over_sessions_gives_the_same_table_on_dask_as_locally(
    generated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = (
        "compact",
        "--sessions",
        "all",
        "--strategy",
        "rolling-messages:6",
        "--store",
        generated,
        "--json",
    )
    local = run(capsys, *argv, "--workers", "2")
    on_dask = run(capsys, *argv, "--engine", "dask", "--workers", "2")
    assert local[0] == on_dask[0] == 0
    assert json.loads(on_dask[1]) == json.loads(local[1])
    rows = json.loads(local[1])["strategies"]
    assert len(rows) == 2 * len(Store(generated).sessions())
    assert {r["strategy"] for r in rows} == {"none", "rolling-messages:6"}


def test_suite_and_session_options_are_refused_together(
    small_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = tmp_path / "suite.jsonl"
    suite.write_text('{"session": "x", "at": 1}\n', "utf-8")
    code, _, err = run(capsys, "replay", "x", "--suite", suite, "--store", small_store)
    assert code == 2 and "--suite names the calls itself" in err
    ref = Store(small_store).sessions()[0].ref
    code, _, err = run(
        capsys, "replay", ref, "--at", "3", "--model", "a", "--model", "b", "--store", small_store
    )
    assert code == 2 and "several --model are for --suite" in err
    suite.write_text('{"session": "x"}\n', "utf-8")
    code, _, err = run(capsys, "replay", "--suite", suite, "--store", small_store)
    assert code != 0 and "suite.jsonl" in err and "Traceback" not in err


def test_verify_of_a_store_on_s3_gives_on_dask_workers_the_report_of_its_local_copy(
    generated: Path, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers reach the bucket with the options the location carries: the endpoint
    is in no environment variable the workers could inherit."""
    from fleet import Location, run_partitions, verify_partitions, verify_report, verify_task
    from soap_core import STORAGE_OPTIONS_ENV, open_store
    from tests.test_store_backends import upload

    monkeypatch.delenv(STORAGE_OPTIONS_ENV, raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    url = s3.fresh_prefix()
    upload(s3, generated, url)
    location = Location(url, s3.options)
    partitions = verify_partitions(open_store(url, s3.options))
    on_dask = run_partitions(location, partitions, verify_task, engine="dask", workers=2, retries=0)
    local = Location(str(generated))
    here = run_partitions(local, verify_partitions(Store(generated)), verify_task, workers=1, retries=0)
    assert all(r.ok for r in on_dask), [r.error for r in on_dask]
    assert verify_report(on_dask) == verify_report(here)
    assert verify_report(here)["calls"] > 20


def test_soapwb_verify_on_s3_passes_its_storage_options_to_the_workers(generated: Path, s3: Any) -> None:
    from tests.test_store_backends import upload

    url = s3.fresh_prefix()
    upload(s3, generated, url)
    option = f"endpoint_url={s3.endpoint}"
    remote = soapwb("verify", "--store", url, "--storage-option", option, "--workers", "2", "--json")
    local = soapwb("verify", "--store", generated, "--workers", "2", "--json")
    assert remote.returncode == 0, remote.stderr
    assert json.loads(remote.stdout) == json.loads(local.stdout)
