"""A pass-through to the local model that keeps every body as the client sent it (the
Agents SDK's, with ``content: null`` on a tool-only turn, which the local model's server
takes since local_model lets it through): the ground truth a test compares with.
Standard library only."""

from __future__ import annotations

import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        body = json.loads(raw)
        owner = self.server.owner
        with owner.lock:
            owner.bodies.append(body)
        request = urllib.request.Request(
            owner.target + self.path.removeprefix("/v1"),
            data=json.dumps(body).encode(),
            headers={"content-type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=300) as answer:
                status, data = answer.status, answer.read()
        except urllib.error.HTTPError as exc:
            status, data = exc.code, exc.read()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: LocalProxy


class LocalProxy:
    """A started proxy on a free port of 127.0.0.1 to ``target`` (a ``.../v1`` base URL)."""

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.lock = threading.Lock()
        self.bodies: list[dict[str, Any]] = []
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}/v1"

    def __enter__(self) -> LocalProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
