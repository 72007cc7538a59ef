"""Writes an OpenAI Agents SDK ``SQLiteSession`` database as the real SDK writes it.

``python agents_driver.py BASE_URL DB [TURN ...]``, run with the project's interpreter
against the scripted server (``openai_stub.py``) or the local model: the app of
``agents_app.py`` (a triage agent with a tool and a handoff to a billing agent, on
``OpenAIChatCompletionsModel``), one ``Runner.run`` per turn in one session (``s1``); by
default two turns, a tool call and its answer, then a handoff and the billing agent's
answer (``AGENTS_APP_AGENT`` names another agent of the app to start with). A database
that exists goes on (a grown session). Prints
``{"session": ..., "last_agent": ...}``. Only the SDK and the app are imported here.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

SESSION = "s1"
TURNS = ("How many errors are in the log?", "And is my invoice paid?")


async def main(base_url: str, db: str, turns: list[str]) -> None:
    os.environ["AGENTS_APP_BASE_URL"] = base_url
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from agents import Runner, SQLiteSession, set_tracing_disabled

    from tests.peers import agents_app

    triage = getattr(agents_app, os.environ.get("AGENTS_APP_AGENT", "triage"))
    set_tracing_disabled(True)
    session = SQLiteSession(SESSION, db)
    result = None
    for turn in turns:
        result = await Runner.run(triage, turn, session=session)
    assert result is not None
    print(json.dumps({"session": SESSION, "last_agent": result.last_agent.name}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:] or list(TURNS)))
