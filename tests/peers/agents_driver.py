"""Writes an OpenAI Agents SDK ``SQLiteSession`` database as the real SDK writes it.

``python agents_driver.py BASE_URL DB``, run with the project's interpreter against the scripted server (``openai_stub.py``): a triage agent with a
tool and a handoff to a billing agent, on ``OpenAIChatCompletionsModel``, two turns in one
session (``s1``): a tool call and its answer, then a handoff and the billing agent's
answer. Prints ``{"session": ..., "last_agent": ...}``. Only the SDK is imported here.
"""

from __future__ import annotations

import asyncio
import json
import sys

from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    Runner,
    SQLiteSession,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

SESSION = "s1"


@function_tool
def count_errors(pattern: str) -> str:
    """Count the lines of the log matching a pattern."""
    return "3"


async def main(base_url: str, db: str) -> None:
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key="not-a-key", max_retries=0)
    model = OpenAIChatCompletionsModel(model="smollm2", openai_client=client)
    billing = Agent(name="Billing", instructions="You answer billing questions.", model=model)
    triage = Agent(
        name="Triage", instructions="You analyse logs.", tools=[count_errors], handoffs=[billing], model=model
    )
    session = SQLiteSession(SESSION, db)
    await Runner.run(triage, "How many errors are in the log?", session=session)
    result = await Runner.run(triage, "And is my invoice paid?", session=session)
    print(json.dumps({"session": SESSION, "last_agent": result.last_agent.name}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
