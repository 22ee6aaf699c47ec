"""Chats and messages over HTTP: seq and ids, history pages, refusals that write nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from chats_support import SPACE, FakeClock, Space, start_space

BOTH_STORES = True  # chats, messages and spaces answer from the store seam


@pytest.fixture
async def space(aiohttp_client: Any, tmp_path: Path, store_dsn: str | None) -> Space:
    db = tmp_path / "space.db"
    return await start_space(aiohttp_client, db, FakeClock(), store_dsn, text_limit=1000)


async def test_space_comes_with_its_general_chat(space: Space) -> None:
    status, body = await space.call("GET", f"/v1/spaces/{SPACE}/chats")
    assert status == 200
    assert [(c["objectId"], c["name"]) for c in body["chats"]] == [(space.chat, "general")]


@pytest.mark.sqlite_only  # the fake clock's instant
async def test_create_and_list_chats(space: Space) -> None:
    status, chat = await space.call("POST", f"/v1/spaces/{SPACE}/chats", json={"name": "ops"})
    assert status == 201
    assert chat["objectId"].startswith("chat_") and chat["name"] == "ops"
    assert chat["createdAt"] == "2026-12-01T09:00:00.000Z"
    status, unnamed = await space.call("POST", f"/v1/spaces/{SPACE}/chats")
    assert status == 201 and unnamed["name"] == ""
    _, body = await space.call("GET", f"/v1/spaces/{SPACE}/chats")
    ids = {c["objectId"] for c in body["chats"]}
    assert ids == {space.chat, chat["objectId"], unnamed["objectId"]}


@pytest.mark.sqlite_only  # the fake clock's instant
async def test_messages_get_increasing_seq_and_unique_ids(space: Space) -> None:
    sent = [await space.send(f"m{i}") for i in range(3)]
    assert [m["seq"] for m in sent] == [1, 2, 3]
    assert all(m["messageId"].startswith("msg_") for m in sent)
    assert len({m["messageId"] for m in sent}) == 3
    assert sent[0] == {
        "messageId": sent[0]["messageId"],
        "seq": 1,
        "objectId": space.chat,
        "text": "m0",
        "createdAt": "2026-12-01T09:00:00.000Z",
    }
    assert await space.history() == sent


async def test_seq_is_per_chat(space: Space) -> None:
    _, other = await space.call("POST", f"/v1/spaces/{SPACE}/chats", json={"name": "b"})
    await space.send("a1")
    first_b = await space.send("b1", chat=other["objectId"])
    assert first_b["seq"] == 1


async def test_agent_messages_keep_their_agent(space: Space) -> None:
    sent = await space.send("done", agent={"name": "triage", "done": True})
    plain = await space.send("hi", agent={"name": "trigger:daily"})
    assert sent["agent"] == {"name": "triage", "done": True}
    assert plain["agent"] == {"name": "trigger:daily"}
    assert [m.get("agent") for m in await space.history()] == [sent["agent"], plain["agent"]]


async def test_concurrent_posts_keep_seq_strictly_increasing(space: Space) -> None:
    sent = await asyncio.gather(*(space.send(f"c{i}") for i in range(40)))
    assert sorted(m["seq"] for m in sent) == list(range(1, 41))
    history = await space.history(query="?limit=1000")
    assert [m["seq"] for m in history] == list(range(1, 41))
    assert {m["text"] for m in history} == {f"c{i}" for i in range(40)}


async def test_history_pages(space: Space) -> None:
    for i in range(5):
        await space.send(f"m{i}")
    status, page = await space.call("GET", space.chat_url(tail="/messages?after=1&limit=2"))
    assert status == 200
    assert [m["seq"] for m in page["messages"]] == [2, 3]
    assert (page["next"], page["more"]) == (3, True)
    _, last = await space.call("GET", space.chat_url(tail="/messages?after=3&limit=2"))
    assert [m["seq"] for m in last["messages"]] == [4, 5] and last["more"] is False
    _, empty = await space.call("GET", space.chat_url(tail="/messages?after=5"))
    assert empty == {"messages": [], "next": 5, "more": False}


BAD_BODIES = [
    ({"text": "x", "color": "red"}, 400, "invalid_body", "color"),
    ({"text": 5}, 400, "invalid_body", "$.text"),
    ({}, 400, "invalid_body", "text"),
    ({"text": "x", "agent": {"name": ""}}, 400, "invalid_body", "$.agent.name"),
    ({"text": "x", "agent": {"name": "a", "mood": 1}}, 400, "invalid_body", "mood"),
    ({"text": "x", "agent": {"name": "a", "done": "yes"}}, 400, "invalid_body", "$.agent.done"),
    ({"text": "é" * 501}, 413, "text_too_large", "`text` is 1002 bytes"),
]


@pytest.mark.parametrize(("body", "status", "code", "names"), BAD_BODIES)
async def test_bad_messages_are_refused_and_write_nothing(
    space: Space, body: dict, status: int, code: str, names: str
) -> None:
    await space.send("before")
    got, answer = await space.call("POST", space.chat_url(tail="/messages"), json=body)
    assert (got, answer["error"]) == (status, code)
    assert names in answer["detail"]
    assert [m["text"] for m in await space.history()] == ["before"]
    assert (await space.send("after"))["seq"] == 2


@pytest.mark.parametrize("raw", [b"", b"not json", b"[1]"])
async def test_bodies_that_are_not_a_message_object(space: Space, raw: bytes) -> None:
    status, answer = await space.call("POST", space.chat_url(tail="/messages"), data=raw)
    assert (status, answer["error"]) == (400, "invalid_body")
    assert await space.history() == []


async def test_bad_chat_body_writes_no_chat(space: Space) -> None:
    status, answer = await space.call("POST", f"/v1/spaces/{SPACE}/chats", json={"title": "x"})
    assert (status, answer["error"]) == (400, "invalid_body")
    assert "title" in answer["detail"]
    _, body = await space.call("GET", f"/v1/spaces/{SPACE}/chats")
    assert len(body["chats"]) == 1


@pytest.mark.parametrize("query", ["?after=-1", "?after=x", "?limit=0", "?limit=100000"])
async def test_bad_history_queries(space: Space, query: str) -> None:
    status, answer = await space.call("GET", space.chat_url(tail=f"/messages{query}"))
    assert (status, answer["error"]) == (400, "invalid_query")
    assert query[1:].split("=")[0] in answer["detail"]


@pytest.mark.parametrize(
    ("method", "tail", "body"),
    [("POST", "/messages", {"text": "x"}), ("GET", "/messages", None), ("GET", "/stream", None)],
)
async def test_unknown_chat_is_404_on_every_route(
    space: Space, method: str, tail: str, body: dict | None
) -> None:
    status, answer = await space.call(method, space.chat_url("chat_nope", tail), json=body)
    assert (status, answer["error"]) == (404, "unknown_chat")
    assert "chat_nope" in answer["detail"]


async def test_chat_of_another_space_is_unknown(space: Space) -> None:
    status, _ = await space.call("POST", "/v1/spaces", json={"id": "work"})
    assert status == 201
    status, answer = await space.call("GET", f"/v1/spaces/work/chats/{space.chat}/messages")
    assert (status, answer["error"]) == (404, "unknown_chat")


async def test_unknown_space_is_404(space: Space) -> None:
    status, answer = await space.call("GET", "/v1/spaces/nope/chats")
    assert (status, answer["error"]) == (404, "unknown_space")
