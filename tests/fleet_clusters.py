"""Two-worker Ray and Dask clusters on this machine, started once per test module (Ray
takes seconds to start); a cluster that cannot start is a skip with its reason."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fleet._engines import RAY_OBJECT_STORE_BYTES


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A local Ray cluster of two CPUs; ``run_partitions(engine="ray")`` uses it."""
    ray = pytest.importorskip("ray")
    try:
        ray.init(
            num_cpus=2,
            object_store_memory=RAY_OBJECT_STORE_BYTES,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    except Exception as exc:  # any reason Ray cannot start here is a skip, said
        pytest.skip(f"a local Ray cluster does not start here: {exc}")
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def dask_address() -> Iterator[str]:
    """The scheduler address of a local Dask cluster of two one-thread worker processes."""
    distributed: Any = pytest.importorskip("distributed")
    try:
        cluster = distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
        )
    except Exception as exc:
        pytest.skip(f"a local Dask cluster does not start here: {exc}")
    yield str(cluster.scheduler_address)
    cluster.close()
