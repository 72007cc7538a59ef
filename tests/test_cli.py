"""``soapwb ls``, ``show`` and ``tree``: what they print matches the library functions and
the facts of the sample store, and every error is one line on stderr, never a traceback."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from soap_core import SESSION_FILE, Store, fork_tree, message_rows, session_overview
from soapwb.cli import main
from tests.conftest import CHILD_ID, DISCARDED_ID, PARENT_ID, SESSION_UUID, edit_json, session_dir, snapshot

ROLE = "HelloPete"
SCRIPT = shutil.which("soapwb", path=str(Path(sys.executable).parent)) or shutil.which("soapwb")
REFS = [SESSION_UUID, "3f0c", "20250611-3f0c", "3f0c2b6e-8a41-4d8e-9c1a-5b7d2e9f4a10"]


class Result(NamedTuple):
    code: int
    out: str
    err: str


def plain(value: Any) -> Any:
    """``value`` as it looks after a trip through JSON (tuples become lists)."""
    return json.loads(json.dumps(value, default=str))


def add_session(root: Path, session_uuid: str) -> Path:
    """A copy of the sample session under another uuid."""
    target = session_dir(root, session_uuid)
    shutil.copytree(session_dir(root), target)
    edit_json(target / SESSION_FILE, lambda data: data.update(uuid=session_uuid))
    return target


@pytest.fixture
def soapwb(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """Run ``soapwb.cli.main`` in this process, with no $SOAPWB_STORE unless a test sets one."""
    monkeypatch.delenv("SOAPWB_STORE", raising=False)

    def run(*argv: str | Path) -> Result:
        capsys.readouterr()
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:  # argparse: --help and usage errors
            code = exc.code if isinstance(exc.code, int) else 0
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def run_script(*argv: str | Path, env: dict[str, str] | None = None) -> Result:
    """Run the installed ``soapwb`` console script."""
    assert SCRIPT is not None, "the soapwb console script is not installed"
    environ = {k: v for k, v in os.environ.items() if k != "SOAPWB_STORE"} | (env or {})
    proc = subprocess.run(
        [SCRIPT, *map(str, argv)], capture_output=True, text=True, env=environ, timeout=120, check=False
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def ok_json(result: Result) -> Any:
    assert (result.code, result.err) == (0, ""), result
    return json.loads(result.out)


# -- ls ----------------------------------------------------------------------------------


def test_ls_prints_one_row_for_the_one_session(soapwb: Callable[..., Result], store_copy: Path) -> None:
    result = soapwb("ls", "--store", store_copy)
    assert (result.code, result.err) == (0, "")
    header, *rows = result.out.splitlines()
    assert header.split() == [
        "ROLE",
        "SESSION",
        "THREAD",
        "ACTIVE",
        "CONTEXTS",
        "MESSAGES",
        "TOKENS",
        "FIRST",
        "LAST",
    ]
    assert len(rows) == 1
    assert rows[0].split() == [
        ROLE,
        SESSION_UUID,
        "pete-chat",
        "no",
        "2",
        "6",
        "400",
        "2025-06-11",  # to the second on the terminal (the stamp is 2025-06-11T14:03:10.114502)
        "14:03:10",
        "2025-06-11",
        "14:05:47",
    ]


def test_ls_json_is_the_session_overview(soapwb: Callable[..., Result], store_copy: Path) -> None:
    listed = ok_json(soapwb("ls", "--store", store_copy, "--json"))
    store = Store(store_copy)
    assert listed == plain([session_overview(store, s).as_dict() for s in store.sessions()])
    assert len(listed) == 1
    row = listed[0]
    assert (row["uuid"], row["thread_id"], row["contexts"], row["messages"]) == (
        SESSION_UUID,
        "pete-chat",
        2,
        6,
    )
    assert row["error"] is None


def test_ls_of_an_empty_store_says_so(soapwb: Callable[..., Result], tmp_path: Path) -> None:
    result = soapwb("ls", "--store", tmp_path)
    assert (result.code, result.err) == (0, "")
    assert "no sessions" in result.out
    assert ok_json(soapwb("ls", "--store", tmp_path, "--json")) == []


def test_ls_of_an_empty_store_says_so_again_after_its_catalog_was_made(
    soapwb: Callable[..., Result], tmp_path: Path
) -> None:
    assert soapwb("ls", "--store", tmp_path).code == 0  # writes the catalog beside nothing
    result = soapwb("ls", "--store", tmp_path)
    assert (result.code, result.err) == (0, "") and "no sessions" in result.out


def test_a_folder_that_is_no_store_is_an_error_not_an_empty_listing(
    soapwb: Callable[..., Result], tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("not a store")
    (tmp_path / "photos").mkdir()
    for path, says, code in (
        (tmp_path, "is not a sOAP store: it has no agents/ or sessions/ folder", 2),
        (tmp_path / "missing", "no such store directory", 1),
        (tmp_path / "notes.txt", "no such store directory", 1),
    ):
        for command in (("ls",), ("search", "x"), ("show", "abc")):
            result = soapwb(*command, "--store", path)
            assert result.code == code and says in result.err and result.out == "", (command, path, result)


def test_ls_with_a_broken_session_json_still_lists_the_healthy_session(
    soapwb: Callable[..., Result], store_copy: Path
) -> None:
    healthy = "20250612-9d41c7e2-5b38-4f06-a1d7-3e8c6b2f0a95"
    add_session(store_copy, healthy)
    broken = session_dir(store_copy) / SESSION_FILE
    broken.write_text(broken.read_text()[:50])

    result = soapwb("ls", "--store", store_copy)
    assert (result.code, result.err) == (0, "")
    assert any(line.startswith(f"{ROLE}  {healthy}") for line in result.out.splitlines())
    broken_lines = [line for line in result.out.splitlines() if line.startswith("broken:")]
    assert len(broken_lines) == 1
    assert broken_lines[0].startswith(f"broken: {ROLE}/{SESSION_UUID}: ")
    assert str(broken) in broken_lines[0]

    rows = {row["uuid"]: row for row in ok_json(soapwb("ls", "--store", store_copy, "--json"))}
    assert rows.keys() == {SESSION_UUID, healthy}
    assert str(broken) in rows[SESSION_UUID]["error"]
    assert (rows[healthy]["error"], rows[healthy]["messages"]) == (None, 6)


# -- show --------------------------------------------------------------------------------


@pytest.mark.parametrize("ref", REFS)
def test_show_json_is_the_message_rows_of_the_active_context(
    soapwb: Callable[..., Result], store_copy: Path, ref: str
) -> None:
    shown = ok_json(soapwb("show", ref, "--store", store_copy, "--json"))
    session = Store(store_copy).load_session(SESSION_UUID)
    assert shown["messages"] == plain([r.as_dict() for r in message_rows(session.active_context)])
    assert (shown["session"], shown["context"], shown["active"]) == (SESSION_UUID, CHILD_ID, True)
    assert (shown["origin_context_id"], shown["thread_id"], shown["tokens"]) == (PARENT_ID, "pete-chat", 400)
    assert shown["load_errors"] == {}
    assert len(shown["messages"]) == 6
    system_prompt = shown["messages"][0]
    assert system_prompt["message_type"] == "SystemPromptMessage"
    assert (system_prompt["tokens"], system_prompt["cached_tokens"], system_prompt["stale"]) == (79, 49, True)
    assert [m["stale"] for m in shown["messages"][1:]] == [False] * 5


@pytest.mark.parametrize("ref", REFS)
def test_show_prints_the_active_context_with_its_stale_system_prompt(
    soapwb: Callable[..., Result], store_copy: Path, ref: str
) -> None:
    result = soapwb("show", ref, "--store", store_copy)
    assert (result.code, result.err) == (0, "")
    lines = result.out.splitlines()
    assert lines[0] == f"{ROLE}/{SESSION_UUID}  context {CHILD_ID}  fork of {PARENT_ID}"
    assert lines[1] == "6 messages, 400 tokens (cl100k_base)"
    assert "79 (cached 49, stale)" in lines[3]
    assert "You asked me to remember 42." in lines[-2]
    assert lines[-1].strip() == "── anchor messages"


def test_show_context_prefix_shows_the_parent_context(
    soapwb: Callable[..., Result], store_copy: Path
) -> None:
    shown = ok_json(soapwb("show", "3f0c", "--context", "b1d6", "--store", store_copy, "--json"))
    parent = Store(store_copy).load_session(SESSION_UUID).contexts[PARENT_ID]
    assert (shown["context"], shown["active"], shown["origin_context_id"]) == (PARENT_ID, False, None)
    assert shown["messages"] == plain([r.as_dict() for r in message_rows(parent)])
    assert len(shown["messages"]) == 7

    result = soapwb("show", "3f0c", "--context", "b1d6", "--store", store_copy)
    assert (result.code, result.err) == (0, "")
    assert result.out.splitlines()[0] == f"{ROLE}/{SESSION_UUID}  context {PARENT_ID}"
    assert "7 messages" in result.out


def test_show_chronological_orders_by_sequence_number(
    soapwb: Callable[..., Result], store_copy: Path
) -> None:
    # A tool result inserted at its anchor after a later message was appended: display
    # order [.., tool_use, tool_result, assistant] but the result happened last.
    def result_arrives_last(context: dict[str, Any]) -> None:
        context["messages"][4]["_sequence_number"] = 10
        context["_mutation_counter"] = 11

    edit_json(session_dir(store_copy) / f"{CHILD_ID}.json", result_arrives_last)
    context = Store(store_copy).load_session(SESSION_UUID).active_context

    shown = ok_json(soapwb("show", "3f0c", "--chronological", "--store", store_copy, "--json"))
    assert [m["index"] for m in shown["messages"]] == [0, 1, 2, 3, 5, 4]
    assert shown["messages"] == plain([r.as_dict() for r in message_rows(context, chronological=True)])
    in_display_order = ok_json(soapwb("show", "3f0c", "--store", store_copy, "--json"))
    assert [m["index"] for m in in_display_order["messages"]] == [0, 1, 2, 3, 4, 5]

    text = soapwb("show", "3f0c", "--chronological", "--store", store_copy).out
    assert text.index("You asked me to remember 42.") < text.index("-> (empty)")
    assert "── anchor" not in text
    text = soapwb("show", "3f0c", "--store", store_copy).out
    assert text.index("-> (empty)") < text.index("You asked me to remember 42.")


def test_show_chronological_on_the_fixture_keeps_display_order(
    soapwb: Callable[..., Result], store_copy: Path
) -> None:
    shown = ok_json(soapwb("show", "3f0c", "--chronological", "--store", store_copy, "--json"))
    context = Store(store_copy).load_session(SESSION_UUID).active_context
    assert shown["messages"] == plain([r.as_dict() for r in message_rows(context, chronological=True)])
    assert [m["sequence_number"] for m in shown["messages"]] == [4, 5, 6, 7, 8, 9]


# -- tree --------------------------------------------------------------------------------


@pytest.mark.parametrize("ref", REFS)
def test_tree_json_is_the_fork_tree(soapwb: Callable[..., Result], store_copy: Path, ref: str) -> None:
    shown = ok_json(soapwb("tree", ref, "--store", store_copy, "--json"))
    session = Store(store_copy).load_session(SESSION_UUID)
    assert shown["contexts"] == plain([dataclasses.asdict(n) for n in fork_tree(session)])
    assert (shown["session"], shown["active_context_id"], shown["unreadable_files"]) == (
        SESSION_UUID,
        CHILD_ID,
        {},
    )
    nodes = {n["id"]: n for n in shown["contexts"]}
    assert [n["id"] for n in shown["contexts"]] == [PARENT_ID, DISCARDED_ID, CHILD_ID]
    assert (nodes[PARENT_ID]["kind"], nodes[PARENT_ID]["children"]) == ("root", [DISCARDED_ID, CHILD_ID])
    assert (nodes[DISCARDED_ID]["kind"], nodes[DISCARDED_ID]["file"], nodes[DISCARDED_ID]["active"]) == (
        "discarded",
        None,
        False,
    )
    assert (nodes[CHILD_ID]["kind"], nodes[CHILD_ID]["active"], nodes[CHILD_ID]["messages"]) == (
        "fork",
        True,
        6,
    )


@pytest.mark.parametrize("ref", REFS)
def test_tree_prints_the_discarded_child_and_marks_the_active_fork(
    soapwb: Callable[..., Result], store_copy: Path, ref: str
) -> None:
    result = soapwb("tree", ref, "--store", store_copy)
    assert (result.code, result.err) == (0, "")
    assert result.out.splitlines() == [
        f"{ROLE}/{SESSION_UUID}",
        f"{PARENT_ID}  root, 7 messages",
        f"├── {DISCARDED_ID}  discarded (no file)",
        f"└── {CHILD_ID}  main, 6 messages  [active]",  # named as the pages name it
    ]


# -- where the store comes from ----------------------------------------------------------


def test_store_defaults_to_the_soapwb_store_environment_variable(
    soapwb: Callable[..., Result], store_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOAPWB_STORE", str(store_copy))
    assert [row["uuid"] for row in ok_json(soapwb("ls", "--json"))] == [SESSION_UUID]
    assert ok_json(soapwb("show", "3f0c", "--json"))["context"] == CHILD_ID
    assert len(ok_json(soapwb("tree", "3f0c", "--json"))["contexts"]) == 3


def test_store_option_wins_over_the_environment_variable(
    soapwb: Callable[..., Result], store_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOAPWB_STORE", str(tmp_path / "elsewhere"))
    assert [row["uuid"] for row in ok_json(soapwb("ls", "--store", store_copy, "--json"))] == [SESSION_UUID]


def test_commands_only_read_the_store(soapwb: Callable[..., Result], store_copy: Path) -> None:
    before = snapshot(store_copy)
    for argv in (["ls"], ["show", "3f0c"], ["show", "3f0c", "--context", "b1d6"], ["tree", "3f0c"]):
        assert soapwb(*argv, "--store", store_copy).code == 0
        assert soapwb(*argv, "--store", store_copy, "--json").code == 0
    assert snapshot(store_copy) == before


# -- errors: one line on stderr, no traceback ---------------------------------------------


def make_ambiguous(root: Path) -> None:
    add_session(root, "20250611-3f0c9999-1111-4222-8333-444444444444")


def truncate(name: str) -> Callable[[Path], None]:
    def damage(root: Path) -> None:
        path = session_dir(root) / name
        path.write_bytes(path.read_bytes()[:60])

    return damage


def unchanged(root: Path) -> None:
    pass


# (setup of the store copy, argv with {store} and {dir} placeholders, exit status, what the line names)
ERRORS = [
    pytest.param(
        unchanged, ["show", "nope", "--store", "{store}"], 1, ["no session matches 'nope'"], id="unknown"
    ),
    pytest.param(
        unchanged, ["tree", "nope", "--store", "{store}"], 1, ["no session matches 'nope'"], id="tree-unk"
    ),
    pytest.param(
        make_ambiguous,
        ["show", "3f0c", "--store", "{store}"],
        1,
        ["'3f0c' matches 2 sessions", SESSION_UUID, "20250611-3f0c9999-1111-4222-8333-444444444444"],
        id="ambiguous-prefix",
    ),
    pytest.param(unchanged, ["ls"], 2, ["no store given", "SOAPWB_STORE"], id="no-store"),
    pytest.param(unchanged, ["show", "3f0c"], 2, ["no store given"], id="show-no-store"),
    pytest.param(
        unchanged,
        ["ls", "--store", "{store}/missing"],
        1,
        ["{store}/missing", "no such store"],
        id="no-such-dir",
    ),
    pytest.param(
        unchanged,
        ["show", "3f0c", "--store", "{store}/missing"],
        1,
        ["{store}/missing"],
        id="show-no-such-dir",
    ),
    pytest.param(
        truncate(SESSION_FILE),
        ["show", "3f0c", "--store", "{store}"],
        1,
        [f"{{dir}}/{SESSION_FILE}", "not valid JSON"],
        id="broken-session.json",
    ),
    pytest.param(
        truncate(SESSION_FILE),
        ["tree", "3f0c", "--store", "{store}"],
        1,
        [f"{{dir}}/{SESSION_FILE}"],
        id="tree-broken",
    ),
    pytest.param(
        truncate(f"{CHILD_ID}.json"),
        ["show", "3f0c", "--store", "{store}"],
        1,
        [f"{{dir}}/{CHILD_ID}.json", "at $:"],
        id="broken-active-context",
    ),
    pytest.param(
        unchanged,
        ["show", "3f0c", "--context", "ffff", "--store", "{store}"],
        1,
        ["'ffff'", "no such context"],
        id="unknown-context",
    ),
]


@pytest.mark.parametrize("how", ["main", "script"])
@pytest.mark.parametrize(("setup", "argv", "code", "names"), ERRORS)
def test_error_is_one_line_on_stderr_and_no_traceback(
    soapwb: Callable[..., Result],
    store_copy: Path,
    how: str,
    setup: Callable[[Path], None],
    argv: list[str],
    code: int,
    names: list[str],
) -> None:
    setup(store_copy)
    fill = {"store": str(store_copy), "dir": str(session_dir(store_copy))}
    result = (soapwb if how == "main" else run_script)(*(a.format(**fill) for a in argv))

    assert result.code == code
    assert result.out == ""
    assert "Traceback" not in result.out + result.err
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("soapwb: error: ")
    for name in names:
        assert name.format(**fill) in lines[0]


def test_search_finds_each_message_once_and_json_is_the_librarys_hits(
    soapwb: Callable[..., Result], store_copy: Path
) -> None:
    from soap_core import search_store

    hits = search_store(Store(store_copy), "remember")
    assert hits, "the sample store asks the agent to remember a number"
    assert ok_json(soapwb("search", "REMEMBER", "--store", store_copy, "--json")) == plain(
        [h.as_dict() for h in hits]
    )
    text = soapwb("search", "remember", "--store", store_copy)
    assert text.code == 0 and text.out.startswith("ROLE ")
    assert len(text.out.splitlines()) == len(hits) + 1
    for hit in hits:
        assert f"{hit.index}" in text.out and hit.context_id in text.out
    one = soapwb("search", "remember", "--limit", "1", "--store", store_copy)
    assert len(one.out.splitlines()) == 3 and "--limit shows more" in one.out
    assert soapwb("search", "zebra-none", "--store", store_copy).out == "no message contains 'zebra-none'\n"
    refused = soapwb("search", "x", "--limit", "0", "--store", store_copy)
    assert refused.code == 2 and "--limit" in refused.err


# -- help and the installed script --------------------------------------------------------


@pytest.mark.parametrize("command", ["ls", "show", "tree", "search"])
def test_help_of_each_command_describes_its_options(soapwb: Callable[..., Result], command: str) -> None:
    result = soapwb(command, "--help")
    assert (result.code, result.err) == (0, "")
    assert result.out.startswith(f"usage: soapwb {command}")
    assert "--store DIR" in result.out and "--json" in result.out and "$SOAPWB_STORE" in result.out
    if command in ("show", "tree"):
        assert "SESSION" in result.out
    if command == "show":
        assert "--context ID" in result.out and "--chronological" in result.out


def test_help_lists_the_commands(soapwb: Callable[..., Result]) -> None:
    result = soapwb("--help")
    assert (result.code, result.err) == (0, "")
    for command in ("ls", "show", "tree"):
        assert f"    {command} " in result.out


@pytest.mark.parametrize(
    "argv", [["ls"], ["show", "3f0c"], ["tree", "3f0c"], ["show", "3f0c", "--context", "b1d6"]]
)
def test_installed_script_prints_what_main_prints(
    soapwb: Callable[..., Result], store_copy: Path, argv: list[str]
) -> None:
    for extra in ([], ["--json"]):
        in_process = soapwb(*argv, *extra, "--store", store_copy)
        script = run_script(*argv, *extra, env={"SOAPWB_STORE": str(store_copy)})
        assert script == in_process
        assert script.code == 0 and script.out and script.err == ""


def test_installed_script_help_works() -> None:
    result = run_script("--help")
    assert (result.code, result.err) == (0, "")
    assert result.out.startswith("usage: soapwb")


def test_the_command_map_names_the_module_that_registers_each_command() -> None:
    import argparse
    import importlib

    from soapwb.cli import COMMAND_MODULES, _modules

    registered: dict[str, str] = {}
    for name in _modules():
        commands = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(f"soapwb.{name}").register(commands)
        registered.update(dict.fromkeys(commands.choices, name))
    assert registered == {c: m for c, m in COMMAND_MODULES.items() if m in _modules()}


def test_soapwb_ls_imports_neither_replay_nor_pandas_nor_openai(store_copy: Path) -> None:
    code = (
        "import sys; from soapwb.cli import main; main(['ls', '--store', sys.argv[1], '--json']); "
        "print(sorted(m for m in ('replay', 'pandas', 'openai', 'deepdiff', 'streamlit') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(store_copy)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
