"""``python -m fuzz --cases N``: run the fuzzer and report; ``--replay DIR``: read a saved
failure again (every reader, with its traceback)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fuzz._runner import default_workers, run


def _replay(directory: Path) -> int:
    from fuzz._targets import STORE_READERS, check_cli, cli_commands, read_openpoke_dir, read_store

    meta = json.loads((directory / "case.json").read_text())
    files = directory / "files"
    print(f"{meta['seed']}:{meta['file']} [{meta['mutation']}] ({meta['mode']}): {meta['problem']}")
    if meta["kind"] == "openpoke":
        read_openpoke_dir(files / meta["data_dir"], directory / "scratch-store", import_it=True)
        check_cli(
            [
                "import",
                "openpoke",
                str(files / meta["data_dir"]),
                "--store",
                str(directory / "cli-store"),
                "--json",
            ]
        )
    elif meta["mode"].startswith("catalog-"):
        _replay_catalog(files, meta)
    else:
        read_store(files, meta["focus"], list(STORE_READERS), catalog=meta["mode"] == "catalog")
        name = meta["focus"].rsplit("/", 1)[1] if meta["focus"] else None
        for argv in cli_commands(files, name):
            check_cli(argv)
    print("no failure: the readers read it as they should now")
    return 0


def _replay_catalog(files: Path, meta: dict[str, object]) -> None:
    """A damaged catalog again: every answer through it against the files' (a forged
    case first makes the stamp vouch for the damaged bytes, with a build id of its own,
    so the catalog's build check is what stops it there)."""
    from fuzz._catalog import answers, differences, forge_stamp, remove_catalog

    database = files / str(meta["file"])
    damaged = database.read_bytes()
    remove_catalog(files)
    database.write_bytes(damaged)
    if meta["mode"] == "catalog-forged":
        forge_stamp(database, str(meta.get("build") or "forged"))
    got = answers(files, catalog=True)
    remove_catalog(files)
    truth = answers(files, catalog=False)
    for line in differences(got, truth):
        print(f"  differs: {line}")


def _atheris(args: argparse.Namespace) -> int:
    from fuzz._atheris import available, run_atheris

    if not available():
        print("fuzz: atheris is not installed (pip install atheris): no atheris cases were run")
        return 2
    summary = run_atheris(args.cases, args.seed, args.out, with_workbench=not args.no_workbench)
    failures = summary["failures"]
    print(f"fuzz: {summary['cases']} cases (atheris, seed {args.seed}, 1 process)")
    for line in summary["libfuzzer"]:
        print(f"  libFuzzer: {line}")
    print("  no failures" if not failures else "")
    for failure in failures:
        print(f"  FAILURE at {failure['key']}: {failure['text']}\n    saved in {failure['saved']}")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__)
    parser.add_argument("--cases", type=int, default=100_000, help="cases to run (default 100,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument(
        "--engine",
        choices=("hypothesis", "random", "atheris"),
        default="hypothesis",
        help="where the choices come from (atheris: libFuzzer's coverage guidance, where it installs)",
    )
    parser.add_argument("--out", type=Path, default=Path("test-output/fuzz"), help="where failures are saved")
    parser.add_argument("--no-workbench", action="store_true", help="leave out the runtime-written seed")
    parser.add_argument("--replay", type=Path, metavar="DIR", help="read a saved failure again")
    parser.add_argument(
        "--kinds",
        default="",
        help="mutate only files of these kinds, comma-separated (e.g. catalog: the catalog's database)",
    )
    args = parser.parse_args(argv)
    if args.replay is not None:
        return _replay(args.replay)
    if args.engine == "atheris":
        return _atheris(args)
    from fuzz._corpus import build_corpus

    corpus = build_corpus(with_workbench=not args.no_workbench)
    kinds = frozenset(k for k in args.kinds.split(",") if k) or None
    report = run(
        corpus,
        args.cases,
        workers=args.workers,
        seed=args.seed,
        engine=args.engine,
        out=args.out,
        kinds=kinds,
    )
    print("\n".join(report.lines()))
    (args.out / "summary.json").write_text(json.dumps(report.as_dict(), indent=2, default=str))
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
