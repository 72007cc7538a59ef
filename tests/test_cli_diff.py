"""Every pair of ids ``soapwb diff`` accepts gives an answer or a one-line error (issue 23):
two re-run branches are compared step by step (before: "has no output at None"), an
output against a whole context says which is which, two outputs in sentences (before:
raw DeepDiff JSON)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from replay import ToolModes, rerun
from soapwb.cli import main
from tests.scripted import ScriptedEndpoint, calls, says
from tests.test_rerun import FIRST_ANSWER, bought


def two_reruns(tmp_path: Path) -> tuple[str, str, str, str]:
    """A pantry session re-run twice, the second buying a melon: (store, root context, b1, b2)."""
    store, session = bought(tmp_path)
    first = rerun(store, session, None, FIRST_ANSWER, ScriptedEndpoint(calls("add_item", '{"item":"pear"}', "c9"), says("done again")))  # type: ignore[arg-type]  # fmt: skip
    again = ScriptedEndpoint(calls("add_item", '{"item":"melon"}', "c8"), says("bought a melon"))
    melon = ToolModes(unserved="live")  # the record holds no melon: the pantry's own method answers
    second = rerun(store, store.load_session(session.uuid), None, FIRST_ANSWER, again, tools=melon)  # type: ignore[arg-type]
    assert first.ok and second.ok
    return str(store.root), session.active_context_id, first.branch_id, second.branch_id


def test_two_rerun_branches_are_compared_step_by_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, _, one, two = two_reruns(tmp_path)
    assert main(["diff", one, two, "--store", root]) == 0
    out = capsys.readouterr().out
    assert f"branches from message {FIRST_ANSWER}" in out
    assert "melon" in out and "has no output" not in out


def test_an_output_against_a_whole_context_says_which_is_which(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, active, _, _ = two_reruns(tmp_path)
    code = main(["diff", f"{active}@{FIRST_ANSWER}", active, "--store", root])
    err = capsys.readouterr().err
    assert code == 2 and "names an output" in err and "a whole context" in err and "Traceback" not in err


def test_two_outputs_are_told_in_sentences(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, _, one, two = two_reruns(tmp_path)
    assert main(["diff", f"{one}@{FIRST_ANSWER}", f"{two}@{FIRST_ANSWER}", "--store", root]) == 0
    out = capsys.readouterr().out
    assert "root[" not in out and "- " in out and "melon" in out


def on_a_terminal(argv: list[str], env: dict[str, str]) -> str:
    """``soapwb`` run with its stdout on a pseudo-terminal, as a person runs it."""
    leader, follower = pty.openpty()
    proc = subprocess.run(
        [sys.executable, "-m", "soapwb.cli", *argv],
        stdout=follower,
        stderr=subprocess.PIPE,
        env=env,
        timeout=120,
        check=False,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: all read
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.returncode == 0, proc.stderr
    return b"".join(chunks).decode()


def test_word_diffs_are_red_and_green_on_a_terminal_unless_no_color(tmp_path: Path) -> None:
    """Coloured as git colours a word diff, and plain where colour is not wanted: a pipe, or
    $NO_COLOR (https://no-color.org); the marks stay either way."""
    root, _, one, two = two_reruns(tmp_path)
    argv = ["diff", f"{one}@{FIRST_ANSWER}", f"{two}@{FIRST_ANSWER}", "--store", root]
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    coloured = on_a_terminal(argv, env)
    assert "\x1b[31m[-" in coloured and "\x1b[32m{+" in coloured and "-]\x1b[0m" in coloured
    plain = on_a_terminal(argv, {**env, "NO_COLOR": "1"})
    assert "\x1b[" not in plain and "[-" in plain and "{+" in plain
    piped = subprocess.run(
        [sys.executable, "-m", "soapwb.cli", *argv], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert "\x1b[" not in piped and "{+" in piped
