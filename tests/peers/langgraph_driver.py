"""Writes a LangGraph ``SqliteSaver`` checkpoint database as the real packages write it.

``python langgraph_driver.py BASE_URL DB``, run with the project's interpreter
against the scripted server (``openai_stub.py``): a ChatOpenAI model with a
bound tool in a graph with a tool node, thread ``t1``: a question, the tool call, its
result, the answer; then a fork (``update_state`` on the checkpoint before the first model
call, replacing the question) run to its own answer. Prints ``{"thread": ...}``. Only the
peer's packages are imported here.
"""

from __future__ import annotations

import json
import sqlite3
import sys

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

THREAD = "t1"


@tool
def count_errors(pattern: str) -> str:
    """Count the lines of the log matching a pattern."""
    return "3"


def main(base_url: str, db: str) -> None:
    llm = ChatOpenAI(model="smollm2", base_url=base_url, api_key="not-a-key", max_retries=0).bind_tools(
        [count_errors]
    )

    def model(state: MessagesState) -> dict[str, list[object]]:
        return {"messages": [llm.invoke([SystemMessage("You analyse logs."), *state["messages"]])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", ToolNode([count_errors]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    graph = builder.compile(checkpointer=SqliteSaver(sqlite3.connect(db, check_same_thread=False)))
    config = {"configurable": {"thread_id": THREAD}}
    graph.invoke({"messages": [HumanMessage("How many errors are in the log?", id="q1")]}, config)
    first = [s for s in graph.get_state_history(config) if s.next == ("model",)][-1]  # before the first call
    forked = graph.update_state(first.config, {"messages": [HumanMessage("How many warnings?", id="q1")]})
    graph.invoke(None, forked)
    print(json.dumps({"thread": THREAD}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
