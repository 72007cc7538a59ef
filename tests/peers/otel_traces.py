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
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


class RecordingProxy:
    """A loopback server that passes each request on to ``upstream`` (a real model's
    ``/v1``) and keeps the chat bodies it passed, as the scripted server does."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.bodies: list[Any] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.path.rstrip("/").endswith("/chat/completions"):
                    proxy.bodies.append(json.loads(raw))
                sub = self.path.split("/v1", 1)[-1]
                request = urllib.request.Request(
                    proxy.upstream + sub, data=raw, headers={"Content-Type": "application/json"}
                )
                with urllib.request.urlopen(request, timeout=120) as answer:
                    status, data = answer.status, answer.read()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture(scope="session")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Written]:
    yield from write_trace("openinference", "openinference", tmp_path_factory.mktemp("openinference"))


@pytest.fixture(scope="session")
def latest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Written]:
    yield from write_trace("genai-latest", "openai-v2-latest", tmp_path_factory.mktemp("genai-latest"))


@pytest.fixture(scope="session")
def events(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Written]:
    yield from write_trace("genai-events", "openai-v2", tmp_path_factory.mktemp("genai-events"))
