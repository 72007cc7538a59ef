"""``soapwb ui`` serves the real app on loopback and stops cleanly."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path

from local_model import free_port
from soapwb.ui_commands import SERVER_OPTIONS, streamlit_command
from tests.conftest import SOAP_FIXTURE

SOAPWB = [sys.executable, "-m", "soapwb.cli"]
ROOT = Path(__file__).parents[1]


def test_ui_serves_the_workbench_on_loopback_and_stops_on_sigterm() -> None:
    port = free_port()
    process = subprocess.Popen(
        [*SOAPWB, "ui", "--store", str(SOAP_FIXTURE), "--port", str(port), "--no-model", "--json"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[1],
    )
    try:
        assert process.stdout is not None
        announced = json.loads(process.stdout.readline())
        assert announced["url"] == f"http://127.0.0.1:{port}/"
        assert announced["store"] == str(SOAP_FIXTURE.resolve())
        assert json.loads(process.stdout.readline()) == {"ready": announced["url"]}, "said once it serves"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5) as answer:
            assert answer.read() == b"ok"
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
    assert code in (0, -signal.SIGTERM)


def test_every_server_runs_with_the_options_of_the_checkout_config() -> None:
    """``streamlit run app.py`` reads .streamlit/config.toml; ``soapwb ui`` and the browser
    tests pass SERVER_OPTIONS as flags (from any folder). The two must say the same."""
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    flat = {
        f"{section}.{name}": value for section, options in config.items() for name, value in options.items()
    }
    for name, value in SERVER_OPTIONS.items():
        assert str(flat.get(name)).lower() == value, (
            f"{name}: config.toml says {flat.get(name)!r}, flags {value!r}"
        )
    command = streamlit_command("127.0.0.1", 8600)
    for name, value in SERVER_OPTIONS.items():
        assert command[command.index(f"--{name}") + 1] == value
    assert command[command.index("--server.address") + 1] == flat["server.address"] == "127.0.0.1"
