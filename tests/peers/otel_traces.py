"""Traces written by the real instrumentations, for the tests that read and import them.

Each trace is made in a side venv (``tests/peers/venvs.py``) by ``otel_driver.py``: the
real ``openai`` client under the real instrumentor calls the scripted server
(``openai_stub.py``), which records the exact bodies it receives, and the SDK's own OTLP
encoders write the spans and logs as protobuf and as OTLP/JSON. Session-wide fixtures
(registered in ``tests/conftest.py``): ``written`` (OpenInference), ``events`` (openai-v2,
the older GenAI conventions), ``latest`` (openai-v2, the latest experimental ones). A venv
that cannot be built skips with the reason, never passes."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.peers.openai_stub import OpenAIStub
from tests.peers.venvs import PeerUnavailable, ensure_peer

DRIVER = Path(__file__).resolve().parent / "otel_driver.py"
SCRIPT = [
    {"tool_calls": [{"id": "call_1", "name": "count_errors", "arguments": '{"pattern": "ERROR"}'}]},
    {"content": "There are 3 errors."},
]


@dataclass(frozen=True)
class Written:
    """A trace the driver wrote, and what the server received while it ran."""

    directory: Path
    session: str
    span_count: int
    log_count: int
    bodies: list[Any]


def run_driver(flavour: str, venv: str, base_url: str, out: Path, *mode: str) -> dict[str, Any]:
    """Run the driver in the ``venv`` side venv against ``base_url``; its summary."""
    try:
        env = ensure_peer(venv)
    except PeerUnavailable as exc:
        pytest.skip(f"the {venv} side venv cannot be built here: {exc}")
    done = subprocess.run(
        [str(env.python), str(DRIVER), flavour, base_url, str(out), *mode],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"the driver failed:\n{done.stdout}\n{done.stderr}"
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary


def write_trace(flavour: str, venv: str, out: Path) -> Iterator[Written]:
    with OpenAIStub(SCRIPT) as stub:
        summary = run_driver(flavour, venv, stub.base_url, out)
        yield Written(out, summary["session"], summary["spans"], summary["logs"], stub.bodies)


@pytest.fixture(scope="session")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Written]:
    yield from write_trace("openinference", "openinference", tmp_path_factory.mktemp("openinference"))


@pytest.fixture(scope="session")
def latest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Written]:
    yield from write_trace("genai-latest", "openai-v2-latest", tmp_path_factory.mktemp("genai-latest"))


@pytest.fixture(scope="session")
def events(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Written]:
    yield from write_trace("genai-events", "openai-v2", tmp_path_factory.mktemp("genai-events"))
