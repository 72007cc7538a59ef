"""Hostile shapes: a context naming 100,000 children, a chain of thousands of forks, a
chain of thousands of invocations of one session, a session of thousands of contexts.

What each command and page gives on them, checked against what the shape holds; what
they cost is in tests/test_bounded_cost.py, which builds its stores with the writers
here. The stores are written as the files are (``session.json``, one file per context,
one record per invocation), straight as JSON: thousands of them in well under a second.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from soap_core import Context, InvocationRecord, Party, Session, Store, fork_tree, message_rows
from soap_core._tree import TREE_INDENT_LIMIT, ContextNode, tree_lines
from soap_core.runtime import invocation_chain, invocation_chains
from soapwb.runtime_commands import INDENT_LIMIT
from tests.apptest import open_app_page
from workbench.context_views import TREE_AROUND
from workbench.fork_tree_views import DISCARDED_SHOWN

ROLE = "HelloPete"
SESSION_UUID = "20250611-3f0c2b6e-8a41-4d8e-9c1a-5b7d2e9f4a10"
ROOT_ID = "ffffffff-7c3f-4e59-a0b8-2f6d91c4e7a3"


def context_id(n: int) -> str:
    return f"{n:08x}-7c3f-4e59-a0b8-2f6d91c4e7a3"


def message(n: int, text: str) -> dict[str, Any]:
    return {
        "role": "user" if n % 2 == 0 else "assistant",
        "content": [{"type": "text", "text": text}],
        "_type": "Message",
        "id": f"{n:08x}-1111-4e59-a0b8-2f6d91c4e7a3",
        "_hook_ids": [],
        "creation_timestamp": "2025-06-11T14:05:42.640118",
        "_sequence_number": n,
    }


def context_file(
    cid: str, *, origin: str | None = None, children: list[str] | None = None, messages: int = 2
) -> dict[str, Any]:
    return {
        "messages": [message(n, f"{cid} says {n}") for n in range(messages)],
        "anchor_points": [],
        "id": cid,
        "origin_context_id": origin,
        "children": children or [],
    }


def session_folder(root: Path, uuid: str = SESSION_UUID) -> Path:
    return root / "agents" / ROLE / uuid


def write_session(root: Path, active: str, contexts: list[dict[str, Any]], uuid: str = SESSION_UUID) -> Path:
    """A session folder of ``contexts`` (context file dicts), ``active`` the active one."""
    folder = session_folder(root, uuid)
    folder.mkdir(parents=True)
    session = {"uuid": uuid, "active_context_id": active, "auto_approve_tools": [], "state_data": {}}
    (folder / "session.json").write_text(json.dumps(session))
    for data in contexts:
        (folder / f"{data['id']}.json").write_text(json.dumps(data))
    return folder


def wide_store(root: Path, children: int) -> Path:
    """One context naming ``children`` children, none of them saved (discarded forks)."""
    names = [context_id(n) for n in range(children)]
    write_session(root, ROOT_ID, [context_file(ROOT_ID, children=names)])
    return root


def chain_store(root: Path, contexts: int) -> Path:
    """A chain of ``contexts`` forks, each the fork of the one before (compactions of a
    long run), the last one active."""
    ids = [context_id(n) for n in range(contexts)]
    files = [
        context_file(cid, origin=ids[n - 1] if n else None, children=ids[n + 1 : n + 2])
        for n, cid in enumerate(ids)
    ]
    write_session(root, ids[-1], files)
    return root


def many_contexts_store(root: Path, contexts: int) -> Path:
    """A session of ``contexts`` contexts: a root and its forks, the root active."""
    forks = [context_id(n) for n in range(contexts - 1)]
    files = [context_file(ROOT_ID, children=forks, messages=3)]
    files += [context_file(cid, origin=ROOT_ID, messages=2) for cid in forks]
    write_session(root, ROOT_ID, files)
    return root


def invocation_id(n: int) -> str:
    return f"20250611T000000{n:06d}-{n:08x}"


def invocation_chain_store(root: Path, depth: int) -> Path:
    """A session whose object invoked itself ``depth`` times, each invocation made by the
    one before (a recursive agent): one record per invocation, as the runtime writes it
    (``InvocationRecord.as_dict`` into ``invocations/<id>.json``)."""
    folder = write_session(root, ROOT_ID, [context_file(ROOT_ID, messages=2)])
    (folder / "invocations").mkdir()
    for n in range(depth):
        record = InvocationRecord(
            id=invocation_id(n),
            callee=Party(ROLE, "pete", SESSION_UUID),
            caller=Party(ROLE, "pete", SESSION_UUID, ROOT_ID, n, None) if n else None,
            prompt=f"step {n}",
            thread=None,
            started_at=f"2025-06-11T00:00:00.{n:06d}+00:00",
            ended_at=f"2025-06-11T00:00:01.{n:06d}+00:00",
            parent_invocation_id=invocation_id(n - 1) if n else None,
            outcome="ok",
        )
        (folder / "invocations" / f"{record.id}.json").write_text(json.dumps(record.as_dict()))
    return root


def wide_session(children: list[str]) -> Session:
    """In memory: one context naming ``children``."""
    session = Session(ROLE, SESSION_UUID)
    root = Context()
    root.id = ROOT_ID
    root.children = list(children)
    session.set_active_context(root)
    return session


def chain_session(ids: list[str]) -> Session:
    """In memory: a chain of forks with these ids, each the fork of the one before."""
    session = Session(ROLE, SESSION_UUID)
    for n, cid in enumerate(ids):
        context = Context()
        context.id = cid
        context.origin_context_id = ids[n - 1] if n else None
        context.children = ids[n + 1 : n + 2]
        session.add_context(context)
    session.active_context_id = ids[-1]
    return session


def test_a_context_naming_many_children_lists_each_once_as_discarded() -> None:
    ids = [context_id(n) for n in range(3000)]
    nodes = fork_tree(wide_session([*ids, ids[5], ROOT_ID]))  # a repeat and itself
    assert [n.id for n in nodes] == [ROOT_ID, *ids]
    assert nodes[0].children == tuple(ids) and nodes[0].in_cycle
    assert {(n.kind, n.depth, n.parent_id) for n in nodes[1:]} == {("discarded", 1, ROOT_ID)}


def test_a_long_chain_of_forks_is_one_path_without_loops() -> None:
    ids = [context_id(n) for n in range(3000)]
    nodes = fork_tree(chain_session(ids))
    assert [(n.id, n.depth) for n in nodes] == [(cid, depth) for depth, cid in enumerate(ids)]
    assert not any(n.in_cycle for n in nodes)


def test_a_loop_at_the_end_of_a_long_chain_marks_only_the_contexts_on_it() -> None:
    ids = [context_id(n) for n in range(3000)]
    session = chain_session(ids)
    session.contexts[ids[1999]].children = []
    session.contexts[ids[2999]].children = [ids[2000]]
    session.contexts[ids[2000]].origin_context_id = ids[2999]  # 2000 .. 2999 loop
    nodes = fork_tree(session)
    assert sorted(n.id for n in nodes) == sorted(ids)
    assert {n.id for n in nodes if n.in_cycle} == set(ids[2000:])


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Any:
    from soapwb.cli import main

    def run(*argv: str | Path) -> str:
        assert main([str(a) for a in argv]) == 0
        return capsys.readouterr().out

    return run


def fan_out_store(root: Path, calls: int) -> tuple[Path, str]:
    """One invocation of a caller session that invoked another session ``calls`` times
    (one object asking another, over and over); returns the callee session's uuid."""
    callee = "20250611-aaaaaaaa-8a41-4d8e-9c1a-5b7d2e9f4a10"
    caller_dir = write_session(root, ROOT_ID, [context_file(ROOT_ID)])
    callee_dir = write_session(root, context_id(0), [context_file(context_id(0))], uuid=callee)
    top = InvocationRecord(
        id=invocation_id(0),
        callee=Party(ROLE, "pete", SESSION_UUID),
        caller=None,
        prompt="fan out",
        thread=None,
        started_at="2025-06-11T00:00:00+00:00",
        ended_at="2025-06-11T00:00:09+00:00",
        outcome="ok",
    )
    records = [(top, [caller_dir])]
    for n in range(1, calls + 1):
        made = InvocationRecord(
            id=invocation_id(n),
            callee=Party(ROLE, "other", callee),
            caller=Party(ROLE, "pete", SESSION_UUID, ROOT_ID, n, None),
            prompt=f"call {n}",
            thread=None,
            started_at=f"2025-06-11T00:00:01.{n:06d}+00:00",
            ended_at=f"2025-06-11T00:00:02.{n:06d}+00:00",
            parent_invocation_id=top.id,
            outcome="ok",
        )
        records.append((made, [caller_dir, callee_dir]))
    for record, folders in records:
        for folder in folders:
            (folder / "invocations").mkdir(exist_ok=True)
            (folder / "invocations" / f"{record.id}.json").write_text(json.dumps(record.as_dict()))
    return root, callee


# -- tree -----------------------------------------------------------------------------------------


def test_tree_prints_every_child_of_a_wide_context_the_last_one_closing(tmp_path: Path, cli: Any) -> None:
    root = wide_store(tmp_path / "store", 2000)
    lines = cli("tree", SESSION_UUID, "--store", root).splitlines()
    ids = [context_id(n) for n in range(2000)]
    assert lines[1] == f"{ROOT_ID}  main, 2 messages  [active]"
    assert lines[2:] == [f"├── {cid}  discarded (no file)" for cid in ids[:-1]] + [
        f"└── {ids[-1]}  discarded (no file)"
    ]
    listed = json.loads(cli("tree", SESSION_UUID, "--store", root, "--json"))["contexts"]
    assert listed[0]["children"] == ids and [c["id"] for c in listed[1:]] == ids


def test_tree_indents_a_long_chain_no_deeper_than_its_limit_and_names_the_depth(
    tmp_path: Path, cli: Any
) -> None:
    root = chain_store(tmp_path / "store", 60)
    lines = cli("tree", SESSION_UUID, "--store", root).splitlines()[1:]
    ids = [context_id(n) for n in range(60)]
    assert lines[0] == f"{ids[0]}  root, 2 messages"
    assert lines[1] == f"└── {ids[1]}  fork 1, 2 messages"  # named as the pages name them
    assert (
        lines[TREE_INDENT_LIMIT + 1]
        == "    " * TREE_INDENT_LIMIT
        + f"└── {ids[TREE_INDENT_LIMIT + 1]}  fork {TREE_INDENT_LIMIT + 1}, 2 messages"
    )
    deep = "    " * TREE_INDENT_LIMIT + "[depth 59] └── " + f"{ids[59]}  main, 2 messages  [active]"
    assert lines[59] == deep
    assert {len(line) - len(line.lstrip(" ")) for line in lines[TREE_INDENT_LIMIT + 1 :]} == {
        4 * TREE_INDENT_LIMIT
    }
    depths = [
        n["depth"] for n in json.loads(cli("tree", SESSION_UUID, "--store", root, "--json"))["contexts"]
    ]
    assert depths == list(range(60))


# -- trace ----------------------------------------------------------------------------------------


def test_trace_prints_a_deep_chain_once_each_invocation_with_its_depth(tmp_path: Path, cli: Any) -> None:
    root = invocation_chain_store(tmp_path / "store", 40)
    lines = cli("trace", SESSION_UUID, "--store", root).splitlines()
    assert (
        lines[0] == "chain 1 of 1: 40 invocations, 40 of this session (marked >), by depth from the outermost"
    )
    assert len(lines) == 41
    for depth, line in enumerate(lines[1:]):
        indent = "  " * min(depth, INDENT_LIMIT)
        called = (
            "called from Python" if depth == 0 else f"called from {ROLE}/{SESSION_UUID} context {ROOT_ID}"
        )
        assert line.startswith(f"> {depth:>3} {indent}{ROLE}/{SESSION_UUID}  [{called}"), line
    [chain] = json.loads(cli("trace", SESSION_UUID, "--store", root, "--json"))
    assert [(f["invocation_id"], f["depth"]) for f in chain["frames"]] == [
        (invocation_id(n), n) for n in range(40)
    ]
    assert chain["traced"] == [invocation_id(n) for n in range(40)] and chain["loop"] is None


def test_the_stack_through_each_invocation_of_a_deep_chain_is_cut_from_the_chain(tmp_path: Path) -> None:
    root = invocation_chain_store(tmp_path / "store", 30)
    traces = invocation_chain(Store(root), SESSION_UUID)
    ids = [invocation_id(n) for n in range(30)]
    for k, trace in enumerate(traces):
        assert [f.invocation_id for f in trace.callers] == ids[:k]
        assert [f.depth for f in trace.callers] == list(range(-k, 0))
        assert trace.invocation is not None and (trace.invocation.invocation_id, trace.invocation.depth) == (
            ids[k],
            0,
        )
        assert [(f.invocation_id, f.depth) for f in trace.callees] == [
            (i, d + 1) for d, i in enumerate(ids[k + 1 :])
        ]


def test_a_session_invoked_many_times_by_one_invocation_is_one_chain_under_it(
    tmp_path: Path, cli: Any
) -> None:
    root, callee = fan_out_store(tmp_path / "store", 500)
    [chain] = invocation_chains(Store(root), callee)
    assert [(f.invocation_id, f.depth) for f in chain.frames] == [(invocation_id(0), 0)] + [
        (invocation_id(n), 1) for n in range(1, 501)
    ]
    assert chain.traced == [invocation_id(n) for n in range(1, 501)]
    traces = invocation_chain(Store(root), callee)
    assert [([c.invocation_id for c in t.callers], t.callees) for t in traces] == [
        ([invocation_id(0)], [])
    ] * 500
    [caller_chain] = invocation_chains(Store(root), SESSION_UUID)  # from above: the same chain
    assert caller_chain.frames == chain.frames and caller_chain.traced == [invocation_id(0)]
    lines = cli("trace", callee, "--store", root).splitlines()
    assert len(lines) == 502 and lines[1].startswith(f"    0 {ROLE}/{SESSION_UUID}")
    assert all(line.startswith(f">   1   {ROLE}/{callee}") for line in lines[2:])


# -- show -----------------------------------------------------------------------------------------


def shown_from_the_whole_session(root: Path, context: str | None) -> dict[str, Any]:
    """What ``show --json`` printed when it loaded every context, from the library."""
    session = Store(root, use_catalog=False).load_session(SESSION_UUID, require_active=context is None)
    chosen = session.context(context) if context else session.active_context
    return {
        "context": chosen.id,
        "messages": json.loads(json.dumps([r.as_dict() for r in message_rows(chosen)])),
        "load_errors": {k: str(v) for k, v in session.load_errors.items()},
    }


@pytest.mark.parametrize("context", [None, "0000002a", context_id(0x2A)], ids=["active", "prefix", "id"])
@pytest.mark.parametrize("catalog", [True, False], ids=["catalog", "no-catalog"])
def test_show_of_a_session_of_many_contexts_prints_what_loading_them_all_did(
    tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch, context: str | None, catalog: bool
) -> None:
    root = many_contexts_store(tmp_path / "store", 200)
    folder = session_folder(root)
    (folder / f"{context_id(7)}.json").write_text("{ not json")  # a broken fork
    (folder / "20250611-dup.json").write_bytes((folder / f"{context_id(9)}.json").read_bytes())  # a copy
    if not catalog:
        monkeypatch.setenv("SOAPWB_NO_CATALOG", "1")
    argv = ["show", SESSION_UUID, *(["--context", context] if context else []), "--store", root]
    shown = json.loads(cli(*argv, "--json"))
    expected = shown_from_the_whole_session(root, context)
    assert {key: shown[key] for key in expected} == expected
    assert len(expected["load_errors"]) == 2
    text = cli(*argv)
    assert f"context {expected['context']}" in text.splitlines()[0]
    assert text.count("unreadable: ") == 2


@pytest.mark.parametrize(
    ("context", "problem"),
    [("000000", "matches several contexts"), ("abc", "no such context in this session")],
    ids=["ambiguous", "unknown"],
)
def test_show_of_a_context_no_single_file_holds_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], context: str, problem: str
) -> None:
    from soapwb.cli import main

    root = many_contexts_store(tmp_path / "store", 50)
    assert main(["show", SESSION_UUID, "--context", context, "--store", str(root)]) == 1
    assert f"context {context!r}: {problem}" in capsys.readouterr().err


def test_show_of_a_broken_active_context_names_its_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from soapwb.cli import main

    root = many_contexts_store(tmp_path / "store", 50)
    broken = session_folder(root) / f"{ROOT_ID}.json"
    broken.write_text('{"id": ')
    assert main(["show", SESSION_UUID, "--store", str(root)]) == 1
    err = capsys.readouterr().err
    assert str(broken) in err and "at $" in err


# -- the pages on the same shapes -----------------------------------------------------------------


def figure_of(at: AppTest) -> dict[str, Any]:
    [chart] = at.get("plotly_chart")
    spec: dict[str, Any] = json.loads(chart.proto.spec)
    return spec


def test_the_fork_tree_page_draws_a_wide_context_with_its_first_children_and_one_node_for_the_rest(
    tmp_path: Path,
) -> None:
    root = wide_store(tmp_path / "store", 2000)
    ids = [context_id(n) for n in range(2000)]
    at = open_app_page(root, "fork_tree", session=SESSION_UUID)
    drawn = {t["name"]: t for t in figure_of(at)["data"] if t.get("name") in ("root", "discarded")}
    assert drawn["root"]["customdata"] == [[ROOT_ID]]
    assert drawn["discarded"]["customdata"] == [[cid] for cid in ids[: DISCARDED_SHOWN + 1]]
    fold = drawn["discarded"]["hovertext"][-1]
    assert fold.startswith(f"{2000 - DISCARDED_SHOWN:,} more discarded forks<br>")
    assert at.text[1].value == "2001 contexts: 1 root, 2000 discarded"
    assert [r["name"] for r in at.dataframe[0].value.to_dict("records")][-1] == "1,950 more discarded forks"
    at = open_app_page(root, "fork_tree", session=SESSION_UUID, context=ids[1500])  # one folded away
    assert next(box for box in at.selectbox if box.label == "Node").value == ids[DISCARDED_SHOWN]
    assert any(ids[1500] in text.value and "discarded" in text.value for text in at.text)


def test_the_traceback_page_lists_every_invocation_of_a_deep_chain_and_the_stack_of_one(
    tmp_path: Path,
) -> None:
    root = invocation_chain_store(tmp_path / "store", 300)
    ids = [invocation_id(n) for n in range(300)]
    at = open_app_page(root, "traceback", session=SESSION_UUID)
    listed = at.dataframe[0].value
    assert list(listed["invocation"]) == ids
    assert (list(listed["callers"]), list(listed["callees"])) == (list(range(300)), list(range(299, -1, -1)))
    latest = at.dataframe[1].value  # the latest invocation: the deepest, under all the others
    assert (list(latest["invocation"]), list(latest["depth"])) == (ids, list(range(-299, 1)))
    at = open_app_page(root, "traceback", session=SESSION_UUID, invocation=ids[100])
    chosen = at.dataframe[1].value
    assert (list(chosen["invocation"]), list(chosen["depth"])) == (ids, list(range(-100, 200)))


@pytest.mark.parametrize("shape", [chain_store, many_contexts_store], ids=["fork-chain", "many-forks"])
def test_the_context_page_lists_the_forks_around_the_shown_context(tmp_path: Path, shape: Any) -> None:
    root = shape(tmp_path / "store", 300)
    shown = context_id(150)
    at = open_app_page(root, "context", session=SESSION_UUID, context=shown)
    [tree] = [t.value for t in at.text if "<- shown" in t.value]
    lines = tree.splitlines()
    before = 150 - TREE_AROUND if shape is chain_store else 151 - TREE_AROUND  # the root comes first there
    assert lines[0] == f"… {before} contexts before these"
    assert lines[-1] == f"… {300 - before - 2 * TREE_AROUND - 1} contexts after these"
    assert len(lines) == 2 * TREE_AROUND + 3
    assert lines[TREE_AROUND + 1].endswith(f"{shown[:8]}  <- shown")


def test_tree_continues_an_ancestors_line_down_to_its_next_sibling() -> None:
    """``│`` under a context that has a later sibling; spaces under a last one."""

    def node(cid: str, parent: str | None, depth: int) -> ContextNode:
        return ContextNode(cid, parent, (), "fork" if parent else "root", depth, False, 1, f"{cid}.json")

    nodes = [
        node("r", None, 0),
        node("a", "r", 1),
        node("a1", "a", 2),
        node("a1x", "a1", 3),
        node("a2", "a", 2),
        node("b", "r", 1),
        node("b1", "b", 2),
    ]
    drawn = [line[: line.index(n.id) + len(n.id)] for line, n in zip(tree_lines(nodes), nodes, strict=True)]
    assert drawn == [
        "r",
        "├── a",
        "│   ├── a1",
        "│   │   └── a1x",
        "│   └── a2",
        "└── b",
        "    └── b1",
    ]
