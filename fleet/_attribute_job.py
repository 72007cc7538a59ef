"""``attribute --engine``: an attribution's scored requests over partitions.

The driver draws the ablations and fits the weights (:func:`analysis.attribute`); each
partition scores a contiguous run of its removals, in the order of the units they keep,
so a model server that keeps the last prompt's state still sees neighbours together.
A worker rebuilds the request from the store as the command addressed it and refuses to
score one that is not the request the driver drew for (the store changed under it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from analysis import AttributionError, score_ablations
from fleet._engines import PartitionResult
from fleet._store import Location, open_location
from replay import RegenerateScorer, ServerScorer, materialize_at
from soap_core.runtime import LLMEndpoint


@dataclass(frozen=True)
class AttributionPartition:
    """Where the answer is and how to score it, with the removals of this partition."""

    session: str
    context: str | None
    at: str
    checkout: str | None
    request_hash: str
    unit: str
    method: str
    """``score`` (teacher-forced log-probability) or ``regenerate``."""
    base_url: str
    temperature: float | None
    removals: tuple[tuple[int, ...], ...]


def attribution_task(location: Location, partition: AttributionPartition) -> list[list[Any]]:
    """Each removal's [logit, logprob, units gone] (plain data)."""
    store = open_location(location)
    session = store.load_session(partition.session, require_active=partition.context is None)
    checkout = Path(partition.checkout) if partition.checkout else None
    found = materialize_at(session, partition.context, partition.at, checkout=checkout)
    if found.request_hash != partition.request_hash:
        raise AttributionError(
            f"the request behind --at {partition.at} of session {partition.session} changed since the "
            "attribution started: run it again"
        )
    removals = [frozenset(r) for r in partition.removals]
    if partition.method == "regenerate":
        scorer: Any = RegenerateScorer(LLMEndpoint(partition.base_url), temperature=partition.temperature)
    else:
        scorer = ServerScorer(partition.base_url)
    with scorer:
        scored = score_ablations(session, found, partition.unit, scorer, removals)
    return [[logit, logprob, sorted(gone)] for logit, logprob, gone in scored]


def engine_scores(
    template: AttributionPartition,
    parts: int,
    run: Callable[[dict[str, AttributionPartition]], list[PartitionResult]],
) -> Callable[[Sequence[frozenset[int]]], list[tuple[float, float, frozenset[int]]]]:
    """:data:`analysis.Scores` that splits each batch into at most ``parts`` partitions
    like ``template`` and runs them with ``run`` (the engine); a failed partition fails
    the attribution with its error (a fit on part of the scores would mislead)."""

    def scores(removals: Sequence[frozenset[int]]) -> list[tuple[float, float, frozenset[int]]]:
        width = 1 + max((max(r) for r in removals if r), default=0)
        ordered = sorted(range(len(removals)), key=lambda i: [j in removals[i] for j in range(width)])
        size = -(-len(ordered) // max(1, min(parts, len(ordered))))
        chunks = [ordered[i : i + size] for i in range(0, len(ordered), size)]
        partitions = {
            f"part {n + 1} of {len(chunks)}": replace(
                template, removals=tuple(tuple(sorted(removals[i])) for i in chunk)
            )
            for n, chunk in enumerate(chunks)
        }
        results = run(partitions)
        out: list[tuple[float, float, frozenset[int]]] = [(0.0, 0.0, frozenset())] * len(removals)
        for result in results:
            if not result.ok:
                raise AttributionError(f"{result.key} of the scored requests failed: {result.error}")
        for chunk, result in zip(chunks, results, strict=True):
            for i, (logit, logprob, gone) in zip(chunk, result.value, strict=True):
                out[i] = (float(logit), float(logprob), frozenset(gone))
        return out

    return scores
