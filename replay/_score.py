"""How likely the model finds a given answer to a request: teacher-forced scoring.

Attribution (:mod:`analysis._attribution`) asks, for many changed requests, how probable
the model still finds the answer it gave. The answer is given, not generated: its
tokens follow the prompt and the model's log-probability of each is read (teacher
forcing). The local llama.cpp server (:mod:`local_model`) does it at ``POST
/soapwb/score``: its chat format renders the request's prompt and the answer's text (for
a request with tools, ``message:\\n`` before the text or ``functions.NAME:\\n`` before a
call's arguments, as the model writes them), the model evaluates both as one sequence,
and the log-softmax of the logits before each answer token is that token's
log-probability: the number llama.cpp reports for a token it generates (a test holds
the two together). llama.cpp's own ``/v1/completions`` with ``echo`` and ``logprobs``
gives the same numbers, but sorts the whole vocabulary in Python at every token (about
ten times slower on a short prompt).

Hosted chat APIs return no log-probabilities of a given text, so they cannot be scored
this way. For them, :class:`RegenerateScorer` is the weaker method: each changed request
is sent and the new answer compared with the given one (1 the same words and calls, 0
nothing in common, :func:`replay.diff_outputs`). It is coarser (a changed word counts
the same however unlikely it was) and noisy at any temperature above 0, so attribution
measures its noise band on unchanged re-runs and reports it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from replay._diff import Output, diff_outputs
from soap_core import SoapError, count_text
from soap_core.runtime import LLMError, assistant_message

SCORING = "teacher-forced log-probability"
REGENERATING = "regenerate-and-compare (the weaker method: no log-probabilities)"


class Score(Protocol):
    """What a scorer says of an answer under a request: ``logit`` is what attribution
    fits (the log-odds, or a regenerated answer's similarity)."""

    @property
    def logit(self) -> float: ...

    @property
    def logprob(self) -> float: ...


class ScoreError(SoapError):
    """The endpoint cannot score an answer (no render route, no echo log-probabilities),
    or it failed to."""


@dataclass(frozen=True)
class Scored:
    """The model's log-probability of each token of an answer."""

    tokens: list[str]
    token_logprobs: list[float]

    @property
    def logprob(self) -> float:
        """log p(answer | request): the sum over its tokens."""
        return math.fsum(self.token_logprobs)

    @property
    def logit(self) -> float:
        """The answer's log-odds, log(p / (1 - p)): ContextCite's target, which stays
        linear where p nears 1 (a one-token answer) and is ``logprob`` where p is small."""
        lp = min(self.logprob, -1e-12)
        return lp - math.log(-math.expm1(lp))


class ServerScorer:
    """Scores answers on a llama.cpp server started by :mod:`local_model` (base URL
    ``http://HOST:PORT/v1``). Thread-safe: one HTTP client, requests in parallel."""

    method = SCORING
    noisy = False

    def __init__(self, base_url: str, *, timeout: float = 300.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.root = self.base_url.removesuffix("/v1")
        self._http = httpx.Client(timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ServerScorer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        url = self.root + path
        try:
            response = self._http.post(url, json=body)
        except httpx.HTTPError as exc:
            raise ScoreError(f"{url}: {type(exc).__name__}: {exc}") from None
        if response.status_code == 404 and path.startswith("/soapwb"):
            raise ScoreError(
                f"{self.base_url} cannot score a given answer: it has no {path} route (only the "
                "local model server, `soapwb` starts it, renders its prompts for scoring); any other "
                "endpoint can attribute by regenerate-and-compare, the weaker method"
            )
        if response.status_code != 200:
            raise ScoreError(f"{url} answered {response.status_code}: {response.text[:300]}")
        return response.json()

    def check(self) -> None:
        """Raise ScoreError unless this endpoint can score answers."""
        self._post("/soapwb/render", {"request": {"messages": [{"role": "user", "content": "hi"}]}})

    def score(self, request: dict[str, Any], answer: dict[str, Any]) -> Scored:
        """The log-probability of ``answer`` (an OpenAI assistant message) after ``request``."""
        scored = self._post("/soapwb/score", {"request": request, "answer": answer})
        tokens, values = scored.get("tokens"), scored.get("token_logprobs")
        if not tokens or not isinstance(values, list) or len(values) != len(tokens):
            raise ScoreError(f"{self.base_url} returned no log-probabilities for the answer")
        return Scored(list(tokens), [float(v) for v in values])


class _Completing(Protocol):
    base_url: str

    def complete(self, request: dict[str, Any]) -> Any: ...


@dataclass(frozen=True)
class Compared:
    """How close a regenerated answer came to the given one."""

    similarity: float
    """1: the same words and tool calls; 0: nothing in common."""
    text: str

    @property
    def logit(self) -> float:
        return self.similarity

    @property
    def logprob(self) -> float:
        return self.similarity


def _output_of(answer: dict[str, Any]) -> Output:
    """An OpenAI assistant message as :class:`Output` (text and tool calls)."""
    calls = []
    for call in answer.get("tool_calls") or []:
        function = call.get("function", {})
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            arguments = function.get("arguments")
        calls.append((str(function.get("name", "")), arguments))
    return Output(str(answer.get("content") or ""), tuple(calls))


class RegenerateScorer:
    """Scores an answer by asking the endpoint again and comparing (the module docstring):
    any OpenAI-compatible endpoint, hosted ones included. ``noisy``: unchanged re-runs
    differ, so a result comes with their band."""

    method = REGENERATING
    noisy = True

    def __init__(self, endpoint: _Completing, *, temperature: float | None = None) -> None:
        self.endpoint = endpoint
        self.base_url = endpoint.base_url
        self.temperature = temperature
        """Sent with every request when given (else the request's own)."""

    def __enter__(self) -> RegenerateScorer:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def check(self) -> None:
        """Nothing to check before the first request: any chat endpoint can regenerate."""

    def score(self, request: dict[str, Any], answer: dict[str, Any]) -> Compared:
        """The similarity to ``answer`` of a new answer to ``request``, which may run to
        twice the answer's length (at least 32 tokens; at most the request's own limit):
        an answer already twice as long is already far from it, and a model that lost
        what it was answering from can ramble to the request's whole limit."""
        given = _output_of(answer)
        cap = max(32, 2 * count_text(given.text + json.dumps(given.tool_calls)))
        limit = request.get("max_tokens")
        request = {**request, "max_tokens": min(cap, limit) if isinstance(limit, int) else cap}
        if self.temperature is not None:
            request["temperature"] = self.temperature
        try:
            completion = self.endpoint.complete(request)
        except LLMError as exc:  # it names the endpoint and the request
            raise ScoreError(str(exc)) from None
        new = Output.of(assistant_message(completion.response))
        return Compared(1.0 - diff_outputs(given, new).distance, new.text)
