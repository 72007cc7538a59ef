"""A batch: the runs of one request with its overrides, then the unchanged samples that
measure the noise band. The Replay page and ``soapwb replay`` both make batches with
:func:`run_batch` and read them back with :func:`batches_from_saved`, so a batch the
command line ran shows on the page as the page's own, and the other way round.

The unchanged samples are :func:`replay.replay` runs labelled ``noise band``, made right
after the batch's runs; read back from the store, such a call joins the plain batch
before it as that batch's noise runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from replay._diff import NoiseBand, Output
from replay._request import Materialized
from replay._run import Endpoint, Overrides, ReplayRun, replay, unchanged_band
from replay._saved import SavedRun, replay_batches
from soap_core import Session, Store

NOISE_LABEL = "noise band"
"""The label of the unchanged samples run after a batch."""


def run_output(run: ReplayRun) -> Output:
    """A run's answer as an output to compare (empty for a failed run)."""
    return Output.of(run.output, run.usage, run.latency_s)


@dataclass
class Batch:
    """One batch: the overrides sent, their runs, and the unchanged noise samples."""

    base_url: str
    overrides: Overrides
    runs: list[ReplayRun]
    noise_runs: list[ReplayRun] = field(default_factory=list)
    label: str | None = None
    """The experiment's label when the runs were made with one (a compaction drift run)."""
    started_at: str = ""
    """When its first call started (ISO 8601), "" when not known."""

    @property
    def band(self) -> NoiseBand | None:
        """The noise band of the batch, by :func:`replay.unchanged_band`'s rule."""
        outputs = [run_output(r) for r in self.runs if r.ok]
        noise = [run_output(r) for r in self.noise_runs if r.ok]
        return unchanged_band(outputs, noise, self.overrides)


def run_batch(
    store: Store,
    session: Session,
    found: Materialized,
    endpoint: Endpoint,
    overrides: Overrides,
    *,
    samples: int = 1,
    unchanged: int = 0,
    concurrency: int = 2,
    on_progress: Callable[[int, int], None] | None = None,
) -> Batch:
    """``samples`` runs of ``found`` with ``overrides``, then ``unchanged`` runs of it as
    it was (labelled ``noise band``), each saved as a fork; ``on_progress(done, total)``
    counts both."""
    total = samples + unchanged

    def progress(offset: int) -> Callable[[int, int], None] | None:
        if on_progress is None:
            return None
        report = on_progress
        return lambda done, _: report(offset + done, total)

    runs = replay(
        store,
        session,
        found,
        endpoint,
        overrides,
        samples=samples,
        concurrency=concurrency,
        on_progress=progress(0),
    )
    noise: list[ReplayRun] = []
    if unchanged:
        noise = replay(
            store,
            session,
            found,
            endpoint,
            Overrides(),
            samples=unchanged,
            concurrency=concurrency,
            on_progress=progress(samples),
            label=NOISE_LABEL,
        )
    return Batch(endpoint.base_url, overrides, runs, noise)


def batches_from_saved(saved: Sequence[SavedRun]) -> list[Batch]:
    """The batches the saved runs of one message came in, oldest first: the replay calls
    :func:`replay.replay_batches` finds, a ``noise band`` call joined to the plain batch
    before it."""
    batches: list[Batch] = []
    for group in replay_batches(saved):
        first = group[0]
        runs = [s.run for s in group]
        previous = batches[-1] if batches else None
        if (
            first.label == NOISE_LABEL
            and previous is not None
            and previous.label is None
            and not previous.noise_runs
        ):
            previous.noise_runs.extend(runs)
            continue
        batches.append(Batch(first.base_url, first.overrides, runs, [], first.label, first.started_at))
    return batches
