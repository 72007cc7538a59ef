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
