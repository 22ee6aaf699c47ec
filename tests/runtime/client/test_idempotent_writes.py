"""A write whose answer is lost on the way back is sent again with its `Idempotency-Key`:
the space stores it once, and the caller gets the first answer (both clients).

The link is a loopback TCP proxy that forwards the request and swallows the answer.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from faultproxy import FaultProxy

from programs.context import RunContext
from programs.use import make_use
from runtime.client.api import SpaceClient
from space.app import create_app, default_admin_token_file

SPACE = "home"
CRON = {"name": "tick", "kind": "cron", "spec": {"expr": "*/5 * * * *"}, "program": "tick@v1"}


@pytest.fixture
async def linked(tmp_path: Path, aiohttp_server: Any) -> Any:
    db = tmp_path / "space.db"
    server = await aiohttp_server(create_app(db))
    token = default_admin_token_file(db).read_text().strip()
    async with FaultProxy(server.port) as proxy, SpaceClient(proxy.url, token) as client:
        space = await client.space_create({"id": SPACE, "name": "Home"})
        yield proxy, client, space.generalChat


async def texts(client: SpaceClient, chat: str) -> list[str]:
    page = await client.call("chat_messages", space=SPACE, objectId=chat)
    return [m["text"] for m in page["messages"]]


async def test_the_async_client_sends_a_lost_write_again_and_it_is_stored_once(linked: Any) -> None:
    proxy, client, chat = linked
    proxy.drop_answers = 1
    sent = await client.chat_send(SPACE, chat, {"text": "once"})
    assert proxy.answers_dropped == 1
    assert sent.text == "once"
    assert await texts(client, chat) == ["once"]


async def test_the_program_client_sends_a_lost_write_again_and_it_is_stored_once(
    linked: Any,
) -> None:
    proxy, client, chat = linked
    trigger = await client.trigger_create(SPACE, CRON)
    minted = await client.token_run(SPACE, {"triggerId": trigger["id"], "runId": "run_1"})
    ctx = RunContext(
        run_id="run_1",
        trigger_id=trigger["id"],
        program="tick@v1",
        peer="lap",
        space=SPACE,
        url=proxy.url,
        token=minted.token,
        term=1,
        key="k1",
    )
    use = make_use(ctx)("any@v1")
    proxy.drop_answers = 1
    sent = await asyncio.to_thread(use.chat_send, SPACE, chat, {"text": "once"})
    assert proxy.answers_dropped == 1
    assert sent["text"] == "once"
    assert await texts(client, chat) == ["once"]


async def test_a_refused_connection_is_not_sent_again(linked: Any) -> None:
    proxy, client, chat = linked
    proxy.refusing = True
    with pytest.raises(Exception, match="unreachable"):
        await client.chat_send(SPACE, chat, {"text": "no"})
    proxy.refusing = False
    assert await texts(client, chat) == []
