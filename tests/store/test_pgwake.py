"""The PostgreSQL store's wake-ups across servers: a hint per append, a re-read after its
listener is killed, polling when it may not listen."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
from waiting import eventually

from space.change_log import Change
from space.store.pgwake import Wakes
from space.store.postgres import PostgresStore

SPACE = "home"
TOPIC = f"feed:{SPACE}"


@pytest.fixture
async def writer(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    store = await PostgresStore.open(pg_dsn)
    yield store
    await store.close()


async def _listener_pids(conn: asyncpg.Connection) -> list[int]:
    rows = await conn.fetch("SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN%'")
    return [r["pid"] for r in rows]


async def test_an_append_on_one_server_wakes_the_listener_of_another(
    pg_dsn: str, writer: PostgresStore
) -> None:
    woken: list[str | None] = []
    wakes = Wakes(pg_dsn, woken.append)
    wakes.start()
    try:
        await eventually(lambda: woken == [None], what="the re-read after connecting")
        seq = await writer.append_change(Change(SPACE, "t1", "create", 1, "{}", "at"))
        await eventually(lambda: TOPIC in woken, what="the hint of the append")
        assert woken == [None, TOPIC] and seq == 1
    finally:
        await wakes.stop()


async def test_a_killed_listener_reconnects_and_rereads_what_it_missed(
    pg_dsn: str, writer: PostgresStore
) -> None:
    woken: list[str | None] = []
    wakes = Wakes(pg_dsn, woken.append, poll_every=0.05, ping_every=0.5)  # a ping finds it too
    wakes.start()
    admin = await asyncpg.connect(pg_dsn)
    try:
        pids = await eventually(lambda: _listener_pids(admin), what="a listener connection")
        await admin.execute("SELECT pg_terminate_backend($1)", pids[0])
        await writer.append_change(Change(SPACE, "t1", "create", 1, "{}", "at"))  # perhaps unheard
        mark = len(woken)
        await eventually(lambda: wakes.connects == 2, what="the listener connecting again")
        assert None in woken[mark:]  # every cursor read again after the reconnect
        before = len(woken)
        await writer.append_change(Change(SPACE, "t1", "update", 2, "{}", "at"))
        await eventually(lambda: TOPIC in woken[before:], what="hints after the reconnect")
    finally:
        await admin.close()
        await wakes.stop()


async def test_poll_only_wakes_every_cursor_each_interval_without_listening(pg_dsn: str) -> None:
    woken: list[str | None] = []
    wakes = Wakes(pg_dsn, woken.append, listen=False, poll_every=0.02)
    wakes.start()
    admin = await asyncpg.connect(pg_dsn)
    try:
        await eventually(lambda: len(woken) >= 3, what="three polls")
        assert set(woken) == {None} and wakes.connects == 0
        assert await _listener_pids(admin) == []
    finally:
        await admin.close()
        await wakes.stop()
