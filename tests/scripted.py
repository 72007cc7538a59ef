"""A scripted stand-in for an LLM endpoint, for tests of loop logic and for building
stores quickly. Never the proof that a replay feature works: those tests use the real
local model."""

from __future__ import annotations

import json
from typing import Any

from soap_core.runtime import Completion


class ScriptedEndpoint:
    """Answers each request with the next scripted assistant message; keeps the requests."""

    base_url = "http://scripted.invalid/v1"
    model = "scripted"

    def __init__(self, *answers: dict[str, Any] | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[dict[str, Any]] = []

    def complete(self, request: dict[str, Any]) -> Completion:
        self.requests.append(json.loads(json.dumps(request)))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return Completion({"choices": [{"message": answer}], "usage": {"completion_tokens": 1}}, 0.01)


def says(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def calls(name: str, arguments: str, call_id: str = "c1") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        ],
    }
