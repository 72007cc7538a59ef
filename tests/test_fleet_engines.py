"""The engines: the same partitions give the same results on a process pool, a Ray
cluster and a Dask cluster (two workers each), failures are retried, and a partition
that keeps failing is reported with its error beside the others' results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleet import Location, run_partitions, verify_partitions, verify_report, verify_task
from replay import verify_store
from soap_core import Store
from soap_gen import generate_store
from tests.fleet_clusters import dask_address, ray_cluster  # noqa: F401  (module fixtures)
from tests.fleet_tasks import troubled_task

ENGINES = ("local", "ray", "dask")


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fleet") / "store"
    generate_store(root, sessions=12, messages=16, fork_rate=0.3, chain_depth=2, seed=27, processes=1)
    return root


@pytest.fixture
def engine_kwargs(request: pytest.FixtureRequest) -> dict[str, Any]:
    """How to run on the engine the test is parametrized with, two workers each."""
    engine = request.param
    if engine == "ray":
        request.getfixturevalue("ray_cluster")
        return {"engine": "ray"}
    if engine == "dask":
        return {"engine": "dask", "address": request.getfixturevalue("dask_address")}
    return {"engine": "local", "workers": 2}


@pytest.mark.parametrize("engine_kwargs", ENGINES, indirect=True)
def test_verify_on_every_engine_gives_the_report_of_verify_store(
    generated: Path, engine_kwargs: dict[str, Any]
) -> None:
    store = Store(generated)
    expected = [v.as_dict() for v in verify_store(store)]
    results = run_partitions(Location(str(generated)), verify_partitions(store), verify_task, **engine_kwargs)
    report = verify_report(results)
    assert report["failed_partitions"] == []
    assert report["results"] == expected
    assert report["calls"] == len(expected) > 50


def test_a_changed_request_is_a_mismatch_on_the_cluster_too(tmp_path: Path, generated: Path) -> None:
    """The report is not only 'all match': an edited call file shows on every engine."""
    import shutil

    copy = tmp_path / "store"
    shutil.copytree(generated, copy)
    call_file = next(copy.rglob("calls/*.json"))
    text = call_file.read_text("utf-8")
    call_file.write_text(text.replace('"request_hash": "', '"request_hash": "0', 1), "utf-8")
    store = Store(copy)
    results = run_partitions(Location(str(copy)), verify_partitions(store), verify_task, workers=2)
    assert verify_report(results)["mismatches"] == 1
    assert verify_report(results)["results"] == [v.as_dict() for v in verify_store(store)]


def troubled_partitions(tmp_path: Path, troubles: dict[int, str]) -> dict[str, dict[str, Any]]:
    return {
        f"p{n}": {"key": f"p{n}", "n": n, "marker": str(tmp_path / f"p{n}.tried"), "trouble": troubles.get(n)}
        for n in range(6)
    }


@pytest.mark.parametrize("engine_kwargs", ENGINES, indirect=True)
def test_a_partition_that_fails_once_is_retried_into_the_full_report(
    tmp_path: Path, engine_kwargs: dict[str, Any]
) -> None:
    partitions = troubled_partitions(tmp_path, {1: "once", 4: "once"})
    seen: list[tuple[int, int]] = []
    results = run_partitions(
        Location("somewhere"),
        partitions,
        troubled_task,
        retries=1,
        on_progress=lambda d, t: seen.append((d, t)),
        **engine_kwargs,
    )
    assert [r.value["square"] for r in results] == [n * n for n in range(6)]
    assert [r.attempts for r in results] == [1, 2, 1, 1, 2, 1]
    assert seen[-1] == (6, 6) and len(seen) == 6
    assert all(r.value["store"] == "somewhere" for r in results)


@pytest.mark.parametrize("engine_kwargs", ENGINES, indirect=True)
def test_a_worker_that_dies_does_not_lose_its_partition(
    tmp_path: Path, engine_kwargs: dict[str, Any]
) -> None:
    partitions = troubled_partitions(tmp_path, {2: "die"})
    results = run_partitions(Location("somewhere"), partitions, troubled_task, retries=2, **engine_kwargs)
    assert [r.ok for r in results] == [True] * 6
    assert [r.value["square"] for r in results] == [n * n for n in range(6)]


@pytest.mark.parametrize("engine_kwargs", ENGINES, indirect=True)
def test_a_partition_that_always_fails_is_reported_with_its_error_beside_the_others(
    tmp_path: Path, engine_kwargs: dict[str, Any]
) -> None:
    partitions = troubled_partitions(tmp_path, {3: "always"})
    results = run_partitions(Location("somewhere"), partitions, troubled_task, retries=2, **engine_kwargs)
    [failed] = [r for r in results if not r.ok]
    assert failed.key == "p3" and failed.attempts == 3
    assert failed.error == "ValueError: partition p3 is broken"
    assert [r.value["square"] for r in results if r.ok] == [0, 1, 4, 16, 25]
