"""Three space servers on one PostgreSQL database, over HTTP (SPEC "Beyond one machine").

Claims of one key spread across the servers have one winner and none commits under a term
being replaced; every change written through any server reaches a change stream on every
server once, in order: woken by the listener, after the listener is killed, and polling
alone (`listen=False`); a chat message posted on A is streamed by B and resumed on C.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from chats_support import SseReader
from servers_support import CRON, SPACE, Feed, Server, start_servers
from waiting import eventually

from space.app import create_app
from space.opening import PgOptions
from space.store import STORE

E = f"/spaces/{SPACE}/election"
F = f"/spaces/{SPACE}/fires"
T = f"/spaces/{SPACE}/triggers"
# changes per writer: 250 (2,000 in all) takes 17-23 s on 2 busy cores; the 1,000
# (BATON_FEED_WRITES=1000, 8,000 in all) passed in 66 s there
WRITES = int(os.environ.get("BATON_FEED_WRITES", "250"))


@pytest.fixture
async def servers(pg_dsn: str, tmp_path: Path) -> AsyncIterator[list[Server]]:
    made = await start_servers(pg_dsn, tmp_path)
    yield made
    for server in made:
        await server.close()


async def test_a_server_on_postgresql_makes_no_file_but_its_admin_token(
    pg_dsn: str, tmp_path: Path
) -> None:
    token_file = tmp_path / "admin.token"
    runners = []
    for _ in range(2):  # the first mints the file's token, the second accepts it
        runner = web.AppRunner(create_app(pg_dsn, admin_token_file=token_file))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
    try:
        assert [p.name for p in tmp_path.iterdir()] == ["admin.token"]
        assert token_file.stat().st_mode & 0o777 == 0o600
        token = token_file.read_text().strip()
        async with aiohttp.ClientSession() as session:
            for runner in runners:
                url = f"http://127.0.0.1:{runner.addresses[0][1]}"
                async with session.get(f"{url}/healthz") as resp:
                    assert resp.status == 200 and await resp.json() == {"status": "ok"}
                auth = {"Authorization": f"Bearer {token}"}
                async with session.get(f"{url}/v1/tokens", headers=auth) as resp:
                    assert resp.status == 200
                    roles = [t["role"] for t in (await resp.json())["tokens"]]
                    assert roles == ["admin"]  # one token, minted once
    finally:
        for runner in runners:
            await runner.cleanup()


async def test_without_a_free_connection_healthz_and_requests_answer_503(
    pg_dsn: str, tmp_path: Path
) -> None:
    pg = PgOptions(pool_size=2, acquire_s=0.5)
    (server,) = await start_servers(pg_dsn, tmp_path, 1, pg=pg)
    pool = server.app[STORE].pool.pool  # the asyncpg pool under the bounded one
    held = [await pool.acquire() for _ in range(2)]
    try:
        began = time.monotonic()
        async with server.session.get(f"{server.url}/healthz") as resp:
            body = await resp.json()
        assert resp.status == 503 and resp.headers["Retry-After"] == "5"
        assert body["status"] == "storage_unavailable" and body["storage"] == "stalled"
        assert set(body) == {"status", "storage", "detail", "since", "stalledFor"}
        assert time.monotonic() - began < 5.0
        status, body = await server.call("GET", "/tokens")
        assert status == 503 and body["error"] == "storage_unavailable"
        assert body["fault"] == "stalled" and "no database connection" in body["detail"]
    finally:
        for conn in held:
            await pool.release(conn)
        await server.close()
    (again,) = await start_servers(pg_dsn, tmp_path, 1, pg=pg)
    try:
        status, _ = await again.call("GET", "/tokens")
        assert status == 200
    finally:
        await again.close()


async def _hold_lease(server: Server, peer: str = "laptop") -> int:
    status, lease = await server.post(f"{E}/claim", {"peer": peer, "term": 0})
    assert status == 200, lease
    return int(lease["term"])


async def test_50_claims_of_one_key_across_three_servers_have_one_winner(
    servers: list[Server],
) -> None:
    a = servers[0]
    status, trigger = await a.post(T, CRON)
    assert status == 201, trigger
    term = await _hold_lease(servers[1])
    fire = {"triggerId": trigger["id"], "key": trigger["activeSince"], "term": term}
    results = await asyncio.gather(
        *(servers[n % 3].post(F, {**fire, "peer": "laptop"}) for n in range(50))
    )
    statuses = [status for status, _ in results]
    assert statuses.count(201) == 1, results
    assert {body["error"] for status, body in results if status != 201} == {"already_claimed"}
    for server in servers:  # each server shows the one claim
        status, listed = await server.call("GET", F)
        assert [(f["key"], f["peer"], f["term"]) for f in listed["fires"]] == [
            (trigger["activeSince"], "laptop", term)
        ]


async def test_no_claim_commits_under_a_term_being_replaced(servers: list[Server]) -> None:
    a, b, c = servers
    status, trigger = await a.post(T, CRON)
    assert status == 201
    term = await _hold_lease(b)
    fire = {"triggerId": trigger["id"], "key": trigger["activeSince"], "term": term}

    async def hand_over() -> None:
        handover = {"peer": "laptop", "term": term, "to": "phone"}
        status, lease = await b.post(f"{E}/handover", handover)
        assert status == 200 and lease["term"] == term + 1, lease

    async def claim(n: int) -> tuple[int, dict]:
        return await servers[n % 3].post(F, {**fire, "peer": "laptop"})

    sent = [asyncio.ensure_future(claim(n)) for n in range(50)]
    await hand_over()
    late = [asyncio.ensure_future(claim(n)) for n in range(50, 60)]  # after the handover
    early = await asyncio.gather(*sent)
    after = await asyncio.gather(*late)
    assert all(status != 201 for status, _ in after), after  # term `term` is gone
    assert {body["error"] for status, body in after} <= {"stale_term", "already_claimed"}
    won = [body for status, body in early if status == 201]
    assert len(won) <= 1
    status, body = await c.post(F, {**fire, "term": term + 1, "peer": "phone"})
    if won:  # laptop's claim committed while its term held: the key stays taken
        assert won[0]["term"] == term and status == 409 and body["error"] == "already_claimed"
    else:
        assert status == 201, body
    status, listed = await a.call("GET", F)
    assert len(listed["fires"]) == 1  # exactly one winner over both terms


async def _write(server: Server, writer: int, count: int) -> None:
    status, record = await server.post(T, {**CRON, "name": f"w{writer}"})
    assert status == 201, record
    for i in range(1, count):
        status, body = await server.call("PATCH", f"{T}/{record['id']}", {"name": f"w{writer}-{i}"})
        assert status == 200, body


async def _feeds_see_every_seq(
    servers: list[Server], writers: int, count: int, *, kill_listeners: str = ""
) -> list[Feed]:
    feeds = [Feed(server).start() for server in servers]
    for feed in feeds:
        await asyncio.wait_for(feed.ready.wait(), 10)
    total = writers * count
    jobs = [asyncio.ensure_future(_write(servers[w % 3], w, count)) for w in range(writers)]
    if kill_listeners:
        await eventually(lambda: min(len(f.seqs) for f in feeds) >= total // 4, 30)
        killed = await _terminate_listeners(kill_listeners)
        assert killed == len(servers)
    await asyncio.gather(*jobs)
    expected = list(range(1, total + 1))
    for feed in feeds:
        await eventually(lambda f=feed: len(f.seqs) >= total, 30, what="every change streamed")
        assert feed.seqs == expected  # each seq once, in order, on every server
    for feed in feeds:
        await feed.stop()
    return feeds


async def _terminate_listeners(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE query LIKE 'LISTEN %' AND pid <> pg_backend_pid()"
        )
    finally:
        await conn.close()
    return len(rows)


async def test_8_writers_changes_reach_a_feed_on_every_server_once_in_order(
    servers: list[Server],
) -> None:
    await _feeds_see_every_seq(servers, 8, WRITES)


async def test_the_listener_killed_loses_no_change(servers: list[Server], pg_dsn: str) -> None:
    await _feeds_see_every_seq(servers, 8, WRITES // 2, kill_listeners=pg_dsn)
    for server in servers:
        assert server.wakes.connects >= 2  # it listened again


async def test_polling_alone_every_change_reaches_every_feed(pg_dsn: str, tmp_path: Path) -> None:
    made = await start_servers(pg_dsn, tmp_path, pg=PgOptions(listen=False, poll_every=0.2))
    try:
        await _feeds_see_every_seq(made, 8, WRITES // 2)
        assert all(server.wakes.connects == 0 for server in made)
    finally:
        for server in made:
            await server.close()


async def test_a_feed_resumes_on_another_server_with_last_event_id(servers: list[Server]) -> None:
    a, b, c = servers
    await _write(a, 0, 5)
    first = Feed(b).start()
    await eventually(lambda: len(first.seqs) >= 5, 10)
    await first.stop()
    await _write(a, 1, 5)
    resumed = Feed(c).start(last_id=str(first.seqs[2]))
    await eventually(lambda: len(resumed.seqs) >= 7, 10)
    await resumed.stop()
    assert resumed.seqs == list(range(4, 11))


async def test_a_message_posted_on_a_is_streamed_by_b_and_resumed_on_c(
    servers: list[Server],
) -> None:
    a, b, c = servers
    status, chat = await a.post(f"/spaces/{SPACE}/chats", {"name": "kitchen"})
    assert status == 201, chat
    url = f"/v1/spaces/{SPACE}/chats/{chat['objectId']}"
    headers = b.headers(Accept="text/event-stream")
    async with b.session.get(f"{b.url}{url}/stream", headers=headers) as resp:
        assert resp.status == 200
        reader = SseReader(resp)
        hello = await asyncio.wait_for(reader.next(), 10)
        assert hello is not None and hello.event == "hello"
        for text in ("one", "two", "three"):
            status, _ = await a.post(f"{url[3:]}/messages", {"text": text})
            assert status == 201
        got = [await asyncio.wait_for(reader.next(), 10) for _ in range(3)]
    assert [e.id for e in got if e is not None] == ["1", "2", "3"]
    headers = {**c.headers(Accept="text/event-stream"), "Last-Event-ID": "1"}
    async with c.session.get(f"{c.url}{url}/stream", headers=headers) as resp:
        reader = SseReader(resp)
        events = [await asyncio.wait_for(reader.next(), 10) for _ in range(3)]
    assert [(e.event, e.id) for e in events if e is not None][1:] == [
        ("message", "2"),
        ("message", "3"),
    ]


async def test_a_database_connection_lost_under_a_request_is_a_503_never_a_500(
    servers: list[Server], pg_dsn: str
) -> None:
    a = servers[0]
    await _hold_lease(a)
    conn = await asyncpg.connect(pg_dsn)
    try:
        async with conn.transaction():  # the lease row locked: A's next change waits for it
            await conn.execute("SELECT 1 FROM leases WHERE space = $1 FOR UPDATE", SPACE)
            claim = asyncio.ensure_future(a.post(f"{E}/claim", {"peer": "laptop", "term": 1}))
            waiting = "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            pid = await eventually(lambda: conn.fetchval(waiting), 10, what="A's claim waits")
            assert await conn.fetchval("SELECT pg_terminate_backend($1)", pid)
            status, body = await claim
    finally:
        await conn.close()
    assert status == 503, body
    assert (body["error"], body["fault"]) == ("storage_unavailable", "unavailable")
    await eventually(lambda: _renews(a), 10, what="the pool connects again")


async def _renews(server: Server) -> bool:
    status, _ = await server.post(f"{E}/claim", {"peer": "laptop", "term": 1})
    return status == 200


async def test_an_agent_reply_edited_on_a_is_updated_on_every_servers_stream_in_order(
    servers: list[Server],
) -> None:
    a, b, _ = servers
    status, chat = await a.post(f"/spaces/{SPACE}/chats", {"name": "kitchen"})
    assert status == 201, chat
    path = f"/spaces/{SPACE}/chats/{chat['objectId']}"
    async with AsyncExitStack() as stack:
        readers = []
        for server in (a, b):  # a stream on the editing server and one on another
            headers = server.headers(Accept="text/event-stream")
            resp = await stack.enter_async_context(
                server.session.get(f"{server.url}/v1{path}/stream", headers=headers)
            )
            readers.append(SseReader(resp))
            hello = await asyncio.wait_for(readers[-1].next(), 10)
            assert hello is not None and hello.event == "hello"
        agent = {"name": "chat-watch", "done": False}
        status, sent = await a.post(f"{path}/messages", {"text": "Hel", "agent": agent})
        assert status == 201, sent
        for reader in readers:
            assert await _next(reader) == ("message", "Hel")
        for text, done in (("Hello", False), ("Hello there", True)):  # a reply growing on A
            edit = {"text": text, "done": done}
            status, _ = await a.call("PATCH", f"{path}/messages/{sent['messageId']}", edit)
            assert status == 200
            for reader in readers:  # B's stream too, told by A's NOTIFY
                assert await _next(reader) == ("update", text)
        status, _ = await a.post(f"{path}/messages", {"text": "after"})
        for reader in readers:  # and no update twice
            assert await _next(reader) == ("message", "after")


async def _next(reader: SseReader) -> tuple[str | None, str]:
    event = await asyncio.wait_for(reader.next(), 10)
    assert event is not None
    return event.event, json.loads(event.text)["text"]
