"""Run one task over many partitions on a process pool, a Ray cluster or a Dask cluster.

The engines differ only in how a partition reaches a worker and how its outcome comes
back; the loop that submits, retries and counts is one, here, so that the same
partitions give the same results on every engine. A partition whose task raises (or
whose worker dies) is submitted again up to ``retries`` times, then kept as a failed
:class:`PartitionResult` with its error: one bad session never loses the others'.

Results come back in the order of the partitions given, never in completion order, and
the worker names and timings stay in fields the reports keep apart from what they
compare.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from fleet._store import Location

Engine = Literal["local", "ray", "dask"]
ENGINES: tuple[Engine, ...] = ("local", "ray", "dask")
Task = Callable[[Location, Any], Any]
"""A module-level (picklable) function of the location and one partition's payload,
returning plain data (JSON-able)."""

RAY_OBJECT_STORE_BYTES = 100 * 1024 * 1024
"""A local Ray cluster's object store: the results are small, and Ray's default (30 % of
memory) is more than a small machine shared with others can spare."""


class EngineError(Exception):
    """An engine cannot be used: its library is missing, or its cluster cannot be reached."""


@dataclass
class PartitionResult:
    """The outcome of one partition: its value, or the error of its last attempt."""

    key: str
    ok: bool
    value: Any = None
    error: str | None = None
    attempts: int = 1
    seconds: float = 0.0
    """Wall time of the last attempt as the driver saw it (not compared across engines)."""


class _Backend(Protocol):
    def submit(self, task: Task, location: Location, payload: Any) -> Any: ...

    def wait_any(self, handles: list[Any]) -> list[Any]:
        """The handles of ``handles`` that have finished (at least one)."""
        ...

    def outcome(self, handle: Any) -> Any:
        """The task's value, raising its error."""
        ...


def run_partitions(
    location: Location,
    partitions: Mapping[str, Any],
    task: Task,
    *,
    engine: Engine = "local",
    workers: int | None = None,
    address: str | None = None,
    retries: int = 2,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[PartitionResult]:
    """``task(location, payload)`` for every partition (key -> payload), on ``engine``
    with ``workers`` workers (default: the machine's cores) or on the cluster at
    ``address``; ``on_progress(done, total)`` as partitions finish, retried ones once."""
    if engine not in ENGINES:
        raise EngineError(f"unknown engine {engine!r}: use one of {', '.join(ENGINES)}")
    if retries < 0:
        raise EngineError("retries must be 0 or more")
    if not partitions:
        return []
    count = max(1, workers or os.cpu_count() or 1)
    with _backend(engine, count, address) as backend:
        return _drive(backend, location, partitions, task, retries, on_progress)


def _drive(
    backend: _Backend,
    location: Location,
    partitions: Mapping[str, Any],
    task: Task,
    retries: int,
    on_progress: Callable[[int, int], None] | None,
) -> list[PartitionResult]:
    """Submit every partition, resubmit failures within their retries, gather in order."""
    attempts = dict.fromkeys(partitions, 0)
    started: dict[str, float] = {}
    flying: dict[Any, str] = {}
    results: dict[str, PartitionResult] = {}

    def launch(key: str) -> None:
        attempts[key] += 1
        started[key] = time.perf_counter()
        flying[backend.submit(task, location, partitions[key])] = key

    for key in partitions:
        launch(key)
    while flying:
        for handle in backend.wait_any(list(flying)):
            key = flying.pop(handle)
            seconds = time.perf_counter() - started[key]
            try:
                value = backend.outcome(handle)
            except Exception as exc:  # the task's own error, or its worker's death
                if attempts[key] <= retries:
                    launch(key)
                    continue
                results[key] = PartitionResult(key, False, None, _error_text(exc), attempts[key], seconds)
            else:
                results[key] = PartitionResult(key, True, value, None, attempts[key], seconds)
            if on_progress is not None:
                on_progress(len(results), len(partitions))
    return [results[key] for key in partitions]


def _error_text(exc: BaseException) -> str:
    """One line for a failed partition: the exception's type and message (Ray wraps the
    task's error in its own, whose text carries the remote traceback: its last line)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        exc = cause
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}".rstrip(": ")


@contextmanager
def _backend(engine: Engine, workers: int, address: str | None) -> Iterator[_Backend]:
    if engine == "ray":
        with _ray_backend(workers, address) as ray_backend:
            yield ray_backend
    elif engine == "dask":
        with _dask_backend(workers, address) as dask_backend:
            yield dask_backend
    else:
        if address is not None:
            raise EngineError("--address names a Ray or Dask cluster: the local engine takes none")
        local = _LocalBackend(workers)
        try:
            yield local
        finally:
            local.close()


class _LocalBackend:
    """A process pool (spawned workers: safe beside the driver's threads). A worker that
    dies breaks the whole pool, failing every partition in flight; the next submission
    starts a new pool, so those partitions are retried like any other failure."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.pool: cf.ProcessPoolExecutor | None = None

    def submit(self, task: Task, location: Location, payload: Any) -> cf.Future[Any]:
        if self.pool is None or getattr(self.pool, "_broken", False):
            if self.pool is not None:
                self.pool.shutdown(wait=False, cancel_futures=True)
            context = multiprocessing.get_context("spawn")
            self.pool = cf.ProcessPoolExecutor(self.workers, mp_context=context)
        return self.pool.submit(task, location, payload)

    def wait_any(self, handles: list[Any]) -> list[Any]:
        done, _ = cf.wait(handles, return_when=cf.FIRST_COMPLETED)
        return list(done)

    def outcome(self, handle: Any) -> Any:
        return handle.result()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def _missing(engine: str, library: str) -> EngineError:
    return EngineError(f"--engine {engine} needs {library}: pip install 'soap-workbench[cluster]'")


@contextmanager
def _ray_backend(workers: int, address: str | None) -> Iterator[_Backend]:
    """The Ray cluster at ``address``, else a local one of ``workers`` CPUs started for
    the run (no dashboard, a small object store) and shut down after."""
    try:
        import ray
    except ImportError:
        raise _missing("ray", "Ray") from None
    if ray.is_initialized():
        yield _RayBackend(ray)
        return
    options: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
    if address is None:
        options |= {
            "num_cpus": workers,
            "object_store_memory": RAY_OBJECT_STORE_BYTES,
            "include_dashboard": False,
        }
    try:
        ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise EngineError(
            f"cannot start or reach a Ray cluster at {address or 'a new local one'}: {exc}"
        ) from None
    try:
        yield _RayBackend(ray)
    finally:
        ray.shutdown()


class _RayBackend:
    """Tasks as Ray remote functions without Ray's own retries (the driver retries, the
    same way on every engine)."""

    def __init__(self, ray: Any) -> None:
        self.ray = ray
        self.remote: dict[Task, Any] = {}

    def submit(self, task: Task, location: Location, payload: Any) -> Any:
        if task not in self.remote:
            self.remote[task] = self.ray.remote(max_retries=0, retry_exceptions=False)(task)
        return self.remote[task].remote(location, payload)

    def wait_any(self, handles: list[Any]) -> list[Any]:
        done, _ = self.ray.wait(handles, num_returns=1)
        return list(done)

    def outcome(self, handle: Any) -> Any:
        return self.ray.get(handle)


@contextmanager
def _dask_backend(workers: int, address: str | None) -> Iterator[_Backend]:
    """The Dask scheduler at ``address``, else a local cluster of ``workers`` worker
    processes of one thread each (no dashboard), closed after."""
    try:
        distributed: Any = importlib.import_module("distributed")  # untyped: Any on purpose
    except ImportError:
        raise _missing("dask", "Dask distributed") from None
    Client, LocalCluster = distributed.Client, distributed.LocalCluster
    try:
        if address is not None:
            client = Client(address, timeout="10s")
            cluster = None
        else:
            cluster = LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=40,
            )
            client = Client(cluster)
    except (OSError, TimeoutError) as exc:
        raise EngineError(
            f"cannot start or reach a Dask cluster at {address or 'a new local one'}: {exc}"
        ) from None
    try:
        yield _DaskBackend(client)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


class _DaskBackend:
    """Tasks as Dask futures, each submission its own key (``pure=False``) so that a
    retried partition runs again instead of returning the failed future."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def submit(self, task: Task, location: Location, payload: Any) -> Any:
        return self.client.submit(task, location, payload, pure=False, retries=0)

    def wait_any(self, handles: list[Any]) -> list[Any]:
        done, _ = importlib.import_module("distributed").wait(handles, return_when="FIRST_COMPLETED")
        return list(done)

    def outcome(self, handle: Any) -> Any:
        return handle.result()
