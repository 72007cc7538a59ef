"""A real Arize Phoenix on 127.0.0.1, for the tests that send it traces and read them back.

``phoenix serve`` from the ``phoenix`` side venv (``venvs.py``), its SQLite database in a
temporary working directory, its HTTP and gRPC ports free loopback ports (it always starts
the gRPC one), telemetry off. Phoenix takes OTLP/HTTP protobuf at ``/v1/traces`` and gives
spans back at ``/v1/projects/{project}/spans/otlpv1``. A venv that cannot be built is a
skip with the reason; a Phoenix that does not come up is an error.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from local_model import free_port
from tests.peers.venvs import PeerUnavailable, ensure_peer

START_TIMEOUT_S = 120


@dataclass(frozen=True)
class Phoenix:
    url: str
    log: Path

    def send_traces(self, protobuf: bytes) -> int:
        """POST an ``ExportTraceServiceRequest``; the HTTP status."""
        request = urllib.request.Request(
            f"{self.url}/v1/traces", data=protobuf, headers={"Content-Type": "application/x-protobuf"}
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status)

    def spans(
        self, traces: Collection[str], *, wanted: int, project: str = "default", timeout: float = 120
    ) -> dict[str, Any]:
        """The span API's answer, holding only the spans of ``traces``, once it has
        ``wanted`` of them: ingestion is asynchronous, and other tests send their own
        traces to the same Phoenix (counting every span returned too early)."""
        deadline = time.monotonic() + timeout
        while True:
            found: list[dict[str, Any]] = []
            cursor = ""
            while True:  # every page
                url = f"{self.url}/v1/projects/{project}/spans/otlpv1?limit=1000{cursor}"
                with urllib.request.urlopen(url, timeout=30) as answer:
                    document: dict[str, Any] = json.loads(answer.read())
                found += [s for s in document.get("data", []) if s.get("trace_id") in traces]
                if not document.get("next_cursor"):
                    break
                cursor = f"&cursor={urllib.parse.quote(str(document['next_cursor']))}"
            if len(found) >= wanted or time.monotonic() > deadline:
                return {"data": found, "next_cursor": None}
            time.sleep(0.2)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    try:
        env = ensure_peer("phoenix")
    except PeerUnavailable as exc:
        pytest.skip(f"the phoenix side venv cannot be built here: {exc}")
    with phoenix_server(env.root, tmp_path_factory.mktemp("phoenix")) as server:
        yield server


@contextlib.contextmanager
def phoenix_server(venv: Path, work: Path) -> Iterator[Phoenix]:
    """``phoenix serve`` from the venv ``venv``, its database and log in ``work``, until
    the block ends (the benchmark's side by side starts one too)."""
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    environment = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = work / "phoenix.log"
    with open(log, "wb") as output:
        process = subprocess.Popen(
            [str(venv / "bin" / "phoenix"), "serve"],
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(url):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
                raise RuntimeError(f"phoenix did not come up on {url}:\n{tail}")
            time.sleep(0.5)
        yield Phoenix(url, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
