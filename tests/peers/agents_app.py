"""A small OpenAI Agents SDK app, importable as code (``tests.peers.agents_app:triage``):
what ``soapwb import openai-agents --agent`` and a re-run with the app's code load.

At temperature 0 (the local model is deterministic then). A triage agent with a tool (``count_errors``, forced on its first call of a turn: the SDK
drops that ``tool_choice`` once the tool ran, its reset rule) and a handoff to a billing
agent, both on ``OpenAIChatCompletionsModel``. The client's base URL comes from
``AGENTS_APP_BASE_URL`` (the driver sets it; the workbench routes the calls itself), the
api key is a placeholder, and the client does not retry (a stopped call stays stopped).
"""

from __future__ import annotations

import os

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, function_tool, handoff
from agents.extensions import handoff_filters
from openai import AsyncOpenAI

BASE_URL_VARIABLE = "AGENTS_APP_BASE_URL"
COUNTED: list[str] = []
"""The patterns ``count_errors`` was called with in this process (a live call shows here)."""


@function_tool
def count_errors(pattern: str) -> str:
    """Count the lines of the log matching a pattern."""
    COUNTED.append(pattern)
    return "3"


client = AsyncOpenAI(
    base_url=os.environ.get(BASE_URL_VARIABLE, "http://127.0.0.1:9/v1"), api_key="not-a-key", max_retries=0
)
model = OpenAIChatCompletionsModel(model="smollm2", openai_client=client)
billing = Agent(
    name="Billing",
    instructions="You answer billing questions.",
    model=model,
    model_settings=ModelSettings(temperature=0, max_tokens=48),
)
triage = Agent(
    name="Triage",
    instructions="You analyse logs.",
    tools=[count_errors],
    handoffs=[billing],
    model=model,
    model_settings=ModelSettings(tool_choice="count_errors", temperature=0, max_tokens=48),
)

by_name = Agent(name="Named", instructions="You analyse logs.", model="gpt-4o-mini", handoffs=[billing])
"""An agent whose model is given by name (the Responses API): refused, never run."""
filtered = triage.clone(handoffs=[handoff(billing, input_filter=handoff_filters.remove_all_tools)])
"""Triage whose handoff hides the tool calls from billing (an input filter): the billing
agent's request then differs from what the file holds before it."""
