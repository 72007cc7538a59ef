"""What the invocation loop and the compaction strategies need of an agentic object,
and the settings and runtime it carries.

:class:`Agent` is the object as :mod:`soap_core.runtime._invoke` and
:mod:`soap_core.runtime._compaction` use it; :class:`~soap_core.runtime.AgenticObject`
(:mod:`soap_core.runtime._agentic`) is the base class that provides it and calls the loop.
With the shape here, the loop and the strategies never import the class that calls them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from soap_core._context import Context
from soap_core._remote import open_store
from soap_core._store import Store
from soap_core.runtime._llm import LLMEndpoint
from soap_core.runtime._tools import ToolSpec


@dataclass(frozen=True)
class ModelSettings:
    """How an agentic class talks to its model; None leaves a setting to the server."""

    model: str | None = None
    temperature: float | None = 0.0
    max_tokens: int = 256
    seed: int | None = None
    top_p: float | None = None
    context_limit: int = 4096
    context_reserve: int = 256
    max_iterations: int = 8
    extra: Mapping[str, Any] = field(default_factory=dict)

    def parameters(self) -> dict[str, Any]:
        """The sampling parameters of a request, in the order they are recorded."""
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            **self.extra,
        }


class Runtime:
    """Where agentic objects keep their sessions and which model they call."""

    def __init__(self, store: Store | Path | str, endpoint: LLMEndpoint) -> None:
        self.store = store if isinstance(store, Store) else open_store(store)  # a folder or a URL
        self.store.root.mkdir(parents=True, exist_ok=True)  # a runtime writes: its store exists
        self.endpoint = endpoint

    def __repr__(self) -> str:
        return f"Runtime({self.store!r}, {self.endpoint!r})"


class Compaction(Protocol):
    """A compaction strategy: the context to continue in (a fork), or None to keep it."""

    def __call__(self, owner: Agent, context: Context) -> Context | None: ...


class Agent(Protocol):
    """An agentic object as the invocation loop and the strategies see it."""

    @property
    def role(self) -> str: ...

    @property
    def system_prompt(self) -> str: ...

    @property
    def settings(self) -> ModelSettings: ...

    @property
    def compaction(self) -> Compaction | None: ...

    @property
    def runtime(self) -> Runtime: ...

    @property
    def object_id(self) -> str: ...

    def tools(self) -> list[ToolSpec]: ...

    def system_prompt_hooks(self) -> list[str]: ...

    def state(self) -> dict[str, Any]: ...

    def invoke(
        self,
        prompt: str,
        thread: str | None = None,
        output_schema: Any = None,
        *,
        tool_choice: Any = "auto",
        follow_up: Any = "auto",
    ) -> Any: ...
