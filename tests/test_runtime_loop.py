"""Loop logic of the runtime with a scripted endpoint (no model): tool schemas, bad tool
calls, structured output, failures mid-invocation. The real-model tests are in
test_runtime.py; these pin down branches a small model rarely takes on purpose."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

from soap_core import request_hash
from soap_core.runtime import (
    ActiveSessionError,
    AgenticObject,
    InvocationError,
    LLMError,
    ModelSettings,
    Runtime,
    agentic,
    read_calls,
    read_invocations,
    tool,
)
from soap_core.runtime._tools import parse_docstring, tool_specs
from tests.scripted import ScriptedEndpoint, calls, says


class Shop(AgenticObject):
    settings = ModelSettings(max_tokens=8, max_iterations=4)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.basket: list[str] = []

    @tool
    def add_item(self, item: str, quantity: int = 1, unit: Literal["kg", "piece"] = "piece") -> str:
        """Put an item into the basket.

        Longer explanation that the model does not need.

        Args:
            item: what to buy.
            quantity: how many units,
                at least one.
        """
        self.basket += [item] * quantity
        return f"{len(self.basket)} items"

    @tool(name="explode")
    def broken_tool(self) -> None:
        """Always fails."""
        raise RuntimeError("boom")


def make(tmp_path: Path, *answers: dict[str, Any] | Exception) -> tuple[Shop, ScriptedEndpoint]:
    endpoint = ScriptedEndpoint(*answers)
    return Shop(runtime=Runtime(tmp_path, endpoint)), endpoint  # type: ignore[arg-type]


def tool_results(shop: Shop) -> list[str]:
    [summary] = shop.runtime.store.sessions()
    context = shop.runtime.store.load_session(summary.uuid).active_context
    return [str(p.content) for m in context.messages for p in m.tool_results()]


def test_tool_schemas_come_from_signatures_and_docstrings() -> None:
    specs = {s.name: s for s in tool_specs(Shop)}
    assert set(specs) == {"add_item", "explode"}
    add = specs["add_item"]
    assert add.description == "Put an item into the basket."
    assert add.parameters == {
        "type": "object",
        "properties": {
            "item": {"type": "string", "description": "what to buy."},
            "quantity": {"type": "integer", "description": "how many units, at least one."},
            "unit": {"enum": ["kg", "piece"]},
        },
        "required": ["item"],
    }
    assert specs["explode"].method_name == "broken_tool"
    assert parse_docstring(None) == ("", {})


def test_a_decorated_plain_class_is_an_agentic_class(tmp_path: Path) -> None:
    @agentic(role="Greeter")
    class Plain:
        def __init__(self) -> None:
            self.greeted = 0

    greeter = Plain()
    assert isinstance(greeter, AgenticObject) and type(greeter).role == "Greeter"
    greeter.bind(Runtime(tmp_path, ScriptedEndpoint(says("hello"))))  # type: ignore[arg-type]
    assert greeter.invoke("hi") == "hello"
    assert [s.role for s in greeter.runtime.store.sessions()] == ["Greeter"]


def test_bad_arguments_unknown_tools_and_failing_tools_come_back_as_errors(tmp_path: Path) -> None:
    shop, _ = make(
        tmp_path,
        calls("add_item", "{not json"),
        calls("add_item", '{"colour": "red"}'),
        calls("teleport", "{}"),
        calls("explode", "{}"),
    )
    with pytest.raises(InvocationError, match="iteration limit"):
        shop.invoke("buy")
    results = tool_results(shop)
    assert results[0].startswith("[ERROR] arguments are not valid JSON")
    assert results[1] == "[ERROR] bad arguments for add_item: unknown colour; missing item"
    assert results[2].startswith("[ERROR] unknown tool 'teleport'; the tools are: add_item, explode")
    assert results[3] == "[ERROR] RuntimeError: boom"


def test_a_tool_call_runs_the_method_and_changes_the_objects_state(tmp_path: Path) -> None:
    shop, endpoint = make(tmp_path, calls("add_item", '{"item": "pear", "quantity": 2}'), says("done"))
    assert shop.invoke("buy two pears", tool_choice="add_item") == "done"
    assert shop.basket == ["pear", "pear"]
    assert tool_results(shop) == ["2 items"]
    assert endpoint.requests[0]["tool_choice"] == {"type": "function", "function": {"name": "add_item"}}
    assert endpoint.requests[1]["tool_choice"] == "auto"
    [record] = read_invocations(shop.runtime.store.sessions()[0].path)
    assert record.state_after == {"basket": ["pear", "pear"]} and record.result == "done"


def test_an_invocation_records_what_a_rebuild_needs_its_class_and_the_state_before(tmp_path: Path) -> None:
    """A re-run rebuilds the object: the record names its class by an import path that
    finds the class again, and the state it started from (two turns: the second starts
    from the first's end)."""
    shop, _ = make(
        tmp_path,
        calls("add_item", '{"item": "pear"}'),
        says("one"),
        calls("add_item", '{"item": "fig"}', "c2"),
        says("two"),
    )
    shop.invoke("buy a pear", thread="t", tool_choice="add_item")
    shop.invoke("and a fig", thread="t", tool_choice="add_item")
    first, second = read_invocations(shop.runtime.store.sessions()[0].path)
    assert first.callee_class == "tests.test_runtime_loop:Shop"
    module, _, qualname = first.callee_class.partition(":")
    assert getattr(importlib.import_module(module), qualname) is Shop
    assert first.state_before == {"basket": []} and first.state_after == {"basket": ["pear"]}
    assert second.state_before == first.state_after and second.state_after == {"basket": ["pear", "fig"]}


def test_structured_output_rejects_a_wrong_answer_then_returns_the_valid_one(tmp_path: Path) -> None:
    shop, endpoint = make(
        tmp_path,
        says("forty-two"),
        calls("produce_output", '{"answer": "forty-two"}'),
        calls("produce_output", '{"answer": 42}', "c2"),
    )
    assert shop.invoke("how many?", output_schema=int) == 42
    tools = {t["function"]["name"]: t for t in endpoint.requests[0]["tools"]}
    assert tools["produce_output"]["function"]["parameters"]["properties"]["answer"] == {"type": "integer"}
    assert "satisfying the following schema" in endpoint.requests[0]["messages"][0]["content"]
    assert endpoint.requests[1]["messages"][-1]["content"].startswith("PRODUCE YOUR FINAL OUTPUT")
    assert endpoint.requests[1]["tool_choice"] == {"type": "function", "function": {"name": "produce_output"}}
    assert tool_results(shop)[0].startswith("[ERROR] the answer does not match the output schema")


def test_produce_error_ends_the_invocation_with_the_models_reason(tmp_path: Path) -> None:
    shop, _ = make(tmp_path, calls("produce_error", '{"message": "no shop open"}'))
    with pytest.raises(InvocationError, match="gave up: no shop open"):
        shop.invoke("buy", output_schema={"type": "string"})


def test_an_llm_failure_is_recorded_and_leaves_the_session_unlocked(tmp_path: Path) -> None:
    failure = LLMError("http://scripted.invalid/v1", "abc", "connection", "refused")
    shop, _ = make(tmp_path, failure, says("back again"))
    with pytest.raises(LLMError, match="connection: refused"):
        shop.invoke("buy", thread="t")
    [summary] = shop.runtime.store.sessions()
    session = shop.runtime.store.load_session(summary.uuid)
    assert not session.is_active and "LLMError" in session.state_data["_soapwb_last_error"]
    [call] = read_calls(summary.path)
    assert "connection: refused" in call.error and call.response is None
    assert call.request_hash == request_hash(call.request)
    assert shop.invoke("again", thread="t") == "back again"  # lock released, same session
    assert "_soapwb_last_error" not in shop.runtime.store.load_session(summary.uuid).state_data


def test_an_exception_inside_a_tool_that_is_not_caught_still_releases_the_lock(tmp_path: Path) -> None:
    class Fragile(Shop):
        @tool
        def interrupt(self) -> str:
            """Stop everything."""
            raise KeyboardInterrupt

    endpoint = ScriptedEndpoint(calls("interrupt", "{}"), says("fine"))
    fragile = Fragile(runtime=Runtime(tmp_path, endpoint))  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        fragile.invoke("go", thread="t")
    assert fragile.invoke("go", thread="t") == "fine"
    [record, *_] = sorted(
        read_invocations(fragile.runtime.store.sessions()[0].path), key=lambda r: r.started_at
    )
    assert record.outcome == "error" and record.error == "KeyboardInterrupt: "


def test_active_session_error_names_the_session() -> None:
    error = ActiveSessionError("20250611-abc", "it is up the current invocation chain: A/x")
    assert str(error).startswith("Session 20250611-abc is already active")


def test_an_object_without_tools_offers_only_the_output_tools_and_only_with_a_schema(tmp_path: Path) -> None:
    class Plain(AgenticObject):
        pass

    endpoint = ScriptedEndpoint(calls("produce_output", '{"answer": "yes"}'), says("plain"))
    plain = Plain(runtime=Runtime(tmp_path, endpoint))  # type: ignore[arg-type]
    assert plain.invoke("ok?", thread="t", output_schema=str) == "yes"
    assert [t["function"]["name"] for t in endpoint.requests[0]["tools"]] == [
        "produce_output",
        "produce_error",
    ]
    assert plain.invoke("and now?", thread="t") == "plain"
    assert "tools" not in endpoint.requests[1] and "tool_choice" not in endpoint.requests[1]
    calls_made = read_calls(plain.runtime.store.sessions()[0].path)
    assert calls_made[0].tool_list_hook != calls_made[1].tool_list_hook


def test_an_invocation_from_plain_code_inside_another_is_recorded_in_both_sessions(tmp_path: Path) -> None:
    endpoint = ScriptedEndpoint(says("inner answer"), says("outer answer"))
    runtime = Runtime(tmp_path, endpoint)  # type: ignore[arg-type]

    class Inner(AgenticObject):
        pass

    inner = Inner(runtime=runtime)

    class Outer(AgenticObject):
        def system_prompt_hooks(self) -> list[str]:
            return [f"Today's note: {inner.invoke('give me a note')}"]  # plain Python, no tool

    assert Outer(runtime=runtime).invoke("hello") == "outer answer"
    assert "Today's note: inner answer" in endpoint.requests[1]["messages"][0]["content"]
    dirs = {s.role: s.path for s in runtime.store.sessions()}
    [inner_record] = read_invocations(dirs["Inner"])
    outer_records = read_invocations(dirs["Outer"])
    assert inner_record.id in {r.id for r in outer_records}
    assert inner_record.caller is not None and inner_record.caller.role == "Outer"
    assert inner_record.caller.context_id is None  # not made from a message
    assert inner_record.parent_invocation_id in {r.id for r in outer_records if r.callee.role == "Outer"}


def test_a_session_written_by_another_process_before_the_lock_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import soap_core.runtime._invoke as invoke_module
    from soap_core import Message as SoapMessage
    from soap_core import Store, TextPart

    shop, _ = make(tmp_path, says("first"), says("second"))
    shop.invoke("one", thread="t")
    real_lock = invoke_module.session_lock

    @contextlib.contextmanager
    def lock_after_another_writer(directory: Path, uuid: str) -> Iterator[Any]:
        store = Store(tmp_path)  # another process finishes its turn just before we lock
        session = store.load_session(uuid)
        session.active_context.append(SoapMessage.create("user", [TextPart("written elsewhere")]))
        store.save_session(session)
        with real_lock(directory, uuid) as previous:
            yield previous

    monkeypatch.setattr(invoke_module, "session_lock", lock_after_another_writer)
    shop.invoke("two", thread="t")
    [summary] = shop.runtime.store.sessions()
    texts = [m.text() for m in shop.runtime.store.load_session(summary.uuid).active_context.messages]
    assert texts[-4:] == ["first", "written elsewhere", "two", "second"]
