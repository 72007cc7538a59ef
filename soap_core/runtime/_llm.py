"""The LLM endpoint: any OpenAI-compatible Chat Completions server, through ``openai``.

The endpoint sends a request dict exactly as given (the dict is what gets recorded and
hashed), retries what is worth retrying (refused connections, timeouts, 429 and 5xx:
the openai client's own backoff), and turns every failure into an :class:`LLMError`
that names the endpoint and the request. The API key is held in memory only, and it is
redacted from every error text (a server may echo the ``Authorization`` header in its
error body) and from the recorded response (:mod:`soap_core._redact`).

A call is bounded whatever the server does:

* **time**: one attempt (connecting, sending the request, the headers and the whole body)
  ends within ``timeout`` seconds, however slowly the server drips its bytes; there are at
  most ``max_retries + 1`` attempts, with the openai client's backoff between them (0.5 s,
  doubling, at most 8 s) or the server's ``Retry-After`` when that is no longer than
  ``timeout`` (a server asking for a longer wait is not retried). A call therefore ends
  within ``(max_retries + 1) * timeout`` plus those waits.
* **size**: a response body (an error's, a redirect's or the answer's) is read no further
  than ``max_response_bytes``; a ``Content-Length`` over it is refused before any of the
  body is read. The request asks for no compression but gzip and deflate; a compressed
  body is inflated a bounded piece at a time and the limit applies to what it inflates to.

Calls run on an event loop (``asyncio``'s cancellation is what ends a read that is in
progress at the deadline: a sync socket's timeout is per read, so a server sending a
byte a second never trips it): one loop for the process, in a thread of its own. An
oversized body is an ``openai.OpenAIError`` raised inside the HTTP client, which the
openai client passes on without retrying: the same request would get the same answer.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import math
import os
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
import weakref
import zlib
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import httpx2
import openai
from openai.types.chat import ChatCompletion

from soap_core._chat import request_hash
from soap_core._errors import SoapError
from soap_core._redact import redact, redact_value, remember_secret

DEFAULT_API_KEY = "sk-no-key-required"
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MAX_RESPONSE_BYTES = 32 * 1024 * 1024
"""32 MiB: a chat completion of 32,000 tokens with logprobs is a few MB."""

_ACCEPTED_ENCODINGS = ("gzip", "x-gzip", "deflate")
_T = TypeVar("_T")


class LLMError(SoapError):
    """A call to the model failed; ``kind`` says how (connection, timeout, status, ...)."""

    def __init__(self, base_url: str, request_id: str, kind: str, detail: str) -> None:
        self.base_url = base_url
        self.request_id = request_id
        self.kind = kind
        self.detail = detail
        super().__init__(f"LLM call to {base_url} (request {request_id[:12]}) failed: {kind}: {detail}")

    def __reduce__(self) -> tuple[type[LLMError], tuple[str, str, str, str]]:
        return (type(self), (self.base_url, self.request_id, self.kind, self.detail))


@dataclass(frozen=True)
class Completion:
    """A raw response and what it cost."""

    response: dict[str, Any]
    latency_s: float


class LLMEndpoint:
    """An OpenAI-compatible endpoint. ``model`` is the default model name for requests.

    ``timeout`` bounds one attempt, all of it; ``max_response_bytes`` bounds any body read
    (see the module's docstring for how the two make a bound on a whole call)."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        model: str = "local",
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = 2,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        resolved = base_url or os.environ.get("OPENAI_BASE_URL")
        if not resolved:
            raise SoapError("no LLM endpoint: pass a base URL or set OPENAI_BASE_URL")
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
            raise SoapError(f"the timeout must be a positive number of seconds, not {timeout!r}")
        if not (isinstance(max_response_bytes, int) and max_response_bytes > 0):
            raise SoapError(
                f"the response limit must be a positive number of bytes, not {max_response_bytes!r}"
            )
        if not (isinstance(max_retries, int) and max_retries >= 0):
            raise SoapError(f"the retries must be a whole number from 0, not {max_retries!r}")
        self.base_url = resolved.rstrip("/")
        self.model = model
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.max_response_bytes = max_response_bytes
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or DEFAULT_API_KEY
        remember_secret(self._api_key)
        self._openai: openai.AsyncOpenAI | None = None
        self._openai_pid = 0

    def __repr__(self) -> str:  # never shows the key
        return f"LLMEndpoint({self.base_url!r}, model={self.model!r})"

    def check_reachable(self) -> None:
        """Raise a ``connection`` :class:`LLMError` when nothing accepts a connection at the
        endpoint's host and port (tried as often as a call would be, with its waits).

        A re-run writes its branch before its first call; asking first keeps a run that
        could never reach the model from leaving a fork behind. Behind a proxy the
        direct connection proves nothing, so nothing is checked."""
        url = urllib.parse.urlsplit(self.base_url)
        host = url.hostname or ""
        if not host or (urllib.request.getproxies() and not urllib.request.proxy_bypass(host)):
            return
        port = url.port or (443 if url.scheme == "https" else 80)
        wait = 0.5
        for attempt in range(self.max_retries + 1):
            try:
                socket.create_connection((host, port), timeout=self.timeout).close()
                return
            except OSError as exc:
                if attempt == self.max_retries:
                    raise LLMError(self.base_url, "not sent", "connection", connection_problem(exc)) from None
            time.sleep(wait)
            wait = min(wait * 2, 8.0)

    def complete(self, request: dict[str, Any]) -> Completion:
        """Send ``request`` (a Chat Completions body) and return the raw response.

        The body goes out as it is, key order included, rather than through
        ``chat.completions.create``, which drops ``stream: false``, reorders the keys and
        refuses keys it does not know (a framework's own generation settings): what is
        recorded is then byte for byte what the server received."""
        started = time.perf_counter()
        try:
            response = _CallLoop.run(self._post(request))
        except _Refused as exc:
            raise self._error(request, exc.kind, exc.detail) from None
        except openai.APITimeoutError:
            attempts = self.max_retries + 1
            detail = (
                f"timed out: no complete answer within the deadline of {self.timeout:g} s per attempt "
                f"(connecting, sending, headers and body), {attempts} attempt{'s' * (attempts > 1)}"
            )
            raise self._error(request, "timeout", detail) from None
        except openai.APIConnectionError as exc:
            raise self._error(request, "connection", connection_problem(exc)) from None
        except openai.APIStatusError as exc:
            kind = "rate limit" if isinstance(exc, openai.RateLimitError) else "HTTP error"
            detail = f"HTTP {exc.status_code}: {exc.message}{self._unheeded_wait(exc.response)}"
            raise self._error(request, kind, detail) from None
        except (openai.APIError, ValueError, TypeError) as exc:
            raise self._error(request, "malformed response", str(exc)) from None
        latency = time.perf_counter() - started
        problem = response_problem(response)
        if problem is not None:
            raise self._error(request, "malformed response", problem)
        body = redact_value(response.model_dump(mode="json", exclude_none=False), self._api_key)
        return Completion(body, latency)

    async def _post(self, request: dict[str, Any]) -> Any:
        return await self._client().post("/chat/completions", body=request, cast_to=ChatCompletion)

    def _client(self) -> openai.AsyncOpenAI:
        """This endpoint's client, used on the calls' loop only: made by the first call of
        this process (a forked child makes its own), its connections kept for the next
        call, and closed once the endpoint is collected."""
        if self._openai is None or self._openai_pid != os.getpid():
            http = _BoundedClient(self.timeout, self.max_response_bytes, verify=_ssl_context())
            self._openai = openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=self._api_key,
                timeout=self.timeout,
                max_retries=self.max_retries,
                http_client=http,
            )
            self._openai_pid = os.getpid()
            weakref.finalize(self, _CallLoop.close_later, http).atexit = False
        return self._openai

    def _unheeded_wait(self, response: httpx2.Response) -> str:
        wait = retry_after(response.headers)
        if self.max_retries and wait is not None and wait > self.timeout:
            return (
                f" (the server asked to wait {wait:g} s before a retry, longer than the "
                f"{self.timeout:g} s timeout of an attempt: not retried)"
            )
        return ""

    def _error(self, request: dict[str, Any], kind: str, detail: str) -> LLMError:
        return LLMError(self.base_url, request_hash(request), kind, redact(detail, self._api_key))


class _Refused(openai.OpenAIError):
    """A response refused while it was read: the kind and detail of the :class:`LLMError`.

    An ``OpenAIError``, because the openai client passes those on as they are, without a
    retry and without wrapping them into a connection error."""

    def __init__(self, kind: str, detail: str) -> None:
        self.kind = kind
        self.detail = detail
        super().__init__(f"{kind}: {detail}")


def _too_large(limit: int, declared: int | None = None) -> _Refused:
    size = f"{limit:,} bytes ({limit / 2**20:g} MiB)"
    if declared is not None:
        return _Refused(
            "response too large",
            f"the server announced a body of {declared:,} bytes, over the limit of {size}; none of it was read",
        )
    return _Refused("response too large", f"the body passed the limit of {size}; reading stopped there")


class _BoundedClient(httpx2.AsyncClient):
    """The HTTP client of one call: each ``send`` (one attempt) ends by a deadline, and
    every body it reads (the answer's, an error's, a redirect's) stops at a limit."""

    def __init__(self, attempt_s: float, max_bytes: int, *, verify: ssl.SSLContext | bool) -> None:
        super().__init__(
            timeout=attempt_s,
            verify=verify,
            follow_redirects=True,
            headers={"Accept-Encoding": ", ".join(("gzip", "deflate"))},
            event_hooks={"response": [self._bound_body]},
        )
        self._attempt_s = attempt_s
        self._max_bytes = max_bytes

    async def send(self, request: httpx2.Request, *, stream: bool = False, **kwargs: Any) -> httpx2.Response:
        """One attempt. A timeout is what the openai client retries; the body, read here
        unless ``stream`` (never asked for by this module), is inside the deadline."""
        try:
            async with asyncio.timeout(self._attempt_s):
                return await super().send(request, stream=stream, **kwargs)
        except TimeoutError:
            raise httpx2.ReadTimeout(
                f"no complete answer within {self._attempt_s:g} s", request=request
            ) from None

    async def _bound_body(self, response: httpx2.Response) -> None:
        headers = response.headers
        encodings = [e.strip().lower() for e in headers.get_list("content-encoding", split_commas=True)]
        encodings = [e for e in encodings if e and e != "identity"]
        if encodings and (len(encodings) > 1 or encodings[0] not in _ACCEPTED_ENCODINGS):
            raise _Refused(
                "malformed response",
                f"the body is encoded as {', '.join(encodings)}, which the request did not accept",
            )
        declared = headers.get("content-length", "").strip()
        if not encodings and declared.isdigit() and int(declared) > self._max_bytes:
            raise _too_large(self._max_bytes, int(declared))
        if retry_after(headers) is not None and (retry_after(headers) or 0) > self._attempt_s:
            headers["x-should-retry"] = "false"  # the openai client obeys it: no long wait
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = _BoundedBody(response.stream, self._max_bytes, inflate=bool(encodings))
        if encodings:
            del headers["content-encoding"]  # inflated here, a bounded piece at a time


class _BoundedBody(httpx2.AsyncByteStream):
    """A body read no further than ``limit`` bytes: as received, and as inflated for a
    compressed one (inflated here a piece of at most what is left of the limit at a time,
    since a few MB of gzip can inflate to GBs). What follows a compressed body's end is
    counted and dropped."""

    def __init__(self, raw: httpx2.AsyncByteStream, limit: int, *, inflate: bool) -> None:
        self._raw = raw
        self._limit = limit
        # gzip or zlib (HTTP's "deflate"), told apart by their headers
        self._inflate = zlib.decompressobj(zlib.MAX_WBITS | 32) if inflate else None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        received = inflated = 0
        async for chunk in self._raw:
            received += len(chunk)
            if received > self._limit:
                raise _too_large(self._limit)
            if self._inflate is None:
                yield chunk
                continue
            data = chunk
            while data and not self._inflate.eof:
                try:
                    piece = self._inflate.decompress(data, self._limit - inflated + 1)
                except zlib.error as exc:
                    raise _Refused(
                        "malformed response", f"the compressed body does not inflate: {exc}"
                    ) from None
                data = self._inflate.unconsumed_tail
                inflated += len(piece)
                if inflated > self._limit:
                    raise _too_large(self._limit)
                if piece:
                    yield piece

    async def aclose(self) -> None:
        await self._raw.aclose()


def connection_problem(exc: BaseException) -> str:
    """What failed to connect, from the causes: ``[Errno 111] Connection refused`` where
    the async transport says ``All connection attempts failed`` (one per address tried)."""
    shown = exc.__cause__ or exc
    link: BaseException | None = shown
    for _ in range(16):  # a chain of causes and contexts; never a cycle followed forever
        if link is None:
            break
        leaves = list(link.exceptions) if isinstance(link, BaseExceptionGroup) else [link]
        codes = {
            e.errno if isinstance(e, OSError) and not isinstance(e, socket.gaierror) else None for e in leaves
        }
        code = codes.pop() if len(codes) == 1 else None
        if isinstance(code, int) and code > 0:
            return f"[Errno {code}] {os.strerror(code)}"
        link = link.__cause__ or link.__context__
    return str(shown)


def retry_after(headers: httpx2.Headers) -> float | None:
    """The wait in seconds a response asks for before a retry (``retry-after-ms``, else
    ``retry-after`` in seconds or as a date), as the openai client reads it; else None."""
    for name, unit in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return float(value) / unit
        except ValueError:
            pass
    when = headers.get("retry-after")
    try:
        date = email.utils.parsedate_to_datetime(when) if when else None
    except (TypeError, ValueError):
        return None
    return date.timestamp() - time.time() if date is not None else None


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """httpx's default context (certifi's roots, $SSL_CERT_FILE), made once: loading the
    roots costs 20 to 200 ms, and every call has an HTTP client of its own."""
    return httpx2.create_ssl_context()


class _CallLoop:
    """The event loop every call of this process runs on, in a daemon thread of its own
    (made on the first call, and again in a forked child, where the parent's thread is
    not). One loop for all calls, so that an endpoint's client and its connections last
    from one call to the next (a loop and a client per call cost 5 to 10 ms a call under
    load); the calls of several threads at once (a replay's samples) run side by side."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None
    _pid = 0
    _closing: ClassVar[set[asyncio.Task[None]]] = set()

    @classmethod
    def run(cls, coroutine: Coroutine[Any, Any, _T]) -> _T:
        with cls._lock:
            if cls._loop is None or cls._pid != os.getpid():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="llm-calls", daemon=True).start()
                cls._loop, cls._pid = loop, os.getpid()
            loop = cls._loop
        future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        try:
            return future.result()
        except BaseException:  # Ctrl-C while waiting: the call stops too
            future.cancel()
            raise

    @classmethod
    def close_later(cls, http: httpx2.AsyncClient) -> None:
        """Close ``http`` (an endpoint's client, the endpoint collected) on the loop it
        was used on, if this process still runs it."""
        loop = cls._loop
        if loop is None or cls._pid != os.getpid() or loop.is_closed():
            return

        def close() -> None:
            task = loop.create_task(http.aclose())
            cls._closing.add(task)
            task.add_done_callback(cls._closing.discard)

        loop.call_soon_threadsafe(close)


def response_problem(response: Any) -> str | None:
    """What makes a 200 answer unusable as a chat completion, or None.

    The openai client does not validate: a body that is not a JSON object comes back as
    a plain list or string, and a choice without a message as ``message=None``.
    """
    if not hasattr(response, "model_dump"):
        return f"the body is not a chat completion object: {str(response)[:120]!r}"
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:
        return "no choices in the response"
    message = getattr(choices[0], "message", None)
    if message is None or not hasattr(message, "model_dump"):
        return f"the first choice has no message: {str(choices[0])[:120]!r}"
    return None
