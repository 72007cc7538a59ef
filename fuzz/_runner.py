"""Many fuzz cases: worker processes, hypothesis (or a seeded random stream), the report.

Each worker builds its :class:`fuzz._case.Workbench` and runs its share of the cases in
batches. Under hypothesis a batch is one ``@given`` test of ``max_examples`` cases: a
failure ends the batch, hypothesis shrinks it to a small mutation (the cases it runs
while shrinking are counted apart), and the next batch goes on with another seed, so
one failure does not stop the run. Every failure is saved with what reproduces it: the
seed's files with the mutated one in place, and the command that reads them again.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from fuzz._case import CaseFailure, Workbench, run_case, session_folder
from fuzz._choices import HypothesisChooser, RandomChooser
from fuzz._corpus import Corpus

BATCH = 1000
MEMORY_HEADROOM = 2 * 1024**3
"""Address space a worker process may add to what it has when it starts: a reader that
runs away with memory fails its case. Only worker processes get the limit: a run in the
caller's process (a test) must not lower the limit of that process."""


@dataclass
class Failure:
    key: str
    text: str
    where: str
    saved: str
    replay: str
    trace: str = ""


@dataclass
class WorkerResult:
    worker: int
    cases: int = 0
    shrink_cases: int = 0
    seconds: float = 0.0
    failures: list[Failure] = field(default_factory=list)
    by_seed: Counter[str] = field(default_factory=Counter)
    started: float = field(default_factory=time.perf_counter)


def save_failure(failure: CaseFailure, corpus: Corpus, out: Path, number: str) -> Path:
    """The seed's files with the mutated one in place, and how to read them again."""
    target = out / f"failure-{number}"
    shutil.rmtree(target, ignore_errors=True)
    seed = corpus.named(failure.seed)
    for rel, raw in seed.files.items():
        path = target / "files" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(failure.data if rel == failure.file else raw)
    if failure.file not in seed.files:  # the store's catalog, damaged
        (target / "files" / failure.file).parent.mkdir(parents=True, exist_ok=True)
        (target / "files" / failure.file).write_bytes(failure.data)
    meta = {
        "seed": failure.seed,
        "kind": seed.kind,
        "data_dir": seed.data_dir,
        "file": failure.file,
        "focus": session_folder(failure.file),
        "mutation": failure.mutation,
        "mode": failure.mode,
        "problem": failure.problem,
        "where": failure.where,
    }
    (target / "case.json").write_text(json.dumps(meta, indent=2, ensure_ascii=True))
    (target / "trace.txt").write_text(failure.trace or failure.problem, errors="backslashreplace")
    return target


def _limit_memory() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    try:
        with open("/proc/self/statm") as statm:
            in_use = int(statm.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError):
        return  # not Linux: no limit
    limit = in_use + MEMORY_HEADROOM
    resource.setrlimit(
        resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard)
    )


def _record(result: WorkerResult, failure: CaseFailure, corpus: Corpus, out: Path) -> None:
    saved = save_failure(failure, corpus, out, f"{result.worker}-{len(result.failures)}")
    result.failures.append(
        Failure(
            failure.key,
            str(failure),
            failure.where,
            str(saved),
            f"python -m fuzz --replay {saved}",
            failure.trace,
        )
    )


def _hypothesis_batches(bench: Workbench, result: WorkerResult, cases: int, seed: int, out: Path) -> None:
    batch_number = 0
    while result.cases < cases:
        size = min(BATCH, cases - result.cases)
        before = result.cases
        case = _batch(bench, result, size, seed * 100_003 + result.worker * 1009 + batch_number)
        try:
            case()
        except CaseFailure as failure:
            _record(result, failure, bench.corpus, out)
        _progress(result, out)
        if result.cases == before:  # nothing more to generate
            break
        batch_number += 1


def _progress(result: WorkerResult, out: Path) -> None:
    """What a worker has done so far, after every batch: a long run stopped early still
    says how many cases it ran and what failed."""
    done = {
        "worker": result.worker,
        "cases": result.cases,
        "shrink_cases": result.shrink_cases,
        "failures": [f.text for f in result.failures],
        "seconds_so_far": time.perf_counter() - result.started,
    }
    (out / f"progress-{result.worker}.json").write_text(json.dumps(done, indent=2))


def _batch(bench: Workbench, result: WorkerResult, size: int, batch_seed: int) -> Any:
    """One hypothesis test of ``size`` cases; the cases it runs after the first failure
    (shrinking) are counted apart."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st

    generating = [True]

    @hypothesis_seed(batch_seed)
    @settings(
        max_examples=size,
        database=None,
        deadline=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.generate, Phase.shrink),
        report_multiple_bugs=False,
        print_blob=False,
    )
    @given(st.data())
    def case(data: Any) -> None:
        if generating[0]:
            result.cases += 1
        else:
            result.shrink_cases += 1
        try:
            done = run_case(bench, HypothesisChooser(data))
        except CaseFailure:
            generating[0] = False  # hypothesis shrinks from here on
            raise
        result.by_seed[done.split(":", 1)[0]] += 1

    return case


def _random_cases(bench: Workbench, result: WorkerResult, cases: int, seed: int, out: Path) -> None:
    for number in range(cases):
        result.cases += 1
        try:
            done = run_case(bench, RandomChooser(seed * 10_000_019 + result.worker * 1_000_003 + number))
        except CaseFailure as failure:
            _record(result, failure, bench.corpus, out)
            continue
        result.by_seed[done.split(":", 1)[0]] += 1


def run_worker(
    worker: int,
    corpus: Corpus,
    cases: int,
    seed: int,
    engine: str,
    out: Path,
    *,
    limit_memory: bool = True,
    kinds: frozenset[str] | None = None,
) -> WorkerResult:
    """``cases`` cases in this process (a worker of :func:`run`); ``kinds``: only files
    of those kinds are mutated."""
    if limit_memory:
        _limit_memory()
    started = time.perf_counter()
    result = WorkerResult(worker)
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{worker}-") as tmp:
        bench = Workbench(corpus, Path(tmp), kinds)
        if engine == "hypothesis":
            _hypothesis_batches(bench, result, cases, seed, out)
        else:
            _random_cases(bench, result, cases, seed, out)
    result.seconds = time.perf_counter() - started
    return result


@dataclass
class Report:
    cases: int
    shrink_cases: int
    seconds: float
    workers: int
    engine: str
    seed: int
    by_seed: dict[str, int]
    failures: list[Failure]

    @property
    def distinct(self) -> dict[str, list[Failure]]:
        found: dict[str, list[Failure]] = {}
        for failure in self.failures:
            found.setdefault(failure.key, []).append(failure)
        return found

    def lines(self) -> list[str]:
        lines = [
            f"fuzz: {self.cases} cases ({self.engine}, seed {self.seed}, {self.workers} workers) in "
            f"{self.seconds:.0f} s, plus {self.shrink_cases} while shrinking",
            "  by seed: " + ", ".join(f"{k} {v}" for k, v in sorted(self.by_seed.items())),
        ]
        if not self.failures:
            lines.append("  no failures")
        for key, found in self.distinct.items():
            first = found[0]
            lines.append(f"  FAILURE ({len(found)}x) at {key}: {first.text}")
            lines.append(f"    saved in {first.saved}; rerun: {first.replay}")
        return lines

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["distinct_failures"] = len(self.distinct)
        return data


def run(
    corpus: Corpus,
    cases: int,
    *,
    workers: int,
    seed: int,
    engine: str,
    out: Path,
    in_process: bool = False,
    kinds: frozenset[str] | None = None,
) -> Report:
    """``cases`` cases over ``workers`` worker processes (each with a memory limit), or in
    this process with ``in_process`` (a test's quick run: no limit is set on the caller);
    ``kinds`` limits the files mutated to those kinds (``catalog``: the catalog only)."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    shares = [cases // workers + (1 if i < cases % workers else 0) for i in range(workers)]
    if in_process:
        results = [run_worker(0, corpus, cases, seed, engine, out, limit_memory=False, kinds=kinds)]
    else:
        with ProcessPoolExecutor(workers, mp_context=get_context("fork")) as pool:
            futures = [
                pool.submit(run_worker, i, corpus, n, seed, engine, out, kinds=kinds)
                for i, n in enumerate(shares)
            ]
            results = [f.result() for f in futures]
    by_seed: Counter[str] = Counter()
    for result in results:
        by_seed.update(result.by_seed)
    return Report(
        sum(r.cases for r in results),
        sum(r.shrink_cases for r in results),
        time.perf_counter() - started,
        workers,
        engine,
        seed,
        dict(by_seed),
        [f for r in results for f in r.failures],
    )


def default_workers() -> int:
    return max(1, min(4, len(os.sched_getaffinity(0))))
