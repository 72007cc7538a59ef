"""``compact --sessions`` over partitions: the compaction lab's table for each session.

Each session gets the strategies asked for, sized to it as ``soapwb compact`` sizes
them (a kind without numbers takes the session's own), and ``none`` beside them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from analysis import compare, history_of, lab_strategies, ran_with
from analysis._settings import session_spec
from fleet._engines import PartitionResult
from fleet._store import Location, open_location
from fleet._verify_job import failed_partitions


@dataclass(frozen=True)
class CompactPartition:
    session: str
    strategies: tuple[str, ...]


def compact_task(location: Location, partition: CompactPartition) -> list[dict[str, Any]]:
    """One row per strategy for the partition's session (plain data)."""
    store = open_location(location)
    session = store.load_session(partition.session, require_active=False)
    history, ran = history_of(session), ran_with(session)
    given = [session_spec(spec, history, ran) for spec in partition.strategies]
    specs = given if "none" in given else ["none", *given]
    rows = compare(store, session, lab_strategies(session, specs, store=store))
    return [{"session": partition.session, **row.as_dict()} for row in rows]


def compact_report(results: list[PartitionResult]) -> dict[str, Any]:
    """Every session's rows in the order of the sessions, and the failed partitions."""
    rows = [row for r in results if r.ok for row in r.value]
    return {"strategies": rows, "failed_partitions": failed_partitions(results)}
