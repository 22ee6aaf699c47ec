"""`PATCH …/chats/{objectId}/messages/{messageId}`: an agent reply grows in place until done.

Against the real space server: the edit keeps `messageId`, `seq` and `createdAt`; a
stream subscriber sees it as `event: update` of the same message, with no `id` (so
`Last-Event-ID` never moves back); a person's message, a done one, an unknown one and
a text over the limit are refused, and nothing changes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from chats_support import FakeClock, Space, start_space

BOTH_STORES = True  # messages and their edits answer from the store seam


@pytest.fixture
async def space(aiohttp_client: Any, tmp_path, store_dsn: str | None) -> Space:
    db = tmp_path / "space.db"
    return await start_space(aiohttp_client, db, FakeClock(), store_dsn, text_limit=100)


async def edit(space: Space, message_id: str, body: dict[str, Any]) -> tuple[int, Any]:
    return await space.call("PATCH", space.chat_url(tail=f"/messages/{message_id}"), json=body)


AGENT = {"name": "chat-watch", "done": False}


async def test_an_agent_message_grows_and_then_is_done(space: Space):
    sent = await space.send("Hel", agent=AGENT)
    status, grown = await edit(space, sent["messageId"], {"text": "Hello"})
    assert status == 200 and grown["text"] == "Hello" and grown["agent"] == AGENT
    status, done = await edit(space, sent["messageId"], {"text": "Hello there", "done": True})
    assert status == 200, done
    assert {k: done[k] for k in ("messageId", "seq", "createdAt")} == {
        k: sent[k] for k in ("messageId", "seq", "createdAt")
    }
    (stored,) = await space.history()
    assert stored == done and stored["agent"] == {"name": "chat-watch", "done": True}


async def test_stream_subscribers_see_updates_of_the_same_message(space: Space):
    async with space.stream() as reader:
        hello = await reader.next()
        assert hello.event == "hello"
        sent = await space.send("Hel", agent=AGENT)
        await edit(space, sent["messageId"], {"text": "Hello", "done": True})
        first, update = await reader.next(), await reader.next()
    assert (first.event, first.id) == ("message", str(sent["seq"]))
    assert update.event == "update" and update.id is None
    body = json.loads(update.text)
    assert body["messageId"] == sent["messageId"] and body["text"] == "Hello"
    assert body["agent"]["done"] is True


@pytest.mark.parametrize(
    ("message", "body", "status", "code"),
    [
        ("person", {"text": "changed"}, 409, "not_editable"),
        ("done", {"text": "changed"}, 409, "not_editable"),
        ("agent", {"text": "x" * 101}, 413, "text_too_large"),
        ("agent", {"txt": "typo"}, 400, "invalid_body"),
        ("agent", {"done": "yes"}, 400, "invalid_body"),
        ("unknown", {"text": "changed"}, 404, "unknown_message"),
    ],
)
async def test_refused_edits_change_nothing(space: Space, message, body, status, code):
    sent = {
        "person": await space.send("mine"),
        "done": await space.send("final", agent={"name": "chat-watch", "done": True}),
        "agent": await space.send("growing", agent=AGENT),
    }
    before = await space.history()
    target = sent[message]["messageId"] if message in sent else "msg_nope"
    got, answer = await edit(space, target, body)
    assert (got, answer["error"]) == (status, code), answer
    assert await space.history() == before
