"""What every benchmark reports: figures, each a ratio (or a time) against its goal.

Machines here are shared and noisy, so a figure is a ratio to a baseline measured in the
same run (or the same process) wherever one exists; a few goals are absolute (a page in
a real browser under 2 s) and say so. Each ``bench_*.py`` module defines
``run(bench: Bench) -> None`` and calls :meth:`Bench.figure`; ``benchmarks/run.py``
runs them all and writes ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Figure:
    """One measured figure and the goal it is held against."""

    group: str
    """The benchmark module's heading (``Listing``, ``Replay`` ...)."""
    what: str
    value: float
    unit: str
    """``x`` for a ratio, ``s`` or ``ms`` for a time, or any count's unit."""
    goal: str
    """The goal as text, e.g. ``≤ 3x`` or ``< 200 ms``."""
    met: bool | None
    """None where the figure has no goal (context for the others)."""
    baseline: str = ""
    """What the ratio is taken against, measured in the same run."""
    note: str = ""
    """Why a goal is missed, or what the figure depends on."""


@dataclass
class Bench:
    """The run all modules share: where to put generated stores, how big, the figures."""

    workdir: Path
    quick: bool = False
    """A small scale for a smoke run (``make bench QUICK=1``, and the test suite)."""
    figures: list[Figure] = field(default_factory=list)
    group: str = ""

    def scale(self, full: int, quick: int) -> int:
        return quick if self.quick else full

    def figure(
        self,
        what: str,
        value: float,
        unit: str,
        goal: str = "",
        met: bool | None = None,
        *,
        baseline: str = "",
        note: str = "",
    ) -> Figure:
        entry = Figure(self.group, what, value, unit, goal, met, baseline, note)
        self.figures.append(entry)
        print(f"  {what}: {value:.3g} {unit}  goal {goal or '-'}  {_verdict(met)}", flush=True)
        return entry

    def ratio(
        self, what: str, measured: float, baseline: float, limit: float, *, baseline_is: str, note: str = ""
    ) -> Figure:
        """``measured / baseline`` held against ``≤ limit``x."""
        value = measured / baseline if baseline > 0 else float("inf")
        return self.figure(what, value, "x", f"≤ {limit:g}x", value <= limit, baseline=baseline_is, note=note)


def _verdict(met: bool | None) -> str:
    return {True: "met", False: "MISSED", None: ""}[met]


def best_time(action: Callable[[], object], repeat: int = 3) -> float:
    """The fastest of ``repeat`` runs of ``action``, in seconds (noise only adds time)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - started)
    return best


_PEAK = """
import resource, sys
from soapwb.cli import main
code = main(sys.argv[1:])
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
own = int(status["VmHWM"].split()[0])
children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
sys.__stderr__.write(f"PEAK {own} {children}\\n")
sys.exit(code)
"""


def peak_rss_mb(soapwb_args: list[str]) -> tuple[float, float]:
    """The peak resident memory of a `soapwb` command, in MB: of its own process (VmHWM,
    which starts at its own start: not the bench's pages a fork shares before exec)
    and of the largest process it started (0 when none); raises if it fails."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _PEAK, *soapwb_args], capture_output=True, text=True, check=False
    )
    peak = [line.split() for line in done.stderr.splitlines() if line.startswith("PEAK ")]
    if done.returncode or not peak:
        raise RuntimeError(f"soapwb {soapwb_args[:3]} exited with {done.returncode}: {done.stderr[-2000:]}")
    return int(peak[-1][1]) / 1024, int(peak[-1][2]) / 1024
