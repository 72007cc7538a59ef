"""``python -m local_model ARGS`` (``__main__.py``): llama.cpp's OpenAI-compatible
server, with a chat format that shows the model its tool results.

llama-cpp-python's ``chatml-function-calling`` template writes ``<|im_start|>tool`` and
nothing else for a ``tool`` message, so the model never reads what a tool returned (a
replay with an injected result could never change what follows), and it fails on an
assistant turn without ``content`` (which peteos sends for tool-only turns). The
``soapwb-function-calling`` format hands that template each tool result as a user turn
(without the call id, which the server makes up afresh on every call: a prompt holding it
would never repeat), and an empty ``content`` where there is none or it is null (the
server's request model refused ``content: null`` on an assistant turn, which the OpenAI API
allows and the Agents SDK and ChatOpenAI send for a tool-only turn: it is let through);
everything else is the template as it is. Only the server's rendering of the prompt changes: the request the
workbench records and sends stays as it is.
"""

from __future__ import annotations

import html
import json
from typing import Any

CHAT_FORMAT = "soapwb-function-calling"


def shown_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as the template is given them: tool results as user turns."""
    shown = []
    for message in messages:
        if message.get("role") == "tool":
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
            shown.append({"role": "user", "content": f"Tool result: {text}"})
        elif message.get("role") == "assistant" and message.get("content") is None:
            shown.append({**message, "content": ""})
        else:
            shown.append(message)
    return shown


def _allow_null_content() -> None:
    """Let an assistant turn's ``content`` be null in the server's request model (built
    by pydantic from this TypedDict when ``llama_cpp.server`` is imported, so before)."""
    from typing import NotRequired, Optional

    from llama_cpp import llama_types

    hints = llama_types.ChatCompletionRequestAssistantMessage.__annotations__
    hints["content"] = NotRequired[Optional[str]]  # noqa: UP045  # a TypedDict annotation, evaluated


def register() -> None:
    from llama_cpp import llama_chat_format

    _allow_null_content()

    @llama_chat_format.register_chat_completion_handler(CHAT_FORMAT)  # type: ignore[untyped-decorator]
    def soapwb_function_calling(*args: Any, **kwargs: Any) -> Any:
        if "messages" in kwargs:
            kwargs["messages"] = shown_messages(list(kwargs["messages"]))
        else:
            args = (args[0], shown_messages(list(args[1])), *args[2:])
        return llama_chat_format.chatml_function_calling(*args, **kwargs)


# -- what the server's chat format makes of a request: for scoring a given answer ---------

RENDER_PATH = "/soapwb/render"
"""The route that answers with the prompt the chat format renders for a Chat Completions
body, and the text it renders an assistant answer as."""
SCORE_PATH = "/soapwb/score"
"""The route that scores a given answer: the model's log-probability of each of its
tokens after the request's prompt (teacher forcing: the answer is given, not generated)."""


class _Rendered(Exception):
    def __init__(self, prompt: str) -> None:
        super().__init__("rendered")
        self.prompt = prompt


class _PromptOnly:
    """A stand-in for the model: the chat format renders its prompt and hands it to
    ``create_completion``, which stops the handler there with the prompt."""

    verbose = False

    def create_completion(self, prompt: str, **_: Any) -> Any:
        raise _Rendered(prompt)


_TOOL_KEYS = ("tools", "tool_choice", "functions", "function_call")


def rendered_prompt(body: dict[str, Any], messages: list[dict[str, Any]] | None = None) -> str:
    """The prompt the chat format renders for ``body`` (with ``messages`` instead of its
    own, when given): what the model reads before it answers."""
    from llama_cpp import llama_chat_format

    handler: Any = llama_chat_format.get_chat_completion_handler(CHAT_FORMAT)
    options = {key: body[key] for key in _TOOL_KEYS if body.get(key) is not None}
    try:
        handler(llama=_PromptOnly(), messages=list(messages or body["messages"]), **options)
    except _Rendered as rendered:
        return rendered.prompt
    raise ValueError("the chat format rendered no prompt")


def rendered_answer(body: dict[str, Any], answer: dict[str, Any]) -> tuple[str, str]:
    """(prompt, continuation): the prompt for ``body``, and the text that follows it when
    the model writes ``answer`` (an assistant message), up to its end-of-turn marker.

    The template renders each turn the same way wherever it stands, so the answer's text
    is read off a prompt in which it is a past turn (followed by an empty user turn)."""
    prompt = rendered_prompt(body)
    after = rendered_prompt(body, [*body["messages"], answer, {"role": "user", "content": ""}])
    base = prompt.rsplit("<|im_start|>assistant\n", 1)[0] + "<|im_start|>assistant\n"
    if not after.startswith(prompt) and not after.startswith(base):
        raise ValueError("the answer does not render after the prompt")
    start = len(prompt) if after.startswith(prompt) else len(base)
    end = after.find("<|im_end|>", start)
    if end < 0:
        raise ValueError("the answer renders without an end of turn")
    return after[:start], after[start:end]


def _rendered(body: dict[str, Any]) -> tuple[str, str]:
    """(prompt, continuation) of a route's body: ``request`` and, optionally, ``answer``."""
    from fastapi import HTTPException

    request, answer = body.get("request"), body.get("answer")
    if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
        raise HTTPException(400, "give request: a Chat Completions body with messages")
    try:
        if isinstance(answer, dict):
            prompt, continuation = rendered_answer(request, answer)
        else:
            prompt, continuation = rendered_prompt(request), ""
    except Exception as exc:  # the template's own errors: a bad request, said as such
        raise HTTPException(400, f"cannot render this request: {type(exc).__name__}: {exc}") from None
    # The template escapes what it renders (its Jinja autoescape); the model wrote the
    # answer plain, so the plain text is what is scored.
    return prompt, html.unescape(continuation)


def scored_tokens(llama: Any, prompt: str, continuation: str) -> dict[str, Any]:
    """The log-probability of each token of ``continuation`` after ``prompt``: both are
    evaluated as one sequence, and the row of logits before each answer token gives its
    log-softmax (what llama.cpp reports for a token it generates). The logits of every
    position are kept (the server's ``logits_all``, on by default), so those of a reused
    prefix are still there."""
    import numpy as np

    before = llama.tokenize(prompt.encode("utf-8"), special=True)
    tokens = llama.tokenize((prompt + continuation).encode("utf-8"), special=True)
    if tokens[: len(before)] != before or len(tokens) == len(before):
        raise ValueError("the answer's first token joins the prompt's last one: cannot split them")
    if len(tokens) > llama.n_ctx():
        raise ValueError(
            f"prompt and answer are {len(tokens)} tokens; the model's context holds {llama.n_ctx()}"
        )
    # The model's state still holds the last sequence it evaluated: a prefix shared with
    # it (the system prompt and tools an ablation kept) is not evaluated again.
    held = llama.input_ids[: min(llama.n_tokens, len(tokens) - 1)]
    differs = np.flatnonzero(held != np.asarray(tokens[: len(held)]))
    llama.n_tokens = int(differs[0]) if len(differs) else len(held)
    llama.eval(tokens[llama.n_tokens :])
    rows = np.asarray(llama.scores[len(before) - 1 : len(tokens) - 1], dtype=np.float64)
    top = rows.max(axis=1, keepdims=True)
    normal = np.log(np.exp(rows - top).sum(axis=1)) + top[:, 0]
    answer = tokens[len(before) :]
    picked = rows[np.arange(len(answer)), answer] - normal
    return {
        "prompt_tokens": len(before),
        "tokens": [llama.detokenize([t]).decode("utf-8", errors="replace") for t in answer],
        "token_logprobs": [float(v) for v in picked],
    }


def add_routes(app: Any) -> Any:
    """``app`` (llama_cpp.server's) with :data:`RENDER_PATH` and :data:`SCORE_PATH` added."""
    from fastapi import Body, Depends, HTTPException
    from llama_cpp.server.app import get_llama_proxy

    @app.post(RENDER_PATH)  # type: ignore[untyped-decorator]
    def render(body: dict[str, Any] = Body(...)) -> dict[str, str]:  # noqa: B008  # FastAPI's way
        prompt, continuation = _rendered(body)
        return {"prompt": prompt, "continuation": continuation}

    @app.post(SCORE_PATH)  # type: ignore[untyped-decorator]
    def score(
        body: dict[str, Any] = Body(...),  # noqa: B008
        proxy: Any = Depends(get_llama_proxy),  # noqa: B008  # holds the model's lock
    ) -> dict[str, Any]:
        prompt, continuation = _rendered(body)
        if not continuation:
            raise HTTPException(400, "give answer: an assistant message with text or tool calls")
        try:
            return {
                "prompt": prompt,
                "continuation": continuation,
                **scored_tokens(proxy(None), prompt, continuation),
            }
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None

    return app
