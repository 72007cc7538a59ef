"""No text ``soapwb`` prints can drive the terminal it is printed on.

A store is built whose role folder, thread id, message text, context file name,
invocation record and a broken ``session.json``'s path all hold terminal controls:
clear-screen, colours, an OSC 0 window title, an OSC 8 link, BEL, DEL, backspace, NUL,
a carriage return and the one-character C1 CSI ``U+009B``. Every command then runs in a
process of its own, and the raw bytes of its stdout and stderr are searched for a
control character other than tab and newline (C0, DEL, or C1, which is ``C2 80..C2 9F``
in UTF-8): there must be none, and the escaped form (``\\x1b[2J``, ``\\x9b``) must be
there instead, so nothing was hidden either. ``--json`` must stay JSON that reads back
to the very text the files hold. The replay progress bar, the one line that moves the
cursor on purpose, keeps its carriage return.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from soap_core import InvocationRecord, Party, Store, write_invocation
from tests.cli_process import REPO
from tests.conftest import CHILD_ID, PARENT_ID, SESSION_UUID
from tests.misbehaving_llm import OK_COMPLETION

C1_DEL_BS = "\x9b2J \x7f \x08"
"""A C1 CSI, DEL and backspace: what JSON encoders leave raw or escape."""
PAYLOAD = (
    f"colour\x1b[31m \x1b[2J\x1b]0;pwn\x07\x1b]8;;http://e.x/\x1b\\y\x1b]8;;\x1b\\ {C1_DEL_BS} \r \x00 \x07"
)
"""Shorter than the 80 characters a preview or a search snippet shows."""
ROLE = "Evil\x1b[2J\x1b]0;role\x07\x9b31mrole"
THREAD = "thread\x1b]0;t\x07"
BROKEN_FILE = "broken\x1b]0;file\x07.json"
BAD_SESSION = "20250613-badbad00-1111-4222-8333-444444444444"

RAW_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")
"""A control character other than tab and newline, as bytes: C0, DEL, or C1 in UTF-8."""


def escaped(text: str) -> str:
    """``text`` as text output must show it: every control but tab and newline as \\xHH
    (written out here, independently of the code under test)."""
    return "".join(
        f"\\x{ord(c):02x}" if (ord(c) < 0x20 and c not in "\t\n") or 0x7F <= ord(c) <= 0x9F else c
        for c in text
    )


def run(*argv: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """``soapwb`` in a process of its own, its output as raw bytes (a text-mode pipe would
    turn a carriage return into a newline)."""
    environ = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONIOENCODING": "utf-8", **(env or {})}
    environ.pop("SOAPWB_STORE", None)
    return subprocess.run(
        [sys.executable, "-m", "soapwb.cli", *map(str, argv)], capture_output=True, env=environ, timeout=120
    )


def raw_controls(output: bytes) -> list[bytes]:
    return RAW_CONTROL.findall(output)


@pytest.fixture
def hostile_store(store_copy: Path) -> Path:
    """The sample store with its one role folder renamed to :data:`ROLE` and controls in
    every place a file can put them."""
    (store_copy / "agents" / "HelloPete").rename(store_copy / "agents" / ROLE)
    folder = store_copy / "agents" / ROLE / SESSION_UUID
    session = json.loads((folder / "session.json").read_text())
    session["state_data"]["_persistent_thread_id"] = THREAD
    (folder / "session.json").write_text(json.dumps(session, indent=2))
    [child] = folder.glob(f"*{CHILD_ID}.json")
    context = json.loads(child.read_text())
    context["messages"][-1]["content"] = [{"type": "text", "text": PAYLOAD}]
    child.write_text(json.dumps(context, indent=2))
    (folder / BROKEN_FILE).write_text("{not json")
    (store_copy / "agents" / ROLE / BAD_SESSION).mkdir()
    (store_copy / "agents" / ROLE / BAD_SESSION / "session.json").write_text("{broken")
    record = InvocationRecord(
        "20250611T140000000000-abcdef12",
        Party(ROLE, "pete", SESSION_UUID),
        None,
        f"hello {PAYLOAD}",
        "t",
        "2025-06-11T14:00:00",
        ended_at="2025-06-11T14:00:01",
        outcome="error",
        error=f"boom {PAYLOAD}",
    )
    write_invocation([folder], record)
    return store_copy


LAST = len(json.loads((REPO / "tests/fixtures/soap/agents/HelloPete" / SESSION_UUID / f"{CHILD_ID}.json").read_text())["messages"]) - 1  # fmt: skip

COMMANDS = {
    "ls": ["ls"],
    "show": ["show", SESSION_UUID[:13]],
    "show --chronological": ["show", SESSION_UUID[:13], "--chronological"],
    "tree": ["tree", SESSION_UUID[:13]],
    "search": ["search", "colour"],
    "trace": ["trace", SESSION_UUID[:13]],
    "verify": ["verify"],
    "materialize": ["materialize", SESSION_UUID[:13], "--at", str(LAST)],
    "tokens": ["tokens", SESSION_UUID[:13]],
    "diff": ["diff", f"{CHILD_ID}@{LAST}", f"{PARENT_ID}@{LAST}"],
}


@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_no_command_sends_a_control_character_to_the_terminal_and_each_one_shows_escaped(
    hostile_store: Path, command: list[str]
) -> None:
    proc = run(*command, "--store", hostile_store)
    assert proc.returncode in (0, 1), proc
    assert raw_controls(proc.stdout) == [], proc.stdout
    assert raw_controls(proc.stderr) == [], proc.stderr
    shown = (proc.stdout + proc.stderr).decode("utf-8")
    assert "\\x1b[2J" in shown and "\\x9b" in shown, shown  # escaped, not dropped


def test_the_listing_shows_the_role_folder_and_the_thread_id_escaped_and_aligned(hostile_store: Path) -> None:
    proc = run("ls", "--store", hostile_store)
    lines = proc.stdout.decode("utf-8").splitlines()
    assert raw_controls(proc.stdout) == [], proc.stdout
    [row] = [line for line in lines if SESSION_UUID in line]
    assert row.startswith(escaped(ROLE)) and escaped(THREAD) in row, row
    assert row.index(SESSION_UUID) == lines[0].index("SESSION"), lines  # widths of the escaped text
    assert f"broken: {escaped(ROLE)}/{BAD_SESSION}" in proc.stdout.decode("utf-8")


def test_a_message_text_shows_every_control_escaped_in_show_and_search(hostile_store: Path) -> None:
    for argv in (["show", SESSION_UUID[:13]], ["search", "colour"]):
        proc = run(*argv, "--store", hostile_store)
        text = proc.stdout.decode("utf-8")
        assert raw_controls(proc.stdout) == [], proc.stdout
        for control in (
            "\x1b[31m",
            "\x1b[2J",
            "\x1b]0;pwn\x07",
            "\x1b]8;;http://e.x/\x1b\\",
            C1_DEL_BS,
            "\x00",
        ):
            assert escaped(control) in text, (argv, control, text)


def test_error_lines_on_stderr_quote_a_file_name_with_its_controls_escaped(hostile_store: Path) -> None:
    proc = run("show", BAD_SESSION[:17], "--store", hostile_store)
    assert proc.returncode == 1, proc
    assert raw_controls(proc.stderr) == [], proc.stderr
    error = proc.stderr.decode("utf-8")
    assert error.startswith("soapwb: error: ") and f"/{escaped(ROLE)}/{BAD_SESSION}/session.json" in error, (
        error
    )


def test_a_context_file_name_with_controls_shows_escaped_where_show_reports_it_unreadable(
    hostile_store: Path,
) -> None:
    proc = run("show", SESSION_UUID[:13], "--store", hostile_store)
    assert raw_controls(proc.stdout) == [], proc.stdout
    assert f"unreadable: {escaped(BROKEN_FILE)}: " in proc.stdout.decode("utf-8"), proc.stdout


@pytest.mark.parametrize(
    "command", [["ls"], ["show", SESSION_UUID[:13]], ["search", "colour"], ["trace", SESSION_UUID[:13]]]
)
def test_json_output_holds_no_raw_del_or_c1_and_reads_back_to_the_texts_the_files_hold(
    hostile_store: Path, command: list[str]
) -> None:
    proc = run(*command, "--json", "--store", hostile_store)
    assert proc.returncode == 0, proc
    assert raw_controls(proc.stdout) == [], proc.stdout
    data = json.loads(proc.stdout)
    strings: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            strings.append(value)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(key)
                walk(item)

    walk(data)
    assert any(ROLE in s for s in strings) or any("\x9b2J" in s for s in strings), strings
    if command[0] != "ls":  # the message's own text, DEL and C1 included, byte for byte
        assert any(C1_DEL_BS in s for s in strings), strings


class _HostileModel(BaseHTTPRequestHandler):
    """A chat completions endpoint whose answer is :data:`PAYLOAD`."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        answer = {"role": "assistant", "content": PAYLOAD}
        body = json.dumps(
            {**OK_COMPLETION, "choices": [{"index": 0, "finish_reason": "stop", "message": answer}]}
        )
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body.encode())))
        self.end_headers()
        self.wfile.write(body.encode())


@pytest.fixture
def hostile_model() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HostileModel)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_a_replay_prints_a_hostile_answer_escaped_and_its_progress_bar_keeps_its_carriage_return(
    hostile_store: Path, hostile_model: str
) -> None:
    proc = run(
        "replay", SESSION_UUID[:13], "--at", str(LAST), "--samples", "2", "--base-url", hostile_model,
        "--retries", "0", "--store", hostile_store, env={"SOAPWB_PROGRESS": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc
    assert raw_controls(proc.stdout) == [], proc.stdout
    assert "\\x1b[2J" in proc.stdout.decode("utf-8"), proc.stdout
    bar = re.compile(rb"\r\[[#.]{20}\] \d/2 runs")
    assert len(bar.findall(proc.stderr)) == 2 and proc.stderr.endswith(b"] 2/2 runs\n"), proc.stderr
    start = re.compile(rb"\rreplaying message \d+ of [^\n]*: 2 runs\n")
    assert len(start.findall(proc.stderr)) == 1, proc.stderr  # what it calls, before the bar
    assert raw_controls(start.sub(b"", bar.sub(b"", proc.stderr))) == [], proc.stderr  # \r and nothing else
    session = Store(hostile_store).load_session(SESSION_UUID, require_active=False)
    forks = [c for c in session.contexts.values() if c.origin_context_id == CHILD_ID]
    assert len(forks) == 2 and all(PAYLOAD in f.messages[-1].searchable_text() for f in forks), (
        forks
    )  # stored as sent


@pytest.mark.parametrize("code", [*range(0x20), 0x7F, 0x85, 0x9B])
def test_each_control_alone_in_otherwise_ascii_or_other_text_shows_escaped_on_the_terminal_and_in_json(
    code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """The checks that skip the patterns for plain ASCII text (a listing's 4 MB) must
    still see one control among ASCII characters, and past ASCII too."""
    from soap_core._names import escape_controls
    from soapwb.common import emit_json

    for around in ("plain ascii text", "caf\u00e9 text"):
        text = f"{around[:5]}{chr(code)}{around[5:]}"
        assert escape_controls(text) == escaped(text)
        emit_json({"text": text})
        out = capsys.readouterr().out
        assert json.loads(out) == {"text": text}
        assert raw_controls(out.encode("utf-8")) == [], out
