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

Hostile modes, for the bounds of a call (``tests/test_hostile_server.py``); none of them
ever holds its body in memory, and each stops when the client hangs up or the server stops:

* ``drip``: status 200 and a ``content-length``, then a valid chat completion one byte
  every ``drip_s`` seconds (default 1 s: 300-odd seconds for the whole body).
* ``drip_headers``: the status line and headers one byte every ``drip_s`` seconds (a
  client's timeout per read never fires, and the headers never end within a test).
* ``silent``: reads the request and never answers, not even a status line.
* ``huge``: status 200 and a ``content-length`` of ``huge_bytes`` (default 2 GiB): a chat
  completion whose content is that many ``0`` characters, generated a MiB at a time.
* ``huge_chunked``: the same body chunked, with no length announced.
* ``gzip_bomb``: a gzip-compressed body (``content-encoding: gzip``, chunked, whether asked
  for or not) that inflates to ``huge_bytes``, compressed as it is sent (about 2 MB on the
  wire for 2 GiB).
* ``long_retry_after``: status 429 with ``retry-after: 60`` (the ``openai`` client honours
  up to 120 s), so a client that obeys it waits a minute before its retry.

``sent`` counts the bytes of body the server got out, so a test can tell how far a client
read before it gave up.

Retries stay fast: every error answer also carries ``retry-after-ms: 1``, because the
``openai`` client ignores a zero ``retry-after`` and falls back to its 0.5 s backoff.
Only timeouts and refused connections (no answer, so no header) pay that backoff.
:func:`refused_base_url` gives an address where nothing listens, for refused connections,
and :class:`RefusedPort` also counts the attempts to connect there.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
import zlib
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
    "drip",
    "drip_headers",
    "silent",
    "huge",
    "huge_chunked",
    "gzip_bomb",
    "long_retry_after",
)
_STREAMED = ("drip", "drip_headers", "silent", "huge", "huge_chunked", "gzip_bomb")
GIB = 1024**3
MIB = 1024**2

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
    "long_retry_after": (429, "rate_limit_exceeded", "come back in a minute"),
}
_RETRY_AFTER = {"long_retry_after": {"retry-after": "60"}}
"""What each error mode says about waiting; the others ask for 1 ms."""


def huge_completion(size: int) -> tuple[bytes, bytes, int]:
    """The head and tail of a chat completion whose content is ``0`` characters, and how
    many of them make the whole body ``size`` bytes long."""
    head = (
        b'{"id": "cmpl-1", "object": "chat.completion", "created": 0, "model": "m", "choices": '
        b'[{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "'
    )
    tail = b'"}}]}'
    return head, tail, max(0, size - len(head) - len(tail))


def zeros(count: int, chunk: int = MIB) -> Iterator[bytes]:
    """``count`` ``0`` characters, a chunk at a time, from one chunk held in memory."""
    block = b"0" * chunk
    while count > 0:
        yield block[: min(chunk, count)]
        count -= chunk


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
        if mode in _STREAMED:
            self._hostile(mode)
            return
        if mode == "timeout":
            self.server.owner.stopping.wait(self.server.owner.stall_s)
            self.close_connection = True
            mode = "ok"  # too late: the client has given up
        if mode in _ERRORS:
            status, code, message = _ERRORS[mode]
            body = {"error": {"message": message, "type": code, "code": code}}
            waits = _RETRY_AFTER.get(mode, {"retry-after": "0", "retry-after-ms": "1"})
            self._send(status, json.dumps(body).encode(), waits)
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

    def _hostile(self, mode: str) -> None:
        """A hostile answer; it ends when the client hangs up or the server stops."""
        owner = self.server.owner
        self.close_connection = True
        try:
            if mode == "silent":
                owner.stopping.wait()
                return
            if mode == "drip_headers":
                body = json.dumps(OK_COMPLETION).encode()
                status = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
                for byte in status.encode() + body:
                    self._write(bytes([byte]))
                    if owner.stopping.wait(owner.drip_s):
                        return
                return
            self.send_response(200)
            self.send_header("content-type", "application/json")
            if mode == "drip":
                body = json.dumps(OK_COMPLETION).encode()
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                for byte in body:
                    self._write(bytes([byte]))
                    if owner.stopping.wait(owner.drip_s):
                        return
                return
            head, tail, count = huge_completion(owner.huge_bytes)
            if mode == "huge":
                self.send_header("content-length", str(owner.huge_bytes))
                self.end_headers()
                for part in itertools.chain([head], zeros(count), [tail]):
                    if owner.stopping.is_set():
                        return
                    self._write(part)
                return
            self.send_header("transfer-encoding", "chunked")
            if mode == "gzip_bomb":
                self.send_header("content-encoding", "gzip")
            self.end_headers()
            pack = zlib.compressobj(1, zlib.DEFLATED, 31) if mode == "gzip_bomb" else None
            for part in itertools.chain([head], zeros(count), [tail, b""]):
                if owner.stopping.is_set():
                    return
                if pack is not None:
                    part = pack.compress(part) if part else pack.flush()
                if part:
                    self._write(b"%x\r\n%s\r\n" % (len(part), part))
            self._write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up: what these modes are for

    def _write(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()
        self.server.owner.count_sent(len(data))

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

    def __init__(
        self, mode: Mode = "ok", *, stall_s: float = 2.0, drip_s: float = 1.0, huge_bytes: int = 2 * GIB
    ) -> None:
        self.mode = mode
        self.stall_s = stall_s
        self.drip_s = drip_s
        self.huge_bytes = huge_bytes
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._requests = 0
        self._sent = 0
        self.first_request_at: float | None = None
        """``time.monotonic()`` when the first request arrived (to time a client from then)."""
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

    @property
    def sent(self) -> int:
        """How many bytes of hostile bodies went out so far (what the clients were sent)."""
        with self._lock:
            return self._sent

    def count_sent(self, count: int) -> None:
        with self._lock:
            self._sent += count

    def record_request(self) -> str:
        """Count one request and return the mode it gets."""
        with self._lock:
            self._requests += 1
            number = self._requests
            if self.first_request_at is None:
                self.first_request_at = time.monotonic()
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
    the port is watched, ``socket.socket.connect`` (which every transport calls for a new
    connection, the sync one through ``socket.create_connection`` and asyncio's through
    ``sock_connect``) is wrapped to count the calls aimed at it.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._port = _free_port()
        self.base_url = refused_base_url(self._port)
        self._lock = threading.Lock()
        self._attempts = 0
        connect = socket.socket.connect

        def counting(sock: socket.socket, address: Any) -> None:
            if isinstance(address, tuple) and len(address) >= 2 and address[1] == self._port:
                with self._lock:
                    self._attempts += 1
            connect(sock, address)

        monkeypatch.setattr(socket.socket, "connect", counting)

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
