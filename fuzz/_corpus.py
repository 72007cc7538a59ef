"""The seed stores and data dirs every mutation starts from, held as bytes.

* ``hellopete``: the sample peteos 0.5 store (a parent context, its active fork, a
  discarded child named in ``children``);
* ``peteos06``: the same session in the peteos 0.6 layout (``.peteos/sessions/`` and an
  instance file whose ``thread_store`` claims it);
* ``workbench``: a store our runtime wrote (tool calls, a three-deep cross-object chain,
  a refusal, a compaction fork, a replay fork, call and invocation records);
* ``openpoke-short``, ``openpoke-long``, ``openpoke-legacy``: OpenPoke data dirs.

Each store seed's catalog database is one more of its files (:mod:`fuzz._catalog`).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from fuzz._catalog import CATALOG_MARK

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
SOAP_FIXTURE = FIXTURES / "soap"
OPENPOKE_FIXTURES = FIXTURES / "openpoke"


@dataclass(frozen=True)
class Seed:
    """One seed: its files (relative path -> bytes) and whether it is a store or an
    OpenPoke data dir (``data_dir`` is then its relative path)."""

    name: str
    files: dict[str, bytes]
    kind: str  # "store" or "openpoke"
    data_dir: str = ""

    def mutable_files(self) -> list[str]:
        """The files a case may mutate; a store's catalog database among them."""
        found = sorted(p for p in self.files if file_kind(p) is not None)
        return [*found, CATALOG_MARK] if self.kind == "store" else found


@dataclass
class Corpus:
    seeds: list[Seed] = field(default_factory=list)

    def named(self, name: str) -> Seed:
        return next(s for s in self.seeds if s.name == name)


def file_kind(rel: str) -> str | None:
    """What a file of a seed is, by its place (None: not mutated)."""
    parts = rel.split("/")
    name = parts[-1]
    if name == CATALOG_MARK:
        return "catalog"
    if name.endswith(".log"):
        return "log"
    if name == "timezone.txt":
        return "timezone"
    if name == "roster.json":
        return "roster"
    if name == "chat_history.json":
        return "chat_history"
    if name == "agentic_object.json" and "instances" in parts:
        return "instance"
    if name == "peteos.json" or not name.endswith(".json"):
        return None
    if len(parts) >= 2 and parts[-2] == "calls":
        return "call"
    if len(parts) >= 2 and parts[-2] == "invocations":
        return "invocation"
    if name == "session.json":
        return "session"
    return "context"


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not any(part.startswith(".soapwb") for part in p.relative_to(root).parts)
    }


def _peteos06(hellopete: dict[str, bytes]) -> dict[str, bytes]:
    files: dict[str, bytes] = {"peteos.json": b'{"CONFIG": {}}'}
    uuid = ""
    for rel, raw in hellopete.items():
        parts = rel.split("/")
        if parts[0] != "agents":
            continue
        uuid = parts[2]
        files[f".peteos/sessions/{'/'.join(parts[2:])}"] = raw
    instance = {"class": {"module": "app", "qualname": "app.HelloPete"}, "thread_store": {"pete-chat": uuid}}
    files[".peteos/instances/hello/agentic_object.json"] = json.dumps(instance, indent=2).encode()
    return files


def _workbench(existing: Path | None) -> dict[str, bytes]:
    if existing is not None:
        return _files(existing)
    from tests.workbench_store import build_workbench_store

    with tempfile.TemporaryDirectory(prefix="fuzz-seed-") as tmp:
        root = build_workbench_store(Path(tmp) / "store")
        return _files(root)


def build_corpus(*, with_workbench: bool = True, workbench: Path | None = None) -> Corpus:
    """Every seed. The workbench store is written by the runtime (about a second), or
    read from ``workbench``, a store :func:`tests.workbench_store.build_workbench_store`
    wrote."""
    hellopete = _files(SOAP_FIXTURE)
    seeds = [Seed("hellopete", hellopete, "store"), Seed("peteos06", _peteos06(hellopete), "store")]
    if with_workbench:
        seeds.append(Seed("workbench", _workbench(workbench), "store"))
    for name in ("short", "long", "legacy"):
        seeds.append(Seed(f"openpoke-{name}", _files(OPENPOKE_FIXTURES / name), "openpoke", "server/data"))
    return Corpus(seeds)
