"""The same cases under atheris (libFuzzer's coverage guidance for Python), where it
installs (``pip install atheris``: wheels for CPython <= 3.11 on x86-64 Linux).

libFuzzer hands each case a byte string; :class:`AtherisChooser` turns it into the
choices a case makes, so the mutators and readers are those of the other engines, and
libFuzzer keeps the byte strings that reach new code. It runs in a process of its own
(``atheris.Fuzz`` ends its process when done): :func:`run_atheris` starts it and reads
back what it counted.
"""

from __future__ import annotations

import json
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
    argv = [sys.executable, "-c", _BOOTSTRAP, str(cases), str(seed), str(out), str(int(with_workbench))]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    summary_path = out / SUMMARY
    if not summary_path.is_file():
        raise RuntimeError(f"atheris ended without a summary (exit {done.returncode}): {done.stderr[-2000:]}")
    summary: dict[str, Any] = json.loads(summary_path.read_text())
    summary["libfuzzer"] = [
        line for line in done.stderr.splitlines() if line.startswith("#") or "DONE" in line
    ][-3:]
    return summary


_INSTRUMENTED = ("soap_core", "replay", "analysis", "importers", "soapwb")
_BOOTSTRAP = f"""
import sys, atheris
with atheris.instrument_imports(include=list({_INSTRUMENTED!r})):
    import soap_core, soap_core.runtime, replay, analysis, importers.openpoke, soapwb.cli
    from soapwb import store_commands, replay_commands, analysis_commands, runtime_commands, import_commands
from fuzz._atheris import _child
from pathlib import Path
_child(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] == "1")
"""
"""The child's program: the project's own modules are instrumented for coverage as they
are imported (not the standard library's nor the fuzzer's: that would slow every case for
nothing), then the cases run."""


def _child(cases: int, seed: int, out: Path, with_workbench: bool) -> None:
    import atheris

    from fuzz._case import CaseFailure, Workbench, run_case
    from fuzz._corpus import build_corpus
    from fuzz._runner import save_failure

    corpus = build_corpus(with_workbench=with_workbench)
    bench = Workbench(corpus, Path(tempfile.mkdtemp(prefix="fuzz-atheris-")))
    counted = [0]
    failures: list[dict[str, str]] = []

    def write_summary() -> None:  # after every case: libFuzzer ends the process in C
        summary = {"cases": counted[0], "failures": failures}
        (out / SUMMARY).write_text(json.dumps(summary, indent=2, default=str))

    def one(data: bytes) -> None:
        counted[0] += 1
        try:
            run_case(bench, AtherisChooser(atheris.FuzzedDataProvider(data)))
        except CaseFailure as failure:
            saved = save_failure(failure, corpus, out, f"atheris-{len(failures)}")
            failures.append({"key": failure.key, "text": str(failure), "saved": str(saved)})
        write_summary()

    flags = [
        f"-runs={cases}",
        f"-seed={seed + 1}",
        "-timeout=0",
        "-rss_limit_mb=3072",
        "-max_len=512",
        "-len_control=0",
        f"-artifact_prefix={out}/",  # libFuzzer's crash-*/slow-unit-* files, else in the working directory
    ]
    atheris.Setup([sys.argv[0], *flags], one)
    atheris.Fuzz()
