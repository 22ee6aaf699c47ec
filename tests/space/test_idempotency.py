"""`Idempotency-Key`: a write retried within a day answers its first result, stores nothing new."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from space_support import SPACE, Api, FakeClock

from space import forget
from space.app import create_app, default_admin_token_file
from space.store import STORE
from space.store.postgres import PostgresStore

S = f"/spaces/{SPACE}"

BOTH_STORES = True  # the keys are kept behind the store seam


async def _chat(api: Api) -> str:
    _, space = await api.get(S)
    return str(space["generalChat"])


async def _messages(api: Api, chat: str) -> list[str]:
    _, page = await api.get(f"{S}/chats/{chat}/messages")
    return [m["text"] for m in page["messages"]]


def _record(text: str) -> dict[str, object]:
    """A record to create, unnamed: the same body twice is two records (behind the seam,
    unlike chats yet)."""
    cron = {"kind": "cron", "spec": {"expr": "*/5 * * * *"}, "program": "tick@v1"}
    return {**cron, "args": {"t": text}}


async def _written(api: Api) -> list[str]:
    _, page = await api.get(f"{S}/triggers")
    return sorted(r["args"]["t"] for r in page["triggers"])


@pytest.mark.sqlite_only  # chats are not behind the store seam yet; records are, below
async def test_a_retried_send_answers_the_first_message_and_stores_nothing_new(api: Api) -> None:
    chat = await _chat(api)
    key = {"Idempotency-Key": "send-1"}
    first = await api.post(f"{S}/chats/{chat}/messages", {"text": "hi"}, headers=key)
    again = await api.post(f"{S}/chats/{chat}/messages", {"text": "hi"}, headers=key)
    assert first[0] == 201 and again == first
    assert await _messages(api, chat) == ["hi"]
    other = await api.post(f"{S}/chats/{chat}/messages", {"text": "hi"})
    assert other[0] == 201 and other[1]["messageId"] != first[1]["messageId"]
    assert await _messages(api, chat) == ["hi", "hi"]


async def test_a_retried_create_answers_the_first_record_and_stores_nothing_new(api: Api) -> None:
    key = {"Idempotency-Key": "create-1"}
    first = await api.post(f"{S}/triggers", _record("a"), headers=key)
    again = await api.post(f"{S}/triggers", _record("a"), headers=key)
    assert first[0] == 201 and again == first
    assert await _written(api) == ["a"]
    other = await api.post(f"{S}/triggers", _record("a"))
    assert other[0] == 201 and other[1]["id"] != first[1]["id"]
    assert await _written(api) == ["a", "a"]


async def test_the_first_refusal_is_the_answer_of_its_retries(api: Api) -> None:
    trigger = await api.create_trigger()
    claim = {"triggerId": trigger["id"], "key": "2026-12-01T09:00:00.000Z", "term": 0}
    key = {"Idempotency-Key": "claim-1"}
    bad = await api.post(f"{S}/fires", {**claim, "peer": ""}, headers=key)
    assert bad[0] == 400
    assert await api.post(f"{S}/fires", {**claim, "peer": ""}, headers=key) == bad


async def test_a_key_reused_for_another_request_is_refused_naming_it(api: Api) -> None:
    key = {"Idempotency-Key": "k"}
    assert (await api.post(f"{S}/triggers", _record("a"), headers=key))[0] == 201
    status, body = await api.post(f"{S}/triggers", _record("b"), headers=key)
    assert status == 422 and body["error"] == "idempotency_key_reused", body
    assert "Idempotency-Key" in body["detail"]
    assert await _written(api) == ["a"]


async def test_a_bad_key_is_a_400_naming_the_header(api: Api) -> None:
    status, body = await api.post(
        f"{S}/triggers", _record("a"), headers={"Idempotency-Key": "x" * 256}
    )
    assert (
        status == 400 and body["error"] == "invalid_header" and "Idempotency-Key" in body["detail"]
    )
    assert await _written(api) == []


async def test_keys_are_per_token(api: Api) -> None:
    laptop = api.as_(await api.device_token("laptop"))
    key = {"Idempotency-Key": "same"}
    assert (await api.post(f"{S}/triggers", _record("a"), headers=key))[0] == 201
    assert (await laptop.post(f"{S}/triggers", _record("a"), headers=key))[0] == 201
    assert await _written(api) == ["a", "a"]


async def test_retries_in_flight_together_store_one(api: Api) -> None:
    key = {"Idempotency-Key": "burst"}
    answers = await asyncio.gather(
        *(api.post(f"{S}/triggers", _record("x"), headers=key) for _ in range(5))
    )
    assert len({a[1]["id"] for a in answers}) == 1
    assert await _written(api) == ["x"]


async def test_two_servers_on_one_database_answer_one_key_once(
    tmp_path: Path, aiohttp_client: Any, pg_dsn: str
) -> None:
    token_file = default_admin_token_file(tmp_path / "a.db")
    servers = []
    for name in ("a", "b"):
        app = create_app(tmp_path / f"{name}.db")
        store = await PostgresStore.open(pg_dsn)
        app[STORE] = store
        app.on_cleanup.append(lambda _, store=store: store.close())
        await store.ensure_admin_token(token_file)  # one admin token, in the one database
        servers.append(Api(await aiohttp_client(app), token_file.read_text().strip(), tmp_path))
    assert (await servers[0].post("/spaces", {"id": SPACE, "name": "Home"}))[0] == 201
    assert (await servers[1].post("/spaces", {"id": SPACE, "name": "Home"}))[0] == 409
    for n in range(5):
        key = {"Idempotency-Key": f"burst-{n}"}
        answers = await asyncio.gather(
            *(servers[i % 2].post(f"{S}/triggers", _record(f"x{n}"), headers=key) for i in range(6))
        )
        assert {a[0] for a in answers} == {201} and len({a[1]["id"] for a in answers}) == 1
    assert await _written(servers[1]) == [f"x{n}" for n in range(5)]


@pytest.mark.sqlite_only  # moves the fake clock; the prune is the SQLite file's (space.forget)
async def test_a_key_is_forgotten_after_a_day(api: Api, space_clock: FakeClock) -> None:
    chat = await _chat(api)
    key = {"Idempotency-Key": "old"}
    assert (await api.post(f"{S}/chats/{chat}/messages", {"text": "a"}, headers=key))[0] == 201
    space_clock.advance(23 * 3600)
    app = api.client.server.app
    assert app is not None
    await forget.prune(app)
    assert (await api.post(f"{S}/chats/{chat}/messages", {"text": "a"}, headers=key))[0] == 201
    assert await _messages(api, chat) == ["a"]
    space_clock.advance(2 * 3600)
    await forget.prune(app)
    assert (await api.post(f"{S}/chats/{chat}/messages", {"text": "a"}, headers=key))[0] == 201
    assert await _messages(api, chat) == ["a", "a"]
