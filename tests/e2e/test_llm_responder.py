# ruff: noqa: F811  (pytest fixtures imported from device_support are parameters here)
"""A device whose chat responder is a model behind an OpenAI-compatible endpoint.

A real device and a real space on 127.0.0.1, and at the edge a fake endpoint
(tests/e2e/fake_llm.py). The reply streams into the chat as one agent message that
grows (`done` false until its end); the model is sent the system prompt, the most
recent history and the waiting messages; pausing chat-watch through the space API
stops answers; with the endpoint down the device is not ready, messages wait and
`baton status` says why, and they are answered once it is back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from device_support import (  # noqa: F401  (the fixtures are used by name)
    SPACE,
    MakeDevice,
    Running,
    Space,
    eventually,
    make_device,
    space,
    spaces,
)
from fake_llm import FakeLlm

from core.chatwire import Agent, Message
from runtime.chat.openai import LlmConfig, OpenAIResponder
from runtime.cli.common import Target
from runtime.cli.status import gather, human
from runtime.client.api import SpaceClient
from triggers.records import RESERVED_CHAT_WATCH as CHAT_WATCH

PROMPT = "You are the agent. Be brief."


@pytest.fixture
async def llm() -> AsyncIterator[FakeLlm]:
    fake = FakeLlm(["Hel", "lo ", "there"])
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


def responder(fake: FakeLlm) -> OpenAIResponder:
    return OpenAIResponder(LlmConfig(url=fake.url, model="fake-model", system_prompt=PROMPT))


async def answering(make_device: MakeDevice, space: Space, fake: FakeLlm) -> Running:
    dev = await make_device(responder=responder(fake))
    await dev.active()
    await dev.live(space.general, CHAT_WATCH)
    return dev


async def agent_messages(space: Space) -> list[Message]:
    return [m for m in await space.messages(space.general) if m.agent]


async def test_the_reply_streams_into_one_message_that_is_done_at_its_end(
    space: Space, make_device: MakeDevice, llm: FakeLlm
):
    llm.hold = True
    for i in range(25):  # history older than the device: never fired, yet in the snapshot
        await space.send(space.general, f"old {i}")
    await answering(make_device, space, llm)
    sent = await space.send(space.general, "hello agent")

    (growing,) = await eventually(lambda: agent_messages(space))
    assert growing.text == "Hel" and growing.agent == Agent(name="chat-watch", done=False)
    llm.release()

    async def finished() -> Message | None:
        found = await agent_messages(space)
        return found[0] if found and found[0].agent and found[0].agent.done else None

    final = await eventually(finished)
    assert final.message_id == growing.message_id and final.seq == growing.seq
    assert final.text == "Hello there"
    assert len(await agent_messages(space)) == 1

    (request,) = llm.requests
    assert request["model"] == "fake-model" and request["stream"] is True
    messages = request["messages"]
    assert messages[0] == {"role": "system", "content": PROMPT}
    history = [m["content"] for m in messages[1:-1]]
    assert history == [f"old {i}" for i in range(6, 25)]  # the most recent 19 (+ the new one)
    assert messages[-1] == {"role": "user", "content": "hello agent"}
    assert sent.message_id not in history


async def test_a_server_that_does_not_stream_answers_in_one_message(
    space: Space, make_device: MakeDevice, llm: FakeLlm
):
    llm.streaming = False
    await answering(make_device, space, llm)
    await space.send(space.general, "hi")

    async def done() -> list[Message] | None:
        found = await agent_messages(space)
        return found if found and found[0].agent and found[0].agent.done else None

    (reply,) = await eventually(done)
    assert reply.text == "Hello there"


async def test_pausing_chat_watch_stops_answers_and_resuming_answers_new_messages(
    space: Space, make_device: MakeDevice, llm: FakeLlm
):
    dev = await answering(make_device, space, llm)
    await space.patch(CHAT_WATCH, {"enabled": False})
    await dev.not_following(space.general)
    await space.send(space.general, "while paused")

    await space.patch(CHAT_WATCH, {"enabled": True})
    await dev.live(space.general, CHAT_WATCH)
    await space.send(space.general, "after resume")
    await eventually(lambda: llm.requests)
    await eventually(lambda: agent_messages(space))

    (request,) = llm.requests  # one turn: the paused message never fired
    assert request["messages"][-1] == {"role": "user", "content": "after resume"}
    assert {"role": "user", "content": "while paused"} in request["messages"]  # as history


async def test_an_unreachable_endpoint_makes_messages_wait_until_it_is_back(
    space: Space, make_device: MakeDevice, llm: FakeLlm
):
    await llm.stop()
    dev = await make_device(responder=responder(llm))
    await dev.active()
    await dev.live(space.general, CHAT_WATCH)
    await space.send(space.general, "are you there?")
    await eventually(lambda: dev.device.chatwatch.status().chats)

    where = Target(url=space.url, token=(await space.device_token("reader")), space=SPACE)
    reader = SpaceClient(where.url, where.token)

    async def says_why() -> dict[str, Any] | None:
        report = await gather(reader, where)
        found = report["responders"]
        return report if found and not found[0]["ready"] and found[0]["waiting"] == 1 else None

    try:
        report = await eventually(says_why)
    finally:
        await reader.close()
    (state,) = report["responders"]
    assert "unreachable" in state["reason"] and llm.url in state["reason"], state
    assert "not ready: " in human(report)
    assert await agent_messages(space) == []

    await llm.start()  # the same port
    await eventually(lambda: agent_messages(space))
    (request,) = llm.requests
    assert request["messages"][-1] == {"role": "user", "content": "are you there?"}
    await eventually(lambda: dev.device.chatwatch.ready)


async def ended(space: Space, count: int) -> list[Message]:
    async def all_done() -> list[Message] | None:
        found = await agent_messages(space)
        finished = len(found) == count and all(m.agent and m.agent.done for m in found)
        return found if finished else None

    return await eventually(all_done)


async def test_a_message_joining_cuts_off_the_reply_which_ends_and_is_not_sent_back(
    space: Space, make_device: MakeDevice, llm: FakeLlm
):
    llm.hold = True
    await answering(make_device, space, llm)
    await space.send(space.general, "first of two")
    (growing,) = await eventually(lambda: agent_messages(space))
    assert growing.agent == Agent(name="chat-watch", done=False)
    await space.send(space.general, "second joins?")
    await eventually(lambda: len(llm.requests) == 2 or None)
    llm.release()

    cut, answer = await ended(space, 2)
    assert cut.message_id == growing.message_id
    assert cut.text == "Hel [cut off: a new message came]"
    assert answer.text == "Hello there"
    second = llm.requests[1]["messages"]
    assert all(m["role"] != "assistant" for m in second), second  # the partial stays out
    assert second[-2:] == [
        {"role": "user", "content": "first of two"},
        {"role": "user", "content": "second joins?"},
    ]


async def test_a_model_failing_mid_reply_ends_the_reply_with_why(
    space: Space, make_device: MakeDevice, llm: FakeLlm
):
    llm.pieces = ["Hel", "FAIL"]
    await answering(make_device, space, llm)
    await space.send(space.general, "hello")
    cut, apology = await ended(space, 2)
    assert cut.text == "Hel [cut off: the model failed]"
    assert apology.text.startswith("Sorry")


async def test_a_device_stopping_mid_reply_ends_the_reply_with_why(
    space: Space, make_device: MakeDevice, llm: FakeLlm
):
    llm.hold = True
    dev = await answering(make_device, space, llm)
    await space.send(space.general, "hello")
    await eventually(lambda: agent_messages(space))
    await dev.stop()
    (cut,) = await ended(space, 1)
    assert cut.text == "Hel [cut off: the device stopped]"
