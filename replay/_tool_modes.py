"""How the tools of a re-run answer: recorded, live or injected.

*Recorded* serves the result the original branch got when the model asks for the same
tool with the same arguments (canonical JSON) in the same order; *live* lets the real
method run; *injected* answers with the user's result. :func:`tool_server` turns the
modes into the runtime's tool server and logs what answered each call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from soap_core import Context, SoapError, ToolUsePart, canonical_json
from soap_core.runtime import RerunStopped

ToolMode = Literal["live", "recorded"]


class RerunError(SoapError):
    """The message cannot be re-run (no recorded invocation, a class that will not load)."""


@dataclass(frozen=True)
class ToolModes:
    """How the tools of a re-run answer."""

    default: ToolMode = "recorded"
    per_tool: Mapping[str, ToolMode] = field(default_factory=dict)
    injected: Mapping[str, Any] = field(default_factory=dict)
    """Tool name -> the result to give instead of running it (text, or JSON)."""
    unserved: Literal["live", "stop"] = "stop"
    """What a recorded-mode call the original never made does: run live, or stop."""

    def mode(self, name: str) -> ToolMode:
        return self.per_tool.get(name, self.default)

    def as_dict(self) -> dict[str, Any]:
        return {
            "default": self.default,
            "per_tool": dict(self.per_tool),
            "injected": dict(self.injected),
            "unserved": self.unserved,
        }


def injected_results(items: Iterable[str]) -> dict[str, Any]:
    """``NAME=RESULT`` items as :attr:`ToolModes.injected`: RESULT is JSON where it parses,
    else the text as it is."""
    injected: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise RerunError(f"an injected result is NAME=RESULT, got {item!r}")
        try:
            injected[name.strip()] = json.loads(text)
        except ValueError:
            injected[name.strip()] = text
    return injected


@dataclass(frozen=True)
class RecordedResult:
    """One tool call of the original branch and the result it got."""

    name: str
    arguments: str
    """Canonical JSON of the parsed arguments (the raw text where it does not parse)."""
    content: Any


def _canonical_arguments(use: ToolUsePart) -> str:
    try:
        return canonical_json(json.loads(use.arguments))
    except (ValueError, TypeError):
        return use.arguments


def recorded_results(context: Context, start: int) -> list[RecordedResult]:
    """The tool calls the original made from display index ``start`` on, with their
    results, in the order it made them."""
    results = {p.call_id: p.content for m in context.messages[start:] for p in m.tool_results()}
    return [
        RecordedResult(use.name, _canonical_arguments(use), results.get(use.call_id))
        for message in context.messages[start:]
        for use in message.tool_uses()
        if use.call_id in results
    ]


@dataclass
class ToolLog:
    """What answered each tool call of the re-run."""

    served: list[dict[str, Any]] = field(default_factory=list)

    def add(self, use: ToolUsePart, how: str) -> None:
        self.served.append({"tool": use.name, "arguments": _canonical_arguments(use), "how": how})


def tool_server(
    modes: ToolModes, recorded: list[RecordedResult], log: ToolLog
) -> Callable[[ToolUsePart], str | None]:
    """The runtime's tool server for ``modes``: recorded results consumed in order."""
    position = 0

    def serve(use: ToolUsePart) -> str | None:
        nonlocal position
        if use.name in modes.injected:
            log.add(use, "injected")
            value = modes.injected[use.name]
            return value if isinstance(value, str) else canonical_json(value)
        if modes.mode(use.name) == "live":
            log.add(use, "live")
            return None
        wanted = _canonical_arguments(use)
        if position < len(recorded) and (recorded[position].name, recorded[position].arguments) == (
            use.name,
            wanted,
        ):
            content = recorded[position].content
            position += 1
            log.add(use, "recorded")
            return content if isinstance(content, str) else canonical_json(content)
        if modes.unserved == "live":
            log.add(use, "live (not recorded)")
            return None
        expected = (
            f"the original's next call was {recorded[position].name}({recorded[position].arguments})"
            if position < len(recorded)
            else "the original made no more tool calls"
        )
        raise RerunStopped(
            f"recorded mode cannot serve {use.name}({wanted}): {expected}; "
            "run it live (--unserved live) or inject a result for it"
        )

    return serve
