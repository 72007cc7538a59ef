"""An attribution's scored requests on the batch engine (issue 29, point 1: "K ablations
run as one batch, on the batch engine where it exists"): ``soapwb attribute --engine``
gives the attribution the command gives in its own process, on the real local model,
on a process pool and on a Dask cluster; a partition that fails fails the attribution
with its error and saves nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis import AttributionError, saved_attributions
from fleet import AttributionPartition, PartitionResult, engine_scores
from local_model import LocalModelServer
from soap_core import Store
from soap_gen import planted_paragraph
from soapwb.cli import main
from tests.fleet_clusters import dask_address  # noqa: F401  (a two-worker Dask cluster, per module)


def test_the_engine_gives_the_attribution_the_command_gives_in_its_own_process(
    tmp_path: Path,
    scoring_server: LocalModelServer,
    dask_address: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = Store(tmp_path / "store")
    session, planted = planted_paragraph(store, seed=4, distractors=3)
    argv = ["attribute", session.uuid, "--at", "-1", "--ablations", "8", "--unit", "sentence"]
    argv += ["--store", str(store.root), "--json", "--base-url", scoring_server.base_url]
    results = []
    for engine in (
        [],
        ["--engine", "local", "--workers", "2"],
        ["--engine", "dask", "--address", dask_address],
    ):
        assert main([*argv, *engine]) == 0
        results.append(json.loads(capsys.readouterr().out))
    alone, *engines = results
    assert alone["ranked"][0]["at"] == f"#1.{planted}", alone["summary"]
    for other in engines:
        # the same requests, each scored once, the same scores: the same fit
        assert [a["removed"] for a in other["ablations"]] == [a["removed"] for a in alone["ablations"]]
        assert [a["logit"] for a in other["ablations"]] == pytest.approx(
            [a["logit"] for a in alone["ablations"]], abs=1e-3
        )
        assert other["weights"] == pytest.approx(alone["weights"], abs=1e-2)
        assert other["calls"] == alone["calls"] and other["full_logit"] == pytest.approx(
            alone["full_logit"], abs=1e-3
        )
    assert len(saved_attributions(Store(store.root).load_session(session.uuid))) == 3


def test_a_failed_partition_fails_the_attribution_with_its_error() -> None:
    template = AttributionPartition(
        "s", None, "-1", None, "h", "message", "score", "http://127.0.0.1:9/v1", None, ()
    )
    seen: list[dict[str, AttributionPartition]] = []

    def run(partitions: dict[str, AttributionPartition]) -> list[PartitionResult]:
        seen.append(partitions)
        return [
            PartitionResult(key, ok=False, error="connection refused")
            if n == 1
            else PartitionResult(key, ok=True)
            for n, key in enumerate(partitions)
        ]

    scores = engine_scores(template, 2, run)
    with pytest.raises(
        AttributionError, match=r"part 2 of 2 of the scored requests failed: connection refused"
    ):
        scores([frozenset({1}), frozenset(), frozenset({0, 2})])
    # two runs of removals in the order of what they keep (the whole request first), none lost
    [partitions] = seen
    assert [p.removals for p in partitions.values()] == [((), (1,)), ((0, 2),)]
    assert all(p.session == "s" and p.unit == "message" for p in partitions.values())
