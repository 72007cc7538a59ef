"""Agentic classes at module level, so that a re-run can import them again by the path
their invocation records name."""

from __future__ import annotations

from typing import Any

from soap_core.runtime import AgenticObject, ModelSettings, tool


class Pantry(AgenticObject):
    system_prompt = "You keep a pantry. Use your tools, then answer in a few words."
    settings = ModelSettings(max_tokens=48, max_iterations=4)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.items: list[str] = []

    @tool
    def add_item(self, item: str) -> str:
        """Put an item into the pantry.

        Args:
            item: the item to add.
        """
        self.items.append(item)
        return f"{len(self.items)} items"

    @tool
    def ask_grocer(self, question: str) -> str:
        """Ask the grocer (another agentic object).

        Args:
            question: what to ask.
        """
        return str(Grocer(runtime=self.runtime, object_id="grocer").invoke(question, thread="shop"))


class Grocer(AgenticObject):
    system_prompt = "You are a grocer."
    settings = ModelSettings(max_tokens=32, max_iterations=2)
