"""Run every benchmark and write ``benchmarks/RESULTS.md``: ``make bench`` (``QUICK=1``
for a small smoke scale). ``python -m benchmarks.run [--quick] [--only NAME ...]``.

Each ``bench_*.py`` module with a ``run(bench)`` function is one section; the sections run
in name order, each in a process of its own (``--section``) over the run's one work folder,
so they share the generated stores and the machine's state but no heap: a section that
leaves a 100,000-message session in Streamlit's caches made every garbage collection of
the next one slower (the replay paths took 3.6 min after the pages, 1.8 min alone).

A section whose module sets ``OPT_IN = True`` (``bench_attribution``: up to 45 minutes on
a busy machine) runs only when ``--only`` names it (``make bench-attribution``), and its
figures go to the file its ``RESULTS_FILE`` names beside RESULTS.md, so that a run of it
leaves RESULTS.md as ``make bench`` last wrote it (and ``make bench`` leaves its file).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import pkgutil
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from benchmarks._harness import Bench, Figure

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"


def _source(name: str) -> str:
    return (HERE / f"{name}.py").read_text("utf-8")


def opt_in(name: str) -> bool:
    """Whether section ``name`` runs only when asked for (its module sets ``OPT_IN = True``;
    read from its source, so listing the sections imports none of them)."""
    return "\nOPT_IN = True" in _source(name)


def results_file(name: str, default: Path) -> Path:
    """Where section ``name``'s figures are written: ``default`` (RESULTS.md, or
    ``--results``), or the file its module's ``RESULTS_FILE`` names beside it."""
    for line in _source(name).splitlines():
        if line.startswith("RESULTS_FILE = "):
            return default.with_name(line.split("=", 1)[1].strip().strip("\"'"))
    return default


def bench_modules(only: list[str]) -> list[str]:
    """The sections to run: those whose names contain one of ``only``, or, without it,
    all but the opt-in ones."""
    names = sorted(m.name for m in pkgutil.iter_modules([str(HERE)]) if m.name.startswith("bench_"))
    if only:
        return [n for n in names if any(o in n for o in only)]
    return [n for n in names if not opt_in(n)]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.system()} {platform.release()}, {os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _value(figure: Figure) -> str:
    return f"{figure.value:.3g} {figure.unit}" if figure.unit != "x" else f"{figure.value:.2f}x"


HAND_WRITTEN = "## Why the missed goals are missed"
"""The heading of the part of RESULTS.md written by hand after a run; a new run keeps it."""


def render(
    figures: list[Figure],
    *,
    quick: bool,
    seconds: float,
    failed: dict[str, str],
    sections: dict[str, float] | None = None,
    kept: str = "",
    command: str = "make bench",
) -> str:
    met = sum(1 for f in figures if f.met)
    goals = sum(1 for f in figures if f.met is not None)
    lines = [
        "# Benchmark results",
        "",
        f"Written by `{command}{' QUICK=1' if quick else ''}` on "
        f"{datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}; {machine()}.",
        f"Whole run: {seconds / 60:.1f} min. Goals met: {met} of {goals}. "
        f"Load average (1, 5, 15 min) at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())} "
        f"on {os.cpu_count()} cores.",
        "",
        "Every ratio is against a baseline measured in the same run; the machine is shared,",
        "so figures move between runs, and the ratios move less than the times.",
    ]
    if sections:
        lines += ["", "| section | minutes |", "|---|---|"]
        lines += [f"| {_cell(name)} | {section / 60:.1f} |" for name, section in sections.items()]
    group = None
    for figure in figures:
        if figure.group != group:
            group = figure.group
            lines += [
                "",
                f"## {group}",
                "",
                "| what | figure | goal | met | against | note |",
                "|---|---|---|---|---|---|",
            ]
        verdict = {True: "yes", False: "**no**", None: ""}[figure.met]
        lines.append(
            f"| {_cell(figure.what)} | {_value(figure)} | {_cell(figure.goal)} | {verdict} "
            f"| {_cell(figure.baseline)} | {_cell(figure.note)} |"
        )
    if failed:
        lines += ["", "## Benchmarks that did not finish", ""]
        lines += [f"- `{name}`: {_cell(error)}" for name, error in failed.items()]
    if kept:
        lines += ["", kept.rstrip()]
    return "\n".join(lines) + "\n"


def hand_written(results: Path) -> str:
    """The hand-written part of an earlier RESULTS.md (from its heading on), if any."""
    try:
        text = results.read_text()
    except OSError:
        return ""
    at = text.find(HAND_WRITTEN)
    return text[at:] if at >= 0 else ""


def run_section(name: str, workdir: Path, quick: bool, figures_out: Path) -> int:
    """One section in this process: its figures, and its error if it failed, to ``figures_out``."""
    module = importlib.import_module(f"benchmarks.{name}")
    bench = Bench(workdir, quick=quick)
    bench.group = (module.__doc__ or name).strip().splitlines()[0].rstrip(".")
    print(f"## {bench.group}", flush=True)
    error = ""
    try:
        module.run(bench)
    except Exception as exc:  # the figures measured before the failure are kept
        error = f"{type(exc).__name__}: {exc}"
        print(f"  FAILED: {error}", file=sys.stderr, flush=True)
    written = {"figures": [dataclasses.asdict(f) for f in bench.figures], "error": error}
    figures_out.write_text(json.dumps(written))
    return 1 if error else 0


def _section_in_child(name: str, workdir: Path, quick: bool) -> tuple[list[Figure], str]:
    """Runs one section in a process of its own; its figures, and its error if any."""
    out = workdir / f"{name}.figures.json"
    out.unlink(missing_ok=True)
    command = [sys.executable, "-m", "benchmarks.run", "--section", name, "--workdir", str(workdir)]
    done = subprocess.run([*command, *(["--quick"] if quick else [])], cwd=HERE.parent, check=False)
    try:
        written = json.loads(out.read_text())
    except (OSError, ValueError):
        return [], f"its process exited with {done.returncode} and wrote no figures"
    return [Figure(**f) for f in written["figures"]], written["error"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small scale (a smoke run)")
    parser.add_argument(
        "--only",
        nargs="*",
        default=[],
        help="run the modules whose names contain these (the opt-in ones run only so: --only attribution)",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help="where to write the results (an opt-in section writes to its own file beside it)",
    )
    parser.add_argument("--section", help=argparse.SUPPRESS)  # one module, in a child process
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.section:
        return run_section(
            args.section, args.workdir, args.quick, args.workdir / f"{args.section}.figures.json"
        )
    started = time.perf_counter()
    failed: dict[str, str] = {}
    outputs: dict[Path, Output] = {}
    with tempfile.TemporaryDirectory(prefix="soapwb-bench-") as tmp:
        for name in bench_modules(args.only):
            output = outputs.setdefault(results_file(name, args.results), Output())
            begun = time.perf_counter()
            measured, error = _section_in_child(name, Path(tmp), args.quick)
            output.figures += measured
            if error:  # one benchmark failing must not lose the others' figures
                failed[name] = output.failed[name] = error
            output.sections[f"`{name}`"] = time.perf_counter() - begun
            output.commands.add(f"make bench-{name.removeprefix('bench_')}" if opt_in(name) else "make bench")
            print(f"  ({output.sections[f'`{name}`'] / 60:.1f} min)", flush=True)
    seconds = time.perf_counter() - started
    for path, output in outputs.items():
        text = render(
            output.figures,
            quick=args.quick,
            seconds=sum(output.sections.values()),
            failed=output.failed,
            sections=output.sections,
            kept=hand_written(path),
            command=" and ".join(sorted(output.commands)),
        )
        path.write_text(text)
        print(f"wrote {path}")
    print(f"done in {seconds / 60:.1f} min")
    return 1 if failed else 0


@dataclasses.dataclass
class Output:
    """What one results file gets from a run: its sections' figures, times and failures."""

    figures: list[Figure] = dataclasses.field(default_factory=list)
    sections: dict[str, float] = dataclasses.field(default_factory=dict)
    failed: dict[str, str] = dataclasses.field(default_factory=dict)
    commands: set[str] = dataclasses.field(default_factory=set)


if __name__ == "__main__":
    sys.exit(main())
