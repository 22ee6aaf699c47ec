"""Several servers on one database serve one chat's stream: what another server wrote is
read by seq, after a wake (`chat_stream.wake`, what PostgreSQL's NOTIFY turns into) or when
a live message skips ahead, and a stream resumes on a third server with `Last-Event-ID`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from chats_support import FakeClock, SseReader, start_space

from space import chat_stream
from space.chats import TOPICS

BOTH_STORES = True  # on SQLite: servers on one file; on PostgreSQL: on one database
DEADLINE = 5


async def _messages(reader: SseReader, n: int) -> list[dict]:
    got = []
    async with asyncio.timeout(DEADLINE):
        for _ in range(n):
            ev = await reader.next()
            assert ev is not None and ev.event == "message", ev
            assert ev.id == str(json.loads(ev.text)["seq"])
            got.append(json.loads(ev.text))
    return got


async def _hello(reader: SseReader) -> tuple[str | None, dict]:
    async with asyncio.timeout(DEADLINE):
        ev = await reader.next()
    assert ev is not None and ev.event == "hello", ev
    return ev.id, json.loads(ev.text)


async def test_a_message_posted_on_one_server_is_streamed_by_another_and_resumed_on_a_third(
    aiohttp_client: Any, tmp_path: Path, store_dsn: str | None
) -> None:
    clock, db = FakeClock(), tmp_path / "space.db"
    a, b = [await start_space(aiohttp_client, db, clock, store_dsn) for _ in range(2)]
    assert a.chat == b.chat
    async with b.stream() as reader:
        assert await _hello(reader) == ("0", {"cursor": 0})
        on_a = [await a.send(f"on a {n}") for n in range(3)]
        assert chat_stream.wake(b.app[TOPICS], b.chat) == 1
        assert await _messages(reader, 3) == on_a
        on_b = await b.send("on b")  # its own: the next seq, as published
        assert await _messages(reader, 1) == [on_b]
        unwoken = await a.send("on a, no wake")
        skipping = await b.send("on b again")  # past the next seq: read by seq
        assert await _messages(reader, 2) == [unwoken, skipping]
        chat_stream.wake(b.app[TOPICS], b.chat)  # nothing new: nothing sent
        after = await b.send("last")
        assert await _messages(reader, 1) == [after]
    c = await start_space(aiohttp_client, db, clock, store_dsn)
    async with c.stream(last_id="4") as reader:
        assert await _hello(reader) == ("4", {"cursor": 7})
        assert await _messages(reader, 3) == [unwoken, skipping, after]
