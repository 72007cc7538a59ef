"""``soapwb ui`` serves the real app on loopback and stops cleanly."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from soap_core.runtime.local_model import free_port
from tests.conftest import SOAP_FIXTURE

SOAPWB = [sys.executable, "-m", "soapwb.cli"]


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
