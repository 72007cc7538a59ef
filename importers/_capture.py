"""Route the model calls an agent framework makes to a handler: the seam that lets a
framework's own code build a request or re-run its loop while the workbench answers.

Both frameworks the workbench imports with their code (the OpenAI Agents SDK and
LangGraph through langchain-openai) reach the model through the ``openai`` client, which
sends over ``httpx2``. Inside :func:`routed`, every Chat Completions POST that an
``openai`` client makes in this context (this thread and the asyncio tasks and executor
threads it starts with a copy of its context) is not sent: its exact JSON body goes to
``handler(body)``, whose answer (a Chat Completions response as JSON) the client receives
as a 200. Everything else (another path, another thread, the workbench's own endpoint
called from inside the handler) goes to the network as before. The patch of ``httpx2``'s
two ``send`` methods is installed once and passes through whenever no route is set.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import httpx2

E = TypeVar("E", bound=BaseException)

Handler = Callable[[dict[str, Any]], dict[str, Any]]
"""A request body in, the response JSON out (or an exception, which the framework sees)."""

CHAT_PATH = "/chat/completions"

_route: ContextVar[Handler | None] = ContextVar("soapwb_model_route", default=None)
_installed = False
_lock = threading.Lock()


class StreamingNotSupported(RuntimeError):
    """The framework asked for a streamed answer, which a routed call does not give."""


def _answer(request: httpx2.Request, handler: Handler) -> httpx2.Response:
    body = json.loads(request.content or b"{}")
    if body.get("stream"):
        raise StreamingNotSupported(
            "the framework asked for a streamed answer: configure its model without streaming to re-run it"
        )
    token = _route.set(None)  # the handler's own client (the workbench's endpoint) goes out
    try:
        value = handler(body)
    finally:
        _route.reset(token)
    return httpx2.Response(200, json=value, request=request)


def _wanted(request: httpx2.Request) -> Handler | None:
    handler = _route.get()
    if handler is None or request.method != "POST" or not request.url.path.endswith(CHAT_PATH):
        return None
    return handler


def _install() -> None:
    global _installed
    with _lock:
        if _installed:
            return
        sync_send, async_send = httpx2.Client.send, httpx2.AsyncClient.send

        def send(self: httpx2.Client, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
            handler = _wanted(request)
            return sync_send(self, request, **kwargs) if handler is None else _answer(request, handler)

        async def asend(self: httpx2.AsyncClient, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
            handler = _wanted(request)
            if handler is None:
                return await async_send(self, request, **kwargs)
            return await asyncio.to_thread(_answer, request, handler)

        httpx2.Client.send = send  # type: ignore[method-assign]
        httpx2.AsyncClient.send = asend  # type: ignore[method-assign]
        _installed = True


@contextmanager
def routed(handler: Handler) -> Iterator[None]:
    """Within the block, the Chat Completions calls of any ``openai`` client in this
    context go to ``handler`` instead of the network."""
    _install()
    token = _route.set(handler)
    try:
        yield
    finally:
        _route.reset(token)


class Captured(Exception):
    """Raised by :func:`capture_one`'s handler to stop the framework after its first
    request was built (the request is the point, no model is asked)."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__("request captured")
        self.body = body


def capture_one(run: Callable[[], object]) -> dict[str, Any] | None:
    """The first Chat Completions body ``run()`` sends, built by the framework's own code;
    the call is stopped there. None when ``run`` finished without calling a model."""

    def stop(body: dict[str, Any]) -> dict[str, Any]:
        raise Captured(body)

    with routed(stop):
        try:
            run()
        except Captured as exc:
            return exc.body
        except Exception as exc:  # the framework may wrap what the transport raised
            captured = in_chain(exc, Captured)
            if captured is None:
                raise
            return captured.body
    return None


def in_chain(exc: BaseException, kind: type[E]) -> E | None:
    """The first exception of ``kind`` in ``exc``'s chain of causes: what a handler raised
    through a framework that wraps it (the ``openai`` client, LangGraph)."""
    cause: BaseException | None = exc
    seen: set[int] = set()
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, kind):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None
