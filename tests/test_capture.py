"""The seam that lets a framework's own code build a request or re-run its loop while the
workbench answers (``importers._capture``): checked with the real ``openai`` client, the
real Agents SDK and real langchain-openai against the scripted server, whose recorded
bodies are the ground truth for what the framework would have sent."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import openai
import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI

from importers._capture import StreamingNotSupported, capture_one, routed
from tests.peers.openai_stub import OpenAIStub, completion

QUESTION = [{"role": "user", "content": "How many errors?"}]


def answer(text: str) -> dict[str, Any]:
    return completion({"content": text}, "m", 1)


def client(stub: OpenAIStub) -> openai.OpenAI:
    return openai.OpenAI(base_url=stub.base_url, api_key="not-a-key", max_retries=0)


def test_a_routed_call_reaches_the_handler_with_its_body_and_nothing_goes_out() -> None:
    seen: list[dict[str, Any]] = []
    with OpenAIStub([{"content": "from the network"}]) as stub:
        with routed(lambda body: seen.append(body) or answer("from the handler")):
            got = client(stub).chat.completions.create(model="m", messages=QUESTION, temperature=0)
        assert got.choices[0].message.content == "from the handler"
        assert seen == [{"model": "m", "messages": QUESTION, "temperature": 0}]
        assert stub.bodies == []
        # outside the block the same client goes to the network again
        after = client(stub).chat.completions.create(model="m", messages=QUESTION)
        assert after.choices[0].message.content == "from the network" and len(stub.bodies) == 1


def test_the_handler_s_own_client_and_other_threads_go_to_the_network() -> None:
    with OpenAIStub([{"content": "real 1"}, {"content": "real 2"}]) as stub:

        def forward(body: dict[str, Any]) -> dict[str, Any]:  # the workbench's endpoint, inside
            return client(stub).chat.completions.create(**body).model_dump()

        elsewhere: list[str | None] = []

        def other_thread() -> None:  # a thread started without this context's route
            reply = client(stub).chat.completions.create(model="m", messages=QUESTION)
            elsewhere.append(reply.choices[0].message.content)

        with routed(forward):
            got = client(stub).chat.completions.create(model="m", messages=QUESTION)
            thread = threading.Thread(target=other_thread)
            thread.start()
            thread.join()
        assert got.choices[0].message.content == "real 1" and elsewhere == ["real 2"]
        assert len(stub.bodies) == 2


def test_a_streamed_request_is_refused_with_the_reason() -> None:
    with OpenAIStub() as stub, routed(lambda body: answer("x")), pytest.raises(Exception) as raised:
        client(stub).chat.completions.create(model="m", messages=QUESTION, stream=True)
    chain: BaseException | None = raised.value
    while chain is not None and not isinstance(chain, StreamingNotSupported):
        chain = chain.__cause__ or chain.__context__
    assert chain is not None and "streamed answer" in str(chain)


def test_capture_one_gives_the_body_langchain_openai_sends() -> None:
    with OpenAIStub([{"content": "ok"}]) as stub:
        llm = ChatOpenAI(
            model="m", base_url=stub.base_url, api_key="not-a-key", max_retries=0, temperature=0.3
        )
        messages = [SystemMessage("You analyse logs."), HumanMessage("How many errors?")]
        captured = capture_one(lambda: llm.invoke(messages))
        assert stub.bodies == []  # stopped before the network
        llm.invoke(messages)
        assert captured == stub.bodies[0]


def test_capture_one_gives_the_body_the_agents_sdk_sends() -> None:
    set_tracing_disabled(True)
    with OpenAIStub([{"content": "ok"}]) as stub:
        sdk = openai.AsyncOpenAI(base_url=stub.base_url, api_key="not-a-key", max_retries=0)
        agent = Agent(
            name="Triage",
            instructions="You analyse logs.",
            model=OpenAIChatCompletionsModel(model="m", openai_client=sdk),
        )
        captured = capture_one(lambda: asyncio.run(Runner.run(agent, "How many errors?")))
        assert stub.bodies == []
        asyncio.run(Runner.run(agent, "How many errors?"))
        assert captured == stub.bodies[0]
        assert captured is not None and captured["messages"][0] == {
            "role": "system",
            "content": "You analyse logs.",
        }
