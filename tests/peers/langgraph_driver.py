"""Writes a LangGraph ``SqliteSaver`` checkpoint database as the real packages write it.

``python langgraph_driver.py BASE_URL DB [SCENARIO]``, run with the project's interpreter
against the scripted server (``openai_stub.py``) or any OpenAI-compatible endpoint. The
app is ``langgraph_app.py`` (a ChatOpenAI model with a bound tool, a tool node), compiled
here with a ``SqliteSaver`` on DB as the app would; thread ``t1``. Scenarios:

* ``fork`` (the default): a question, the tool call, its result, the answer; then a fork
  (``update_state`` on the checkpoint before the first model call, replacing the
  question) run to its own answer;
* ``two-forks``: the same, then a second fork from the checkpoint after the tool ran,
  its result replaced (``5``), run to its answer: a branch that shares the first call;
* ``grow``: one more question on the thread as it stands (a database that grew);
* ``local``: the question and its tool loop only, the app at temperature 0 (for the
  deterministic local model).

Prints ``{"thread": ...}``. Only the peer's packages are imported here.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

THREAD = "t1"


def main(base_url: str, db: str, scenario: str = "fork") -> None:
    os.environ["LANGGRAPH_APP_BASE_URL"] = base_url
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from langchain_core.messages import HumanMessage, ToolMessage
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph_app import builder, deterministic_builder

    if scenario == "local":  # the question and its tool loop, at temperature 0
        builder = deterministic_builder
    graph = builder.compile(checkpointer=SqliteSaver(sqlite3.connect(db, check_same_thread=False)))
    config = {"configurable": {"thread_id": THREAD}}
    if scenario == "grow":
        graph.invoke({"messages": [HumanMessage("And how many warnings?", id="q2")]}, config)
        print(json.dumps({"thread": THREAD}))
        return
    graph.invoke({"messages": [HumanMessage("How many errors are in the log?", id="q1")]}, config)
    history = list(graph.get_state_history(config))
    if scenario in ("fork", "two-forks"):
        first = [s for s in history if s.next == ("model",)][-1]  # before the first call
        forked = graph.update_state(first.config, {"messages": [HumanMessage("How many warnings?", id="q1")]})
        graph.invoke(None, forked)
    if scenario == "two-forks":
        after_tool = next(s for s in history if s.next == ("model",) and len(s.values["messages"]) == 3)
        result = after_tool.values["messages"][2]
        changed = ToolMessage("5", tool_call_id=result.tool_call_id, name=result.name, id=result.id)
        graph.invoke(None, graph.update_state(after_tool.config, {"messages": [changed]}))
    print(json.dumps({"thread": THREAD}))


if __name__ == "__main__":
    main(*sys.argv[1:])
