"""A real HTTP server that plays a broken OpenAI-compatible endpoint, for failure tests.

A fake client would only show what we think the ``openai`` client does; a real socket
shows what it does: which failures it retries, after how long, and which exception it
raises. The server answers ``POST /v1/chat/completions`` according to a mode and counts
the requests it received, so a test can prove that a retryable failure was sent
``retries + 1`` times and a non-retryable one once.

Modes (a plain name, or a function from the 1-based request number to a name, to make
some requests fail and others not):

* ``ok``: a minimal valid chat completion whose answer is ``hello``.
* ``http500``: status 500 with an OpenAI-style JSON error body.
* ``rate_limit``: status 429 with ``retry-after: 0``.
* ``timeout``: waits ``stall_s`` seconds (longer than the client's timeout) before
  answering; the wait ends early when the server stops, so no test waits for it.
* ``malformed_json``: status 200, ``application/json``, a body that is not JSON.
* ``no_choices``: a valid chat completion with ``choices: []``.
* ``wrong_shape``: valid JSON whose only choice has no ``message`` (``{"nope": 1}``).
* ``null_message``: a choice whose ``message`` is ``null``.
* ``text_message``: a choice whose ``message`` is the string ``"hello"``.
* ``json_not_object``: status 200, ``application/json``, the valid JSON ``[1, 2]``.
* ``html_page``: status 200 with an HTML page (a proxy's answer), ``text/html``.

Retries stay fast: every error answer also carries ``retry-after-ms: 1``, because the
``openai`` client ignores a zero ``retry-after`` and falls back to its 0.5 s backoff.
Only timeouts and refused connections (no answer, so no header) pay that backoff.
:func:`refused_base_url` gives an address where nothing listens, for refused connections,
and :class:`RefusedPort` also counts the attempts to connect there.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

MODES = (
    "ok",
    "http500",
    "rate_limit",
    "timeout",
    "malformed_json",
    "no_choices",
    "wrong_shape",
    "null_message",
    "text_message",
    "json_not_object",
    "html_page",
)

OK_COMPLETION: dict[str, Any] = {
    "id": "cmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hello"}}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}

Mode = str | Callable[[int], str]


def _completion_with(choices: list[Any]) -> dict[str, Any]:
    return {**OK_COMPLETION, "choices": choices}


_SHAPES: dict[str, dict[str, Any]] = {
    "ok": OK_COMPLETION,
    "no_choices": {"id": "x", "object": "chat.completion", "choices": []},
    "wrong_shape": _completion_with([{"nope": 1}]),
    "null_message": _completion_with([{"index": 0, "finish_reason": "stop", "message": None}]),
    "text_message": _completion_with([{"index": 0, "finish_reason": "stop", "message": "hello"}]),
}

_ERRORS: dict[str, tuple[int, str, str]] = {
    "http500": (500, "server_error", "the model server fell over"),
    "rate_limit": (429, "rate_limit_exceeded", "slow down"),
}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out at once, not 40 ms apart

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest's output clean
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, b'{"error": {"message": "no such route"}}')
            return
        mode = self.server.owner.record_request()
        if mode == "timeout":
            self.server.owner.stopping.wait(self.server.owner.stall_s)
            self.close_connection = True
            mode = "ok"  # too late: the client has given up
        if mode in _ERRORS:
            status, code, message = _ERRORS[mode]
            body = {"error": {"message": message, "type": code, "code": code}}
            self._send(status, json.dumps(body).encode(), {"retry-after": "0", "retry-after-ms": "1"})
        elif mode == "malformed_json":
            self._send(200, b'{"id": "cmpl-1", "choices": [ this is not JSON')
        elif mode == "json_not_object":
            self._send(200, b"[1, 2]")
        elif mode == "html_page":
            self._send(200, b"<html><body>502 Bad Gateway</body></html>", content_type="text/html")
        elif mode in _SHAPES:
            self._send(200, json.dumps(_SHAPES[mode]).encode())
        else:
            raise ValueError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")

    def _send(
        self,
        status: int,
        body: bytes,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client timed out and hung up


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    owner: MisbehavingLLM


class MisbehavingLLM:
    """A started server on a free port of 127.0.0.1 (use it as a context manager)."""

    def __init__(self, mode: Mode = "ok", *, stall_s: float = 2.0) -> None:
        self.mode = mode
        self.stall_s = stall_s
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._requests = 0
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="misbehaving-llm", daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}/v1"

    @property
    def requests(self) -> int:
        """How many chat completion requests arrived so far."""
        with self._lock:
            return self._requests

    def record_request(self) -> str:
        """Count one request and return the mode it gets."""
        with self._lock:
            self._requests += 1
            number = self._requests
        return self.mode(number) if callable(self.mode) else self.mode

    def __enter__(self) -> MisbehavingLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()  # wakes every stalled handler at once
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def refused_base_url(port: int | None = None) -> str:
    """The base URL of a free loopback port where nothing listens: connecting is refused."""
    return f"http://127.0.0.1:{port or _free_port()}/v1"


class RefusedPort:
    """A port where nothing listens, counting the client's attempts to connect to it.

    No server sees a refused request, so the count comes from the client's side: while
    the port is watched, ``socket.create_connection`` (which the ``openai`` client's
    transport calls for every new connection) is wrapped to count the calls aimed at it.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._port = _free_port()
        self.base_url = refused_base_url(self._port)
        self._lock = threading.Lock()
        self._attempts = 0
        connect = socket.create_connection

        def counting(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
            if address[1] == self._port:
                with self._lock:
                    self._attempts += 1
            return connect(address, *args, **kwargs)

        monkeypatch.setattr(socket, "create_connection", counting)

    @property
    def requests(self) -> int:
        """How many times the client tried to connect."""
        with self._lock:
            return self._attempts


@pytest.fixture
def misbehaving_llm() -> Iterator[MisbehavingLLM]:
    """A running :class:`MisbehavingLLM` in mode ``ok``; a test sets ``.mode`` first."""
    with MisbehavingLLM() as server:
        yield server
