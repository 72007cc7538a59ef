"""The same cases under atheris (libFuzzer's coverage guidance for Python), where it
installs (``pip install atheris``: wheels for CPython <= 3.11 on x86-64 Linux).

libFuzzer hands each case a byte string; :class:`AtherisChooser` turns it into the
choices a case makes, so the mutators and readers are those of the other engines, and
libFuzzer keeps the byte strings that reach new code. It runs in a process of its own
(``atheris.Fuzz`` ends its process when done): :func:`run_atheris` starts it and reads
back what it counted.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
SUMMARY = "atheris-summary.json"


class AtherisChooser:
    """Choices from libFuzzer's bytes (an exhausted input gives the lowest choice)."""

    def __init__(self, provider: Any) -> None:
        self._provider = provider

    def integer(self, low: int, high: int) -> int:
        return int(self._provider.ConsumeIntInRange(low, high))

    def choice(self, items: Sequence[T]) -> T:
        return items[self.integer(0, len(items) - 1)]


def available() -> bool:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


def run_atheris(cases: int, seed: int, out: Path, *, with_workbench: bool = True) -> dict[str, Any]:
    """``cases`` libFuzzer runs in a child process; its counts and failures."""
    out.mkdir(parents=True, exist_ok=True)
    (out / SUMMARY).unlink(missing_ok=True)
    argv = [sys.executable, "-m", "fuzz._atheris", str(cases), str(seed), str(out), str(int(with_workbench))]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    summary_path = out / SUMMARY
    if not summary_path.is_file():
        raise RuntimeError(f"atheris ended without a summary (exit {done.returncode}): {done.stderr[-2000:]}")
    summary: dict[str, Any] = json.loads(summary_path.read_text())
    summary["libfuzzer"] = [
        line for line in done.stderr.splitlines() if line.startswith("#") or "DONE" in line
    ][-3:]
    return summary


def _child(cases: int, seed: int, out: Path, with_workbench: bool) -> None:
    import atheris

    from fuzz._case import CaseFailure, Workbench, run_case
    from fuzz._corpus import build_corpus
    from fuzz._runner import save_failure

    corpus = build_corpus(with_workbench=with_workbench)
    bench = Workbench(corpus, Path(tempfile.mkdtemp(prefix="fuzz-atheris-")))
    counts = {"cases": 0, "failures": []}

    def write_summary() -> None:
        (out / SUMMARY).write_text(json.dumps(counts, indent=2, default=str))

    atexit.register(write_summary)

    def one(data: bytes) -> None:
        counts["cases"] = int(str(counts["cases"])) + 1
        try:
            run_case(bench, AtherisChooser(atheris.FuzzedDataProvider(data)))
        except CaseFailure as failure:
            failures: list[Any] = counts["failures"]  # type: ignore[assignment]
            saved = save_failure(failure, corpus, out, f"atheris-{len(failures)}")
            failures.append({"key": failure.key, "text": str(failure), "saved": str(saved)})

    atheris.instrument_all()
    flags = [f"-runs={cases}", f"-seed={seed}", "-timeout=0", "-rss_limit_mb=3072", "-max_len=512"]
    atheris.Setup([sys.argv[0], *flags], one)
    atheris.Fuzz()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    _child(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] == "1")
