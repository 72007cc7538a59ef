"""What every importer does to the store it writes: open it, and write invocation records
only where they changed (so a second import of the same source writes nothing)."""

from __future__ import annotations

from pathlib import Path

from importers._errors import ImporterError
from soap_core import (
    INVOCATIONS_DIR,
    InvocationRecord,
    SoapError,
    Store,
    is_remote,
    read_json,
    write_invocation,
)
from soap_core import open_store as open_any_store


def open_store(store_dir: Path | str) -> Store:
    """The store at ``store_dir``, created if missing; ImporterError when it cannot be.
    A URL on object storage (``s3://bucket/prefix``) opens its mirror
    (:func:`soap_core.open_store`): what the import writes goes to the bucket."""
    if is_remote(store_dir):
        return open_any_store(store_dir)
    root = Path(store_dir).expanduser()
    if root.exists() and not root.is_dir():
        raise ImporterError(root, "the store is not a directory")
    store = Store(root)
    try:
        store.agents_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ImporterError(store.agents_dir, f"cannot create the store: {exc.strerror}") from None
    return store


def _unchanged(directory: Path, record: InvocationRecord) -> bool:
    path = directory / INVOCATIONS_DIR / f"{record.id}.json"
    try:
        return path.is_file() and bool(read_json(path) == record.as_dict())
    except SoapError:
        return False


def write_records(records: list[tuple[InvocationRecord, list[Path]]]) -> int:
    """Write each record into its session folders where it is not already as it is; how
    many were written."""
    written = 0
    for record, directories in records:
        if not all(_unchanged(d, record) for d in directories):
            write_invocation(directories, record)
            written += 1
    return written
