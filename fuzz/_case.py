"""One fuzz case: a seed, one mutated file, the readers, and the outcome.

Each worker keeps a :class:`Workbench`: a pristine copy of every seed on disk. A case
writes the mutated file into it, runs the readers under a time limit, checks that no
file of the seed changed (readers never write) and puts the original bytes back, so a
case costs its readers and two small writes.

A case whose file is the store's catalog (:mod:`fuzz._catalog`) writes the damaged
database where the catalog lives, in a copy of the seed kept for these cases, and
compares every answer through it with the answer from the files alone; the catalog's
files are removed after each such case (it is a cache).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz._catalog import answers, build_pristine, differences, forge_stamp, mutate_catalog, remove_catalog
from fuzz._choices import Chooser
from fuzz._corpus import Corpus, Seed, file_kind
from fuzz._mutators import mutate_file
from fuzz._targets import (
    STORE_READERS,
    ReaderFailure,
    check_cli,
    check_cli_result,
    cli_commands,
    read_openpoke_dir,
    read_store,
    run_cli,
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
    """Pristine copies of the seeds under ``base``, and the ids they hold. ``kinds``
    limits the files cases mutate to those kinds (:func:`fuzz._corpus.file_kind`)."""

    def __init__(self, corpus: Corpus, base: Path, kinds: frozenset[str] | None = None) -> None:
        import json

        self.corpus = corpus
        self.base = base
        self.kinds = kinds
        self._catalogs: dict[str, tuple[str, bytes, str]] = {}
        self._truths: dict[str, dict[str, Any]] = {}
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

    def damage_dir(self, seed: Seed) -> Path:
        """The copy of a store seed whose catalog catalog cases damage."""
        directory = self.base / f"{seed.name}-catalog-damage"
        if not directory.is_dir():
            for rel, raw in seed.files.items():
                (directory / rel).parent.mkdir(parents=True, exist_ok=True)
                (directory / rel).write_bytes(raw)
        return directory

    def pristine_catalog(self, seed: Seed) -> tuple[str, bytes, str]:
        """The catalog of the seed's intact files: where it lies (relative), its bytes
        and its build id; built once."""
        if seed.name not in self._catalogs:
            directory = self.damage_dir(seed)
            remove_catalog(directory)
            self._catalogs[seed.name] = build_pristine(directory)
            remove_catalog(directory)
        return self._catalogs[seed.name]

    def truth(self, seed: Seed) -> dict[str, Any]:
        """Every answer of the seed's intact files, read without a catalog."""
        if seed.name not in self._truths:
            self._truths[seed.name] = answers(self.damage_dir(seed), catalog=False)
        return self._truths[seed.name]


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
    kinds = bench.kinds
    seeds = [
        s
        for s in bench.corpus.seeds
        if kinds is None or any(file_kind(f) in kinds for f in s.mutable_files())
    ]
    seed = c.choice(seeds)
    rel = c.choice([f for f in seed.mutable_files() if kinds is None or file_kind(f) in kinds])
    kind = file_kind(rel) or "context"
    if kind == "catalog":
        return _catalog_case(bench, seed, c, seconds)
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


def _catalog_case(bench: Workbench, seed: Seed, c: Chooser, seconds: float) -> str:
    """The seed's catalog damaged (:func:`fuzz._catalog.mutate_catalog`), its files
    intact: every answer through it must be the files' (``catalog-damage``), or, with a
    forged stamp, nothing but typed errors may come out (``catalog-forged``); a
    ``soapwb`` command prints what it prints without a catalog (``catalog-cli``)."""
    rel, pristine, build = bench.pristine_catalog(seed)
    mutated, description = mutate_catalog(pristine, c)
    roll = c.integer(0, 99)
    mode = "catalog-damage" if roll < 50 else "catalog-forged" if roll < 85 else "catalog-cli"
    directory = bench.damage_dir(seed)
    folders = [session_folder(r) for r in seed.files]
    name = next((f.rsplit("/", 1)[1] for f in folders if f), None)
    argv = c.choice(cli_commands(directory, name))
    truth = bench.truth(seed) if mode == "catalog-damage" else None

    def readers() -> None:
        if mode == "catalog-cli":
            with_catalog = run_cli(argv)
            check_cli_result(argv, with_catalog)
            os.environ["SOAPWB_NO_CATALOG"] = "1"
            try:
                without = run_cli(argv)
            finally:
                del os.environ["SOAPWB_NO_CATALOG"]
            if with_catalog != without:
                shown = " ".join(argv)
                raise ReaderFailure(f"soapwb {shown}: through the damaged catalog it printed otherwise")
            return
        got = answers(directory, catalog=True)
        if truth is not None and got != truth:
            raise ReaderFailure(
                "answers through the catalog differ: " + "; ".join(differences(got, truth)[:3])
            )

    remove_catalog(directory)
    path = directory / rel
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(mutated)
        if mode == "catalog-forged":
            forge_stamp(path, build)
        failure = _outcome(readers, seconds)
        changed = _unchanged(directory, seed, rel, mutated)
    finally:
        remove_catalog(directory)
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
