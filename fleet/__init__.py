"""fleet: batch work (verify, replay and re-run suites, compaction over sessions) run
partition by partition on a local process pool, a Ray cluster or a Dask cluster, with
one report gathered at the end that is the same on every engine.

Public names are re-exported here; the ``_modules`` behind them are private.
"""

from fleet._attribute_job import AttributionPartition, attribution_task, engine_scores
from fleet._compact_job import CompactPartition, compact_report, compact_task
from fleet._engines import ENGINES, Engine, EngineError, PartitionResult, Task, run_partitions
from fleet._replay_job import (
    RECORDED_MODEL,
    ReplayPartition,
    ReplayPlan,
    mean_latency,
    replay_report,
    replay_task,
    without_timing,
)
from fleet._rerun_job import RerunPartition, rerun_report, rerun_task
from fleet._store import Location, open_location
from fleet._suite import SuiteEntry, by_session, read_suite, select_sessions, suite_entries, write_suite
from fleet._verify_job import failed_partitions, verify_partitions, verify_report, verify_task

__all__ = [
    "ENGINES",
    "RECORDED_MODEL",
    "AttributionPartition",
    "CompactPartition",
    "Engine",
    "EngineError",
    "Location",
    "PartitionResult",
    "ReplayPartition",
    "ReplayPlan",
    "RerunPartition",
    "SuiteEntry",
    "Task",
    "attribution_task",
    "by_session",
    "compact_report",
    "compact_task",
    "engine_scores",
    "failed_partitions",
    "mean_latency",
    "open_location",
    "read_suite",
    "replay_report",
    "replay_task",
    "rerun_report",
    "rerun_task",
    "run_partitions",
    "select_sessions",
    "suite_entries",
    "verify_partitions",
    "verify_report",
    "verify_task",
    "without_timing",
    "write_suite",
]
