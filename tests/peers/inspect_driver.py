"""Runs in the ``inspect`` side venv (``venvs.py``): writes a conversation as an Inspect
eval log with inspect_ai's own API, for ``inspect view`` to open.

``python inspect_driver.py MESSAGES.json LOG_DIR`` runs a one-sample task whose solver
calls no model (a real eval, so every field of the log is Inspect's own; a model call
would want tiktoken's o200k_base from the network), puts the conversation in
MESSAGES.json in place of the sample's messages and writes the log back with
``write_eval_log``. MESSAGES.json is a list of
``{"role", "text", "reasoning"?, "tool_calls"?: [{"id", "function", "arguments"}],
"tool_call_id"?, "function"?}``. Prints the log's file name and the sample's id as JSON.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any


def chat_messages(rows: list[dict[str, Any]]) -> list[Any]:
    from inspect_ai._util.content import ContentReasoning, ContentText
    from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageTool, ChatMessageUser
    from inspect_ai.tool import ToolCall

    messages: list[Any] = []
    for row in rows:
        role, text = row["role"], row.get("text", "")
        if role == "system":
            messages.append(ChatMessageSystem(content=text))
        elif role == "user":
            messages.append(ChatMessageUser(content=text))
        elif role == "tool":
            messages.append(
                ChatMessageTool(
                    content=text, tool_call_id=row.get("tool_call_id"), function=row.get("function")
                )
            )
        else:
            content: Any = text
            if row.get("reasoning"):
                content = [ContentReasoning(reasoning=row["reasoning"]), ContentText(text=text)]
            calls = [
                ToolCall(id=c["id"], function=c["function"], arguments=c["arguments"], type="function")
                for c in row.get("tool_calls", [])
            ]
            messages.append(ChatMessageAssistant(content=content, tool_calls=calls or None))
    return messages


def main(messages_file: str, log_dir: str) -> None:
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.log import write_eval_log
    from inspect_ai.solver import Generate, TaskState, solver

    @solver
    def as_it_is() -> Any:
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            return state

        return solve

    rows = json.loads(Path(messages_file).read_text())
    target = Path(log_dir) / "long-conversation.eval"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        [log] = eval(
            Task(dataset=[Sample(input="the long conversation", id="long")], solver=as_it_is(), name="long"),
            model="mockllm/model",
            log_dir=scratch,
            display="none",
        )
        assert log.samples is not None
        sample = log.samples[0]
        sample.messages = chat_messages(rows)
        write_eval_log(log, target)
    print(
        json.dumps({"file": target.name, "sample": sample.id, "epoch": sample.epoch, "messages": len(rows)})
    )


if __name__ == "__main__":
    main(*sys.argv[1:3])
