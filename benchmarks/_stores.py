"""The generated stores the benchmarks share: made once per run (generating 10,000
sessions takes one to two minutes here), in the run's work folder."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from benchmarks._harness import Bench
from soap_gen import generate_store

SETTLED_AGO_NS = 60 * 1_000_000_000


def store_shape(bench: Bench) -> dict[str, Any]:
    """10,000 sessions of about 20 messages, a fifth forked, chains three deep."""
    return {
        "sessions": bench.scale(10_000, 300),
        "messages": 20,
        "fork_rate": 0.2,
        "chain_depth": 3,
        "seed": 12,
    }


def settle(root: Path) -> None:
    """Date every file a minute back, as in a store written earlier: the catalog re-reads
    files younger than its racy window (2 s) on every refresh, which is right for a
    store being written and not what a benchmark of a settled store should measure."""
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = os.path.join(folder, name)
            info = os.stat(path, follow_symlinks=False)
            os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns - SETTLED_AGO_NS), follow_symlinks=False)


def shared_store(bench: Bench, name: str = "store-10k", **shape: Any) -> Path:
    """The store ``name`` of this run, generated the first time it is asked for."""
    root = bench.workdir / name
    if not root.exists():
        started = time.perf_counter()
        summary = generate_store(root, **(shape or store_shape(bench)))
        settle(root)
        print(
            f"  generated {name}: {summary.sessions:,} sessions, {summary.messages:,} messages, "
            f"{summary.bytes / 1e6:,.0f} MB in {time.perf_counter() - started:.0f} s",
            flush=True,
        )
    return root
