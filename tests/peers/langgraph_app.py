"""A small LangGraph app, importable as code (``tests.peers.langgraph_app:graph``): a
ChatOpenAI model with one bound tool and a tool node, looping until the model answers.

The model's base URL comes from ``LANGGRAPH_APP_BASE_URL`` (the driver sets it; the
workbench routes the calls anyway), its API key is a placeholder.
``deterministic_graph`` is the same app at temperature 0, for the local model;
``async_graph`` the same with an async model node. ``graph`` is compiled
without a checkpointer, as an app module would export it; the driver compiles ``builder``
with its ``SqliteSaver``, and the workbench copies ``graph`` onto a copy of the database.
``TOOL_CALLS`` lists the patterns the tool was really called with (a live tool's trace).
"""

from __future__ import annotations

import os

from langchain_core.messages import SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

SYSTEM_PROMPT = "You analyse logs."
TOOL_CALLS: list[str] = []


@tool
def count_errors(pattern: str) -> str:
    """Count the lines of the log matching a pattern."""
    TOOL_CALLS.append(pattern)
    return "3"


def build(temperature: float | None = None, *, asynchronous: bool = False) -> StateGraph[MessagesState]:
    """The app's graph, not compiled: a model node (ChatOpenAI with the tool bound) and a
    tool node, looping until the model answers."""
    llm = ChatOpenAI(
        model=os.environ.get("LANGGRAPH_APP_MODEL", "smollm2"),
        base_url=os.environ.get("LANGGRAPH_APP_BASE_URL", "http://127.0.0.1:9/v1"),
        api_key="not-a-key",
        max_retries=0,
        temperature=temperature,
    ).bind_tools([count_errors])

    def model(state: MessagesState) -> dict[str, list[object]]:
        return {"messages": [llm.invoke([SystemMessage(SYSTEM_PROMPT), *state["messages"]])]}

    async def amodel(state: MessagesState) -> dict[str, list[object]]:
        return {"messages": [await llm.ainvoke([SystemMessage(SYSTEM_PROMPT), *state["messages"]])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", amodel if asynchronous else model)
    builder.add_node("tools", ToolNode([count_errors]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition)
    builder.add_edge("tools", "model")
    return builder


builder = build()
graph = builder.compile()
deterministic_builder = build(temperature=0.0)
"""The same app at temperature 0 (for the deterministic local model)."""
deterministic_graph = deterministic_builder.compile()
async_graph = build(asynchronous=True).compile()
"""The same app with an async model node (LangGraph runs it only through ``ainvoke``)."""
