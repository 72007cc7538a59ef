"""``verify`` over partitions: one session each, checked where it is opened."""

from __future__ import annotations

from typing import Any

from fleet._engines import PartitionResult
from fleet._store import Location, open_location
from replay import Verification, verify_session
from soap_core import SoapError, Store


def verify_partitions(store: Store) -> dict[str, dict[str, str]]:
    """One partition per session of the store, in the store's order (``ROLE/FOLDER`` ->
    what the worker needs to load it and to name it when it cannot)."""
    return {s.ref: {"ref": s.ref, "uuid": s.uuid, "role": s.role} for s in store.sessions()}


def verify_task(location: Location, partition: dict[str, str]) -> list[dict[str, Any]]:
    """The verification rows of one session, as :func:`replay.verify_store` makes them
    (an unreadable session is one error row, not a failed partition)."""
    store = open_location(location)
    try:
        session = store.load_session(partition["ref"], require_active=False)
    except SoapError as exc:
        row = Verification(
            "-", partition["uuid"], partition["role"], "-", -1, "-", None, False, error=str(exc)
        )
        return [row.as_dict()]
    return [v.as_dict() for v in verify_session(session)]


def verify_report(results: list[PartitionResult]) -> dict[str, Any]:
    """The rows of every session in partition order (the store's, as ``verify`` always
    printed them), the mismatches counted, and the partitions that failed."""
    rows = [row for r in results if r.ok for row in r.value]
    return {
        "calls": len(rows),
        "mismatches": sum(1 for row in rows if not row["match"]),
        "results": rows,
        "failed_partitions": failed_partitions(results),
    }


def failed_partitions(results: list[PartitionResult]) -> list[dict[str, Any]]:
    """The partitions that failed every attempt, with their last error."""
    return [{"partition": r.key, "error": r.error, "attempts": r.attempts} for r in results if not r.ok]
