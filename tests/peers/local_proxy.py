"""A pass-through to a real model (the local one) on a free loopback port that keeps
every chat body as the client sent it: the ground truth a test compares with. ``answer``
may script some answers instead (the small model's own tool calls are unreliable): it is
given each chat body and its number, and returns a response, or None to pass it on.
Standard library only."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[dict[str, Any], int], dict[str, Any] | None]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        owner, scripted = self.server.owner, None
        if self.path.rstrip("/").endswith("/chat/completions"):
            body = json.loads(raw)
            with owner.lock:
                owner.bodies.append(body)
                number = len(owner.bodies)
            scripted = owner.answer(body, number) if owner.answer is not None else None
        if scripted is not None:
            status, data = 200, json.dumps(scripted).encode()
        else:
            request = urllib.request.Request(
                owner.target + self.path.split("/v1", 1)[-1],
                data=raw,
                headers={"content-type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=300) as answer:
                    status, data = answer.status, answer.read()
            except urllib.error.HTTPError as exc:  # passed on as the model answered
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

    def __init__(self, target: str, answer: Answer | None = None) -> None:
        self.target = target.rstrip("/")
        self.answer = answer
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
