"""The chat stream over a real socket: hello, live messages, heartbeats, resume, gaps, shutdown."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from chats_support import Event, FakeClock, Space, SseReader, start_space
from waiting import eventually

from space.chats import TOPICS
from space.streams import STREAMS

DEADLINE = 5
BOTH_STORES = True  # the stream reads the chat through the store seam


@pytest.fixture
async def space(aiohttp_client: Any, tmp_path: Path, store_dsn: str | None) -> Space:
    return await start_space(aiohttp_client, tmp_path / "space.db", FakeClock(), store_dsn)


async def next_event(reader: SseReader) -> Event:
    async with asyncio.timeout(DEADLINE):
        ev = await reader.next()
    assert ev is not None, "stream ended"
    return ev


async def messages(reader: SseReader, n: int) -> list[dict]:
    """The next `n` events, which must all be messages whose `id` is their seq."""
    got = []
    for _ in range(n):
        ev = await next_event(reader)
        assert ev.event == "message", ev
        body = json.loads(ev.text)
        assert ev.id == str(body["seq"])
        got.append(body)
    return got


async def hello(reader: SseReader) -> Event:
    ev = await next_event(reader)
    assert ev.event == "hello", ev
    return ev


async def test_hello_carries_the_cursor_then_live_messages_follow(space: Space) -> None:
    await space.send("old 1")
    await space.send("old 2")
    async with space.stream() as reader:
        ev = await hello(reader)
        assert (ev.id, json.loads(ev.text)) == ("2", {"cursor": 2})
        sent = await space.send("new", agent={"name": "triage", "done": True})
        assert await messages(reader, 1) == [sent]


async def test_hello_on_an_empty_chat(space: Space) -> None:
    async with space.stream() as reader:
        ev = await hello(reader)
        assert (ev.id, json.loads(ev.text)) == ("0", {"cursor": 0})


async def test_stream_headers(space: Space) -> None:
    async with space.stream() as reader:
        headers = reader.response.headers
        assert headers["Cache-Control"] == "no-cache"
        assert headers["X-Accel-Buffering"] == "no"


async def test_heartbeat_comments_while_idle(
    aiohttp_client: Any, tmp_path: Path, store_dsn: str | None
) -> None:
    space = await start_space(
        aiohttp_client, tmp_path / "s.db", FakeClock(), store_dsn, heartbeat=0.05
    )
    async with space.stream() as reader:
        await hello(reader)
        async with asyncio.timeout(DEADLINE):
            ev = await reader.next(comments=True)
        assert ev is not None and ev.comment == "ping"
        sent = await space.send("after a ping")
        assert await messages(reader, 1) == [sent]


async def test_resume_after_a_server_side_drop_loses_and_repeats_nothing(space: Space) -> None:
    async with space.stream() as reader:
        await hello(reader)
        first = [await space.send(f"a{i}") for i in range(3)]
        assert await messages(reader, 3) == first
        space.app[STREAMS].close_all("test drop")
        async with asyncio.timeout(DEADLINE):
            assert await reader.until_end() == []
    missed = [await space.send(f"b{i}") for i in range(2)]
    async with space.stream(last_id="3") as reader:
        ev = await hello(reader)
        assert (ev.id, json.loads(ev.text)) == ("3", {"cursor": 5})
        assert await messages(reader, 2) == missed
        live = await space.send("c")
        assert await messages(reader, 1) == [live]


async def test_resume_after_a_client_abort(space: Space) -> None:
    async with space.stream() as reader:
        await hello(reader)
        first = await space.send("a")
        assert await messages(reader, 1) == [first]
    missed = await space.send("b")
    async with space.stream(last_id="1") as reader:
        await hello(reader)
        assert await messages(reader, 1) == [missed]


async def test_resume_after_a_server_restart_on_the_same_file(
    aiohttp_client: Any, tmp_path: Path, store_dsn: str | None
) -> None:
    clock, db = FakeClock(), tmp_path / "space.db"
    first = await start_space(aiohttp_client, db, clock, store_dsn)
    async with first.stream() as reader:
        await hello(reader)
        before = [await first.send(f"a{i}") for i in range(2)]
        assert await messages(reader, 2) == before
        await first.client.server.close()
        async with asyncio.timeout(DEADLINE):
            assert await reader.until_end() == []
    second = await start_space(aiohttp_client, db, clock, store_dsn)
    assert second.chat == first.chat
    after = [await second.send(f"b{i}") for i in range(3)]
    assert [m["seq"] for m in after] == [3, 4, 5]
    async with second.stream(last_id="2") as reader:
        ev = await hello(reader)
        assert (ev.id, json.loads(ev.text)) == ("2", {"cursor": 5})
        assert await messages(reader, 3) == after
        live = await second.send("c")
        assert await messages(reader, 1) == [live]


@pytest.mark.sqlite_only  # moves the fake clock (the window is the store's clock)
async def test_messages_older_than_the_window_are_a_gap_never_replayed(space: Space) -> None:
    await space.send("old 1")
    await space.send("old 2")
    space.clock.advance(121)
    recent = await space.send("recent")
    async with space.stream(last_id="0") as reader:
        ev = await hello(reader)
        assert (ev.id, json.loads(ev.text)) == ("0", {"cursor": 3})
        gap = await next_event(reader)
        assert gap.event == "gap" and gap.id == "2"
        assert json.loads(gap.text) == {"from": 1, "to": 2, "skipped": 2, "reason": "window"}
        assert await messages(reader, 1) == [recent]


@pytest.mark.sqlite_only  # moves the fake clock (the window is the store's clock)
async def test_no_gap_when_resuming_within_the_window(space: Space) -> None:
    await space.send("a")
    space.clock.advance(119)
    b = await space.send("b")
    async with space.stream(last_id="1") as reader:
        await hello(reader)
        assert await messages(reader, 1) == [b]
        space.clock.advance(1000)
        live = await space.send("live")
        assert await messages(reader, 1) == [live]


@pytest.mark.sqlite_only  # moves the fake clock (the window is the store's clock)
async def test_the_window_is_configurable(
    aiohttp_client: Any, tmp_path: Path, store_dsn: str | None
) -> None:
    space = await start_space(aiohttp_client, tmp_path / "s.db", FakeClock(), store_dsn, window=10)
    await space.send("a")
    space.clock.advance(11)
    async with space.stream(last_id="0") as reader:
        await hello(reader)
        gap = await next_event(reader)
        assert gap.event == "gap" and json.loads(gap.text)["skipped"] == 1


@pytest.mark.parametrize("last_id", ["99", "abc", "-1", ""])
async def test_an_id_this_chat_never_sent_is_reported_and_the_stream_goes_on(
    space: Space, last_id: str
) -> None:
    await space.send("a")
    async with space.stream(last_id=last_id) as reader:
        ev = await hello(reader)
        assert (ev.id, json.loads(ev.text)) == ("1", {"cursor": 1})
        gap = await next_event(reader)
        assert gap.event == "gap" and gap.id == "1"
        assert json.loads(gap.text) == {
            "reason": "unknown_cursor",
            "skipped": 0,
            "lastEventId": last_id,
        }
        live = await space.send("b")
        assert await messages(reader, 1) == [live]


async def test_subscribers_joining_during_a_burst_each_see_every_message_once(
    space: Space,
) -> None:
    """Posts race with connects and resumes: each stream sees a gapless run, no repeat."""
    total = 60

    async def subscriber(last_id: str | None) -> list[int]:
        async with space.stream(last_id=last_id) as reader:
            start = int((await hello(reader)).id or 0)
            seqs = [m["seq"] for m in await messages(reader, total - start)]
            assert seqs == list(range(start + 1, total + 1))
            return seqs

    async def burst() -> None:
        for i in range(total):
            await space.send(f"m{i}")

    await space.send("m first")
    total += 1
    results = await asyncio.gather(burst(), *(subscriber(lid) for lid in (None, "0", "1") * 3))
    assert all(seqs[-1] == total for seqs in results[1:])


async def test_shutdown_ends_every_stream_cleanly(space: Space) -> None:
    async with space.stream() as a, space.stream() as b, space.stream() as c:
        for reader in (a, b, c):
            await hello(reader)
        assert len(space.app[STREAMS]) == 3
        await space.client.server.close()
        async with asyncio.timeout(DEADLINE):
            for reader in (a, b, c):
                assert await reader.until_end() == []
    assert len(space.app[STREAMS]) == 0


async def test_a_client_that_leaves_is_unsubscribed_by_the_next_heartbeat(
    aiohttp_client: Any, tmp_path: Path, store_dsn: str | None
) -> None:
    space = await start_space(
        aiohttp_client, tmp_path / "s.db", FakeClock(), store_dsn, heartbeat=0.05
    )
    async with space.stream() as reader:
        await hello(reader)
        assert space.app[TOPICS].count(space.chat) == 1
    await eventually(
        lambda: not space.app[TOPICS].count(space.chat) and not space.app[STREAMS], DEADLINE
    )
    assert (await space.send("nobody listens"))["seq"] == 1
