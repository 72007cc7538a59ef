"""A small store with everything the workbench pages show, built in a second.

Written by the real runtime and replay code against a scripted endpoint (the answers
are fixed, the files are real): a reused thread with tool calls and thinking, a
three-deep cross-object chain, a no-circle refusal, a compaction fork, a replay fork,
object state that changes between invocations, and a message whose text is HTML.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from replay import Overrides, materialize, replay
from soap_core import Store
from soap_core.runtime import AgenticObject, ModelSettings, RollingSequenceWindow, Runtime, tool
from tests.scripted import ScriptedEndpoint, calls, says

XSS = "<script>alert(1)</script><img src=x onerror=alert(2)>"


class Archivist(AgenticObject):
    settings = ModelSettings(max_tokens=32)

    @tool
    def file_note(self, text: str = "") -> str:
        """File a note in the archive."""
        return "filed"


class Researcher(AgenticObject):
    settings = ModelSettings(max_tokens=32)
    archivist: Archivist

    @tool
    def ask_archivist(self, question: str = "") -> str:
        """Ask the archivist."""
        return str(self.archivist.invoke(question, tool_choice="file_note", follow_up="none"))


class Analyst(AgenticObject):
    system_prompt = "You analyse logs. Use your tools."
    settings = ModelSettings(max_tokens=32, context_limit=2048)
    compaction = RollingSequenceWindow(n=6)
    researcher: Researcher

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.errors_seen = 0
        self.questions = 0

    @tool
    def count_errors(self, pattern: str = "ERROR") -> int:
        """Count the error lines of the log."""
        self.errors_seen += 3
        return self.errors_seen

    @tool
    def ask_researcher(self, question: str = "") -> str:
        """Ask the researcher."""
        self.questions += 1
        return str(self.researcher.invoke(question, tool_choice="ask_archivist", follow_up="none"))

    @tool
    def ask_myself(self, question: str = "") -> str:
        """Ask this object on its own thread (refused: the thread is running)."""
        return str(self.invoke(question, thread="investigation"))


def build_workbench_store(root: Path) -> Path:
    endpoint = ScriptedEndpoint(
        calls("count_errors", '{"pattern": "ERROR"}', "c1"),
        {"role": "assistant", "content": "There are 3 errors.", "reasoning_content": "Count, then answer."},
        calls("ask_researcher", '{"question": "Where do they come from?"}', "c2"),
        calls("ask_archivist", '{"question": "Where do they come from?"}', "c3"),
        calls("file_note", '{"text": "errors"}', "c4"),
        says("Filed."),
        says("The archivist filed it."),
        says("The researcher is on it."),
        calls("ask_myself", '{"question": "loop?"}', "c5"),
        says("I cannot ask myself while I am running."),
        says(XSS),
        calls("count_errors", "{}", "c6"),
        says("Now 6 errors."),
        says("An edited answer."),
    )
    runtime = Runtime(root, endpoint)  # type: ignore[arg-type]
    archivist = Archivist(runtime=runtime, object_id="archivist")
    researcher = Researcher(runtime=runtime, object_id="researcher")
    analyst = Analyst(runtime=runtime, object_id="analyst")
    researcher.archivist, analyst.researcher = archivist, researcher
    analyst.invoke("How many errors are in the log?", thread="investigation", tool_choice="count_errors")
    analyst.invoke(
        "Where do they come from?", thread="investigation", tool_choice="ask_researcher", follow_up="none"
    )
    analyst.invoke("Ask yourself.", thread="investigation", tool_choice="ask_myself", follow_up="none")
    analyst.invoke("Repeat this exactly: " + XSS, thread="investigation", tool_choice="none")
    analyst.invoke("Count again.", thread="investigation", tool_choice="count_errors", follow_up="none")
    store = Store(root)
    [summary] = [s for s in store.sessions() if s.role == "Analyst"]
    session = store.load_session(summary.uuid)
    found = materialize(session, None, -1)
    replay(store, session, found, endpoint, Overrides(edits={len(found.messages) - 1: "Count once more."}))
    return root


@pytest.fixture(scope="session")
def workbench_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_workbench_store(tmp_path_factory.mktemp("workbench") / "store")
