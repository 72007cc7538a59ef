"""The app's code (``--agent`` / ``--graph`` / ``--code MODULE:ATTR``) is imported as
uvicorn imports an app: from the installed packages, else from the folder ``soapwb`` is
run in, which a console script's ``sys.path`` does not hold."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from importers._code import import_code

SOAPWB = Path(sys.executable).with_name("soapwb")


def test_the_console_script_imports_the_app_from_the_folder_it_runs_in(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "myagents.py").write_text(
        "from agents import Agent, OpenAIChatCompletionsModel\nfrom openai import AsyncOpenAI\n"
        "client = AsyncOpenAI(base_url='http://127.0.0.1:9/v1', api_key='not-a-key')\n"
        "triage = Agent(name='Triage', model=OpenAIChatCompletionsModel(model='m', openai_client=client))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = "import sys; from importers._code import import_code; print(import_code(sys.argv[1]).name)"
    elsewhere = subprocess.run(
        [sys.executable, "-I", "-c", probe, "myagents:triage"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert "No module named 'myagents'" in elsewhere.stderr  # -I: not from another folder
    here = subprocess.run(
        [sys.executable, "-I", "-c", probe, "myagents:triage"],
        cwd=app,
        env=env,
        capture_output=True,
        text=True,
    )
    assert here.returncode == 0 and here.stdout.strip() == "Triage", here.stderr
    # and the real script, run in the app's folder with no PYTHONPATH, finds it there
    db = tmp_path / "empty.db"
    with sqlite3.connect(db) as connection:
        connection.executescript(
            "CREATE TABLE agent_sessions (session_id TEXT PRIMARY KEY, created_at TEXT, updated_at TEXT);"
            "CREATE TABLE agent_messages (id INTEGER PRIMARY KEY, session_id TEXT, message_data TEXT, created_at TEXT);"
        )
    store = {**env, "SOAPWB_STORE": str(tmp_path / "store")}
    command = [str(SOAPWB), "import", "openai-agents", str(db), "--agent"]
    found = subprocess.run([*command, "myagents:triage"], cwd=app, env=store, capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    missing = subprocess.run(
        [*command, "myagents:billing"], cwd=app, env=store, capture_output=True, text=True
    )
    assert missing.returncode != 0 and "billing" in missing.stderr and "Traceback" not in missing.stderr


def test_a_name_of_another_shape_or_a_missing_attribute_is_refused() -> None:
    with pytest.raises(ValueError, match="MODULE:ATTR"):
        import_code("json.dumps")
    with pytest.raises(AttributeError):
        import_code("json:no_such_thing")
    assert import_code("json:dumps") is __import__("json").dumps
