"""The catalog's database as one more file of a store to mutate.

The catalog is a cache (:mod:`soap_core._catalog`): whatever its database holds, every
answer must be the one the files give. A catalog case starts from the catalog of the
seed's intact files (built once per seed), damages its database the way a disk, a hand
or another program would (bytes flipped, cut, zeroed, replaced; a table dropped,
emptied or reshaped; an old schema version; text that is not UTF-8; a column of counts
cut short), and asks the store every question of :func:`answers` through it and without
it: the two must be equal, and nothing but the project's typed errors may be raised.

A *forged* case also rewrites the stamp beside the database so that it vouches for the
damaged bytes (what a change the stamp cannot see amounts to: a clock set back, a
program that rewrites the lock file). The catalog then trusts the file and meets the
damage while it is in use: it must still raise nothing but typed errors and never make
``soapwb`` exit 3, but a byte flipped inside a stored value reads as another value (SQLite
keeps no checksums), so its answers are not compared.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from fuzz._choices import Chooser

CATALOG_MARK = ".soapwb-catalog.sqlite3"
"""The name a seed's catalog goes by among its files (:meth:`fuzz._corpus.Seed.mutable_files`);
where it lies depends on the layout (:func:`catalog_path`)."""

TABLES = [
    "meta",
    "sessions",
    "context_files",
    "messages",
    "message_text",
    "text_backlog",
    "record_dirs",
    "calls",
    "invocations",
    "token_counts",
]
TEXT_COLUMNS = [
    ("sessions", "dir"),
    ("sessions", "role"),
    ("sessions", "uuid"),
    ("sessions", "sig"),
    ("sessions", "active_context_id"),
    ("context_files", "file"),
    ("context_files", "sig"),
    ("context_files", "id"),
    ("messages", "role"),
    ("meta", "value"),
]
QUERIES = ["the", "hello", "tool", "a", "Pete"]


def catalog_path(root: Path) -> Path:
    """Where the catalog of the store at ``root`` lives (beside its config dir)."""
    from soap_core import Store

    catalog = Store(root).catalog()
    if catalog is None:
        raise RuntimeError(f"no catalog can be opened for {root}")
    path = catalog.path
    catalog.close()
    return path


def build_pristine(root: Path) -> tuple[str, bytes, str]:
    """The catalog of the intact store at ``root``, every record indexed: its path
    relative to ``root``, its bytes (closed: no -wal) and its build id."""
    from soap_core import Store

    store = Store(root)
    catalog = store.catalog()
    if catalog is None:
        raise RuntimeError(f"no catalog can be opened for {root}")
    catalog.refresh(records=True)
    build = catalog.state.split(":", 1)[0]
    path = catalog.path
    catalog.close()
    return path.relative_to(root).as_posix(), path.read_bytes(), build


def remove_catalog(directory: Path) -> None:
    """Every file of a catalog under ``directory`` (it is a cache)."""
    from soap_core._catalog import is_catalog_file

    for path in list(directory.rglob("*")):
        if is_catalog_file(path) and not path.is_dir():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def forge_stamp(database: Path, build: str) -> None:
    """Write the stamp beside ``database`` so that it vouches for the bytes there."""
    from soap_core._catalog import _lock_for, _Stamp, stat_signature

    _lock_for(database).write_stamp(_Stamp(build, stat_signature(database.stat())))


def _sql(raw: bytes, script: str) -> bytes:
    """``raw`` with ``script`` run on it by another program (SQLite's own writes)."""
    with tempfile.TemporaryDirectory(prefix="fuzz-catalog-") as tmp:
        path = Path(tmp) / "catalog.sqlite3"
        path.write_bytes(raw)
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
            db.executescript(script)
        return path.read_bytes()


def mutate_catalog(raw: bytes, c: Chooser) -> tuple[bytes, str]:
    """One damage to the catalog's database bytes."""
    op = c.choice(
        [
            "flip",
            "flip-many",
            "cut",
            "zero-page",
            "garbage",
            "empty",
            "drop",
            "empty-table",
            "reshape",
            "old-schema",
            "not-utf8",
            "short-counts",
        ]
    )
    size = len(raw)
    if op in ("flip", "flip-many") and raw:
        flips = 1 if op == "flip" else c.integer(2, 200)
        changed = bytearray(raw)
        rng = random.Random(c.integer(0, 2**32 - 1))
        for _ in range(flips):
            changed[rng.randrange(size)] ^= 1 << rng.randrange(8)
        return bytes(changed), f"{flips} bits flipped"
    if op == "cut":
        at = c.integer(0, max(size - 1, 0))
        return raw[:at], f"cut at byte {at}"
    if op == "zero-page" and size >= 4096:
        page = c.integer(0, size // 4096 - 1)
        return raw[: page * 4096] + bytes(4096) + raw[(page + 1) * 4096 :], f"page {page + 1} zeroed"
    if op == "garbage":
        return random.Random(c.integer(0, 2**32 - 1)).randbytes(size), "replaced by random bytes"
    table = c.choice(TABLES)
    try:
        if op == "drop":
            return _sql(raw, f"DROP TABLE {table}"), f"table {table} dropped"
        if op == "empty-table":
            return _sql(raw, f"DELETE FROM {table}"), f"every row of {table} deleted"
        if op == "reshape" and table != "message_text":
            return _sql(raw, f"DROP TABLE {table}; CREATE TABLE {table}(dir TEXT, x)"), f"{table} reshaped"
        if op == "old-schema":
            version = c.choice(["1", "6", "", "999", "7 "])
            return _sql(
                raw, f"UPDATE meta SET value = '{version}' WHERE key = 'schema'"
            ), f"schema {version!r}"
        if op == "not-utf8":
            table, column = c.choice(TEXT_COLUMNS)
            script = f"UPDATE {table} SET {column} = CAST(X'C3FF28' AS TEXT)"
            return _sql(raw, script), f"{table}.{column} not UTF-8"
        if op == "short-counts":
            column = c.choice(["counts", "spans", "facts"])
            return _sql(
                raw, f"UPDATE context_files SET {column} = X'00'"
            ), f"context_files.{column} cut short"
    except sqlite3.Error as exc:  # the seed's catalog lacks what the statement needs
        return raw, f"{op} on {table} not applicable ({exc})"
    return b"", "emptied"


def answers(root: Path, *, catalog: bool) -> dict[str, Any]:
    """What a user can ask of the store at ``root``, as plain data: the listing and its
    overview, search, lookups by uuid and prefix, every session loaded (each context as
    written back, with its token total), and each session's invocation trace. A typed
    error is an answer (its type and text); any other exception propagates."""
    from soap_core import SoapError, Store, search_store, session_overview, session_overviews
    from soap_core.runtime import invocation_chain

    store = Store(root, use_catalog=catalog)

    def ask(question: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return question(*args, **kwargs)
        except SoapError as exc:
            return f"{type(exc).__name__}: {exc}"

    found: dict[str, Any] = {}
    summaries = ask(store.sessions)
    found["sessions"] = (
        summaries
        if isinstance(summaries, str)
        else [
            (
                s.role,
                s.uuid,
                str(s.path),
                s.layout,
                s.instance,
                s.error,
                s.thread_id,
                s.is_active,
                s.context_files,
            )
            for s in summaries
        ]
    )
    summaries = [] if isinstance(summaries, str) else summaries
    found["overview"] = [ask(lambda s=s: session_overview(store, s).as_dict()) for s in summaries]
    found["listing"] = ask(lambda: [o.as_dict() for o in session_overviews(store)])
    found["search"] = {q: ask(lambda q=q: [h.as_dict() for h in search_store(store, q)]) for q in QUERIES}
    refs = [s.uuid for s in summaries] + [s.path.name[:10] for s in summaries] + ["2", "nope"]
    found["find"] = {ref: ask(lambda ref=ref: str(store.find(ref).path)) for ref in refs}

    def loaded(name: str) -> Any:
        session = store.load_session(name, require_active=False)
        return {
            "contexts": {
                cid: (c.to_dict(), c.total_token_count()) for cid, c in sorted(session.contexts.items())
            },
            "errors": {n: f"{type(e).__name__}: {e}" for n, e in sorted(session.load_errors.items())},
        }

    found["load"] = {s.path.name: ask(loaded, s.path.name) for s in summaries}
    found["trace"] = {
        s.path.name: ask(lambda s=s: repr(invocation_chain(store, s.path.name))) for s in summaries
    }
    return found


def differences(left: dict[str, Any], right: dict[str, Any]) -> list[str]:
    """The keys under which two :func:`answers` differ, with a short view of each."""
    found = []
    for key in sorted(set(left) | set(right)):
        a, b = left.get(key), right.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for sub in sorted(set(a) | set(b), key=str):
                if a.get(sub) != b.get(sub):
                    found.append(f"{key}[{sub!r}]: {str(a.get(sub))[:160]} != {str(b.get(sub))[:160]}")
        else:
            found.append(f"{key}: {str(a)[:160]} != {str(b)[:160]}")
    return found
