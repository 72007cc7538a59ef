"""One fuzz case: a seed, one mutated file, the readers, and the outcome.

Each worker keeps a :class:`Workbench`: a pristine copy of every seed on disk. A case
writes the mutated file into it, runs the readers under a time limit, checks that no
file of the seed changed (readers never write) and puts the original bytes back, so a
case costs its readers and two small writes.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz._choices import Chooser
from fuzz._corpus import Corpus, Seed, file_kind
from fuzz._mutators import mutate_file
from fuzz._targets import (
    STORE_READERS,
    ReaderFailure,
    check_cli,
    cli_commands,
    read_openpoke_dir,
    read_store,
)

CASE_SECONDS = 20.0
"""A case running longer than this is a failure (an intact seed takes milliseconds)."""
CATALOG_FILE_PREFIX = ".soapwb-catalog"
_ID_KEYS = (
    "id",
    "uuid",
    "active_context_id",
    "origin_context_id",
    "parent_invocation_id",
    "context_id",
    "session",
    "invocation_id",
    "message_id",
    "children",
    "calls",
)


class CaseTimeout(BaseException):
    """Raised by the timer inside a reader that runs too long (a BaseException, so no
    ``except Exception`` of the code under test swallows it)."""


@dataclass
class CaseFailure(Exception):
    """A case whose reader broke its contract, with what reproduces it."""

    seed: str
    file: str
    mutation: str
    mode: str
    problem: str
    data: bytes
    where: str = ""
    """The innermost frame of the project's code, to tell failures apart."""
    trace: str = ""

    def __str__(self) -> str:
        return f"{self.seed}:{self.file} [{self.mutation}] ({self.mode}): {self.problem}"

    @property
    def key(self) -> str:
        return f"{self.where or self.problem[:80]}"


def _ids(value: Any, into: set[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in _ID_KEYS and isinstance(item, str):
                into.add(item)
            elif key in _ID_KEYS and isinstance(item, list):
                into.update(v for v in item if isinstance(v, str))
            _ids(item, into)
    elif isinstance(value, list):
        for item in value:
            _ids(item, into)


class Workbench:
    """Pristine copies of the seeds under ``base``, and the ids they hold."""

    def __init__(self, corpus: Corpus, base: Path) -> None:
        import json

        self.corpus = corpus
        self.base = base
        found: set[str] = set()
        for seed in corpus.seeds:
            for copy in (self.dir_of(seed, catalog=False), self.dir_of(seed, catalog=True)):
                for rel, raw in seed.files.items():
                    (copy / rel).parent.mkdir(parents=True, exist_ok=True)
                    (copy / rel).write_bytes(raw)
            for rel, raw in seed.files.items():
                if rel.endswith(".json"):
                    with contextlib.suppress(ValueError):
                        _ids(json.loads(raw), found)
        self.ids = sorted(found)

    def dir_of(self, seed: Seed, *, catalog: bool) -> Path:
        return self.base / (seed.name + ("-catalog" if catalog else ""))

    @property
    def scratch(self) -> Path:
        return self.base / "scratch-store"


def session_folder(rel: str) -> str | None:
    """The session folder (relative) of a store file, None for a file outside one."""
    parts = rel.split("/")
    for i, part in enumerate(parts):
        if part == "agents" and len(parts) > i + 3:
            return "/".join(parts[: i + 3])
        if part == "sessions" and len(parts) > i + 2:
            return "/".join(parts[: i + 2])
    return None


def _alarm(_signum: int, _frame: Any) -> None:
    raise CaseTimeout()


def _innermost(tb: Any) -> str:
    frames = [
        f
        for f in traceback.extract_tb(tb)
        if "/fuzz/" not in f.filename and "site-packages" not in f.filename
    ]
    if not frames:
        return ""
    last = frames[-1]
    return f"{Path(last.filename).name}:{last.lineno} {last.name}"


def _unchanged(directory: Path, seed: Seed, rel: str, mutated: bytes) -> str | None:
    """Why the seed's files are not as the case wrote them, or None."""
    on_disk = {
        p.relative_to(directory).as_posix()
        for p in directory.rglob("*")
        if p.is_file() and not p.name.startswith(CATALOG_FILE_PREFIX)
    }
    if on_disk != set(seed.files):
        return f"a reader created or removed files: {sorted(on_disk ^ set(seed.files))[:5]}"
    for name, raw in seed.files.items():
        expected = mutated if name == rel else raw
        if (directory / name).read_bytes() != expected:
            return f"a reader rewrote {name}"
    return None


def _readers(
    seed: Seed, directory: Path, rel: str, mode: str, c: Chooser, bench: Workbench
) -> Callable[[], None]:
    """What the case reads, chosen before any file is written (so that every choice is
    made while the seed is still intact: hypothesis may stop a case at any draw)."""
    if seed.kind == "openpoke":
        data_dir = directory / seed.data_dir
        import_it = c.integer(0, 3) == 0

        def openpoke() -> None:
            shutil.rmtree(bench.scratch, ignore_errors=True)
            try:
                if mode == "cli":
                    check_cli(["import", "openpoke", str(data_dir), "--store", str(bench.scratch), "--json"])
                    if bench.scratch.is_dir():
                        check_cli(["ls", "--store", str(bench.scratch), "--json"])
                else:
                    read_openpoke_dir(data_dir, bench.scratch, import_it=import_it)
            finally:
                shutil.rmtree(bench.scratch, ignore_errors=True)

        return openpoke
    folder = session_folder(rel)
    if mode == "cli":
        name = folder.rsplit("/", 1)[1] if folder else None
        if name is None:
            folders = [session_folder(r) for r in seed.files]
            name = next((f.rsplit("/", 1)[1] for f in folders if f), None)
        argv = c.choice(cli_commands(directory, name))
        return lambda: check_cli(argv)
    known = list(STORE_READERS)
    readers = sorted({c.choice(known) for _ in range(3)}, key=known.index)
    return lambda: read_store(directory, folder, readers, catalog=mode == "catalog")


def run_case(bench: Workbench, c: Chooser, *, seconds: float = CASE_SECONDS) -> str:
    """One case; returns what it did, raises :class:`CaseFailure` if a reader failed."""
    seed = c.choice(bench.corpus.seeds)
    rel = c.choice(seed.mutable_files())
    kind = file_kind(rel) or "context"
    original = seed.files[rel]
    mutated, description = mutate_file(kind, original, c, bench.ids)
    roll = c.integer(0, 99)
    mode = "library" if roll < 80 else "catalog" if roll < 92 else "cli"
    directory = bench.dir_of(seed, catalog=mode == "catalog")
    readers = _readers(seed, directory, rel, mode, c, bench)
    path = directory / rel
    try:
        path.write_bytes(mutated)
        failure = _outcome(readers, seconds)
        changed = _unchanged(directory, seed, rel, mutated) if seed.kind == "store" else None
    finally:
        path.write_bytes(original)
    if failure is None and changed is not None:
        failure = (changed, "readers-write", "")
    if failure is not None:
        problem, where, trace = failure
        raise CaseFailure(seed.name, rel, description, mode, problem, mutated, where, trace)
    return f"{seed.name}:{rel} [{description}] ({mode})"


def _outcome(readers: Callable[[], None], seconds: float) -> tuple[str, str, str] | None:
    """None when the readers kept their contract; else (problem, where, traceback)."""
    failure: tuple[str, str, str] | None = None
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        readers()
    except ReaderFailure as exc:
        failure = (exc.what, _innermost(exc.__traceback__), "")
    except CaseTimeout:
        failure = (f"still running after {seconds:g} s (a loop that does not end?)", "timeout", "")
    except (Exception, RecursionError, MemoryError) as exc:
        trace = "".join(traceback.format_exception(exc)[-12:])
        failure = (f"{type(exc).__name__}: {str(exc)[:300]}", _innermost(exc.__traceback__), trace)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)  # None: set in C
    return failure
