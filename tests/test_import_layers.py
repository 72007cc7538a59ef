"""The library's import graph: no circle between modules, and each package imports only
the layers below it (issue 24).

Every import counts, wherever it is written: at the top, inside a function (a late import
that dodges a circle at run time) or under ``TYPE_CHECKING`` (one that dodges it for the
type checker). The graph is read from the source with :mod:`ast`, so a circle fails here
before it can fail at import time."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS: dict[str, set[str]] = {
    "soap_core": set(),
    "soap_gen": {"soap_core"},
    "local_model": {"soap_core"},
    "replay": {"soap_core"},
    "analysis": {"soap_core", "replay"},
    "importers": {"soap_core", "replay"},
    "demo": {"soap_core"},
    "workbench": {"soap_core", "replay", "analysis", "importers"},
    "fleet": {"soap_core", "replay", "analysis"},
    "soapwb": {
        "soap_core",
        "soap_gen",
        "local_model",
        "replay",
        "analysis",
        "importers",
        "demo",
        "fleet",
    },
    "fuzz": {"soap_core", "replay", "analysis", "importers", "soapwb"},
}
"""What each package may import besides itself: the command line shares the replay
layer with the pages and never imports the workbench (issue 24)."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for package in LAYERS for p in sorted((ROOT / package).rglob("*.py"))}


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The library modules ``name`` imports, anywhere in its file."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imported(name, path, known)) for name, path in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_module_imports_its_way_back_to_itself() -> None:
    graph = import_graph()
    assert len(graph) > 100  # the whole library was read
    assert circles(graph) == []


def test_each_package_imports_only_the_layers_below_it() -> None:
    wrong = sorted(
        f"{name} imports {target}"
        for name, targets in import_graph().items()
        for target in targets
        if target.split(".")[0] != name.split(".")[0]
        and target.split(".")[0] not in LAYERS[name.split(".")[0]]
    )
    assert wrong == []


def test_the_command_line_reaches_an_importer_only_to_run_it() -> None:
    """``--at`` is asked of the session's request source, so the imports of an importer
    left in soapwb are ``soapwb import`` and ``soapwb export``, the importers' own fronts."""
    reaching = {
        name
        for name, targets in import_graph().items()
        if name.split(".")[0] == "soapwb" and any(target.split(".")[0] == "importers" for target in targets)
    }
    assert reaching <= {"soapwb.import_commands", "soapwb.export_commands"}


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": set(), "c": {"c"}}, []),
        ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b"], ["c", "d"]]),
    ],
)
def test_the_circle_finder_finds_circles(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert sorted(circles(graph)) == expected


def test_a_late_or_type_checking_import_counts(tmp_path: Path) -> None:
    """The two circles this replaced were hidden this way (replay._materialize ↔
    replay._sources under TYPE_CHECKING; runtime._agentic → _invoke inside a method)."""
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import soap_core._store\n"
        "def f():\n    from replay import _sources\n",
        "utf-8",
    )
    known = {"soap_core._store": Path(), "replay._sources": Path(), "replay": Path()}
    assert set(imported("m", source, known)) == {"soap_core._store", "replay._sources"}
