"""The LLM endpoint: any OpenAI-compatible Chat Completions server, through ``openai``.

The endpoint sends a request dict exactly as given (the dict is what gets recorded and
hashed), retries what is worth retrying (refused connections, timeouts, 429 and 5xx:
the openai client's own backoff), and turns every failure into an :class:`LLMError`
that names the endpoint and the request. The API key is held in memory only, and it is
redacted from every error text (a server may echo the ``Authorization`` header in its
error body) and from the recorded response (:mod:`soap_core._redact`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import openai
from openai.types.chat import ChatCompletion

from soap_core._chat import request_hash
from soap_core._errors import SoapError
from soap_core._redact import redact, redact_value, remember_secret

DEFAULT_API_KEY = "sk-no-key-required"


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
    """An OpenAI-compatible endpoint. ``model`` is the default model name for requests."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        model: str = "local",
        timeout: float = 120.0,
        max_retries: int = 2,
    ) -> None:
        resolved = base_url or os.environ.get("OPENAI_BASE_URL")
        if not resolved:
            raise SoapError("no LLM endpoint: pass a base URL or set OPENAI_BASE_URL")
        self.base_url = resolved.rstrip("/")
        self.model = model
        self.timeout = timeout
        key = api_key or os.environ.get("OPENAI_API_KEY") or DEFAULT_API_KEY
        remember_secret(key)
        self._client = openai.OpenAI(
            base_url=self.base_url, api_key=key, timeout=timeout, max_retries=max_retries
        )

    def __repr__(self) -> str:  # never shows the key
        return f"LLMEndpoint({self.base_url!r}, model={self.model!r})"

    def complete(self, request: dict[str, Any]) -> Completion:
        """Send ``request`` (a Chat Completions body) and return the raw response.

        The body goes out as it is, key order included, rather than through
        ``chat.completions.create``, which drops ``stream: false``, reorders the keys and
        refuses keys it does not know (a framework's own generation settings): what is
        recorded is then byte for byte what the server received."""
        started = time.perf_counter()
        try:
            response = self._client.post("/chat/completions", body=request, cast_to=ChatCompletion)
        except openai.APITimeoutError as exc:
            raise self._error(request, "timeout", str(exc)) from None
        except openai.APIConnectionError as exc:
            raise self._error(request, "connection", str(exc.__cause__ or exc)) from None
        except openai.RateLimitError as exc:
            raise self._error(request, "rate limit", f"HTTP {exc.status_code}: {exc.message}") from None
        except openai.APIStatusError as exc:
            raise self._error(request, "HTTP error", f"HTTP {exc.status_code}: {exc.message}") from None
        except (openai.APIError, ValueError, TypeError) as exc:
            raise self._error(request, "malformed response", str(exc)) from None
        latency = time.perf_counter() - started
        problem = response_problem(response)
        if problem is not None:
            raise self._error(request, "malformed response", problem)
        body = redact_value(response.model_dump(mode="json", exclude_none=False), self._client.api_key)
        return Completion(body, latency)

    def _error(self, request: dict[str, Any], kind: str, detail: str) -> LLMError:
        return LLMError(self.base_url, request_hash(request), kind, redact(detail, self._client.api_key))


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
