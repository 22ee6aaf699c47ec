"""chat-watch is recognised by its reserved id; `internal:` programs are its alone; run tokens
speak as the agent; the history can be read from its newest end."""

from __future__ import annotations

from typing import Any

import pytest
from space_support import CRON, SPACE, Api, snapshot

S = f"/spaces/{SPACE}"
T = f"{S}/triggers"


async def seed(api: Api) -> dict[str, Any]:
    _, space = await api.get(S)
    body = {
        "name": "Chat responder",
        "kind": "event",
        "program": "internal:chat-watch",
        "spec": {"dataset": "chat_messages", "objectId": space["generalChat"]},
    }
    status, record = await api.put(f"{T}/chat-watch", body)
    assert status == 201, record
    return record


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"program": "mine@v1"}, "`$.program`"),
        ({"program": "internal:other"}, "`$.program`"),
        ({"kind": "cron", "spec": {"expr": "* * * * *"}}, "`$.kind`"),
    ],
)
async def test_chat_watch_keeps_its_kind_and_program(
    api: Api, change: dict[str, Any], field: str
) -> None:
    await seed(api)
    before = snapshot(api.db_path)
    status, body = await api.patch(f"{T}/chat-watch", change)
    assert status == 400 and body["error"] == "invalid_record" and field in body["detail"]
    assert snapshot(api.db_path) == before


async def test_chat_watch_may_be_paused_renamed_and_repinned(api: Api) -> None:
    await seed(api)
    status, body = await api.patch(f"{T}/chat-watch", {"enabled": False, "owner": "box"})
    assert status == 200 and (body["enabled"], body["owner"]) == (False, "box")


async def test_chat_watch_cannot_be_seeded_as_something_else(api: Api) -> None:
    status, body = await api.put(f"{T}/chat-watch", {**CRON, "program": "internal:chat-watch"})
    assert status == 400 and "`$.kind`" in body["detail"]


@pytest.mark.parametrize("method", ["POST", "PATCH"])
async def test_no_other_record_may_use_an_internal_program(api: Api, method: str) -> None:
    record = await api.create_trigger()
    path = T if method == "POST" else f"{T}/{record['id']}"
    body = (
        {**CRON, "program": "internal:chat-watch"}
        if method == "POST"
        else {"program": "internal:chat-watch"}
    )
    before = snapshot(api.db_path)
    status, answer = await api.call(method, path, body)
    assert status == 400 and "`$.program`" in answer["detail"] and "reserved" in answer["detail"]
    assert snapshot(api.db_path) == before


async def run_token(api: Api, trigger_id: str) -> str:
    status, body = await api.post(
        f"{S}/tokens/run", {"triggerId": trigger_id, "runId": "run_1", "ttlSeconds": 60}
    )
    assert status == 201, body
    return body["token"]


async def test_a_message_sent_with_a_run_token_is_an_agent_message(api: Api) -> None:
    record = await api.create_trigger(program="greeter@v1")
    run = api.as_(await run_token(api, record["id"]))
    _, space = await api.get(S)
    path = f"{S}/chats/{space['generalChat']}/messages"
    status, unsigned = await run.post(path, {"text": "hello"})
    assert status == 201 and unsigned["agent"] == {"name": "greeter@v1"}
    status, named = await run.post(path, {"text": "hi", "agent": {"name": "trigger:daily"}})
    assert status == 201 and named["agent"] == {"name": "trigger:tick"}  # a nudge: as its trigger
    status, person = await api.post(path, {"text": "from a person"})  # admin: as sent
    assert status == 201 and "agent" not in person


async def test_latest_history_is_the_newest_page_oldest_first(api: Api) -> None:
    _, space = await api.get(S)
    path = f"{S}/chats/{space['generalChat']}/messages"
    for i in range(30):
        assert (await api.post(path, {"text": f"m{i}"}))[0] == 201
    status, page = await api.get(f"{path}?limit=20&latest=1")
    assert status == 200 and [m["text"] for m in page["messages"]] == [
        f"m{i}" for i in range(10, 30)
    ]
    assert page["more"] is True
    status, oldest = await api.get(f"{path}?limit=20")
    assert oldest["messages"][0]["text"] == "m0"
    status, few = await api.get(f"{path}?limit=50&latest=1")
    assert len(few["messages"]) == 30 and few["more"] is False
