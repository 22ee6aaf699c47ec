"""Devices and their heartbeats on PostgreSQL: the twin of `devices`'s and `history.beat`'s
SQL, by the database's clock.

Owns the devices' SQL on the PostgreSQL store (schema v5): a heartbeat takes a transaction
lock on its `(space, peer)`, so beats of one device through two servers apply one after the
other, reads `clock_timestamp()` once it holds it, writes the row by `devices.beaten` and,
in the same transaction, the device's window, the feed position it applied (noted when it
passed a revision) and its clock's offset (`history.offset_noted`). `live` is judged at the
database's `now`. Must not know HTTP.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from core.peerwire import HeartbeatIn
from space import devices, history
from space.servertime import iso

_UPSERT = (
    "INSERT INTO devices (space, peer, name, priority, last_seen, live_since, status, "
    "instance, stopped) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
    "ON CONFLICT (space, peer) DO UPDATE SET name = $3, priority = $4, last_seen = $5, "
    "live_since = $6, status = $7, instance = $8, stopped = $9"
)
_BY_PEER = "SELECT * FROM devices WHERE space = $1 AND peer = $2"


class PgDevices:
    """The device operations of `PostgresStore` (its pool)."""

    pool: asyncpg.Pool

    async def heartbeat(
        self, space: str, peer: str, beat: HeartbeatIn, window: float
    ) -> tuple[dict[str, Any], datetime]:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2, 0))", space, peer
            )
            now: datetime = await conn.fetchval("SELECT clock_timestamp()")
            old = await conn.fetchrow(_BY_PEER, space, peer)
            at = now.timestamp()
            new = devices.beaten(None if old is None else dict(old), peer, beat, at, window)
            await conn.execute(_UPSERT, space, peer, *new)
            await _window(conn, space, peer, new[3], at, beat)
            if beat.appliedSeq is not None:
                await _applied(conn, space, peer, new[3], at, beat.appliedSeq)
            if beat.offsetMs is not None:
                await _offset(conn, space, peer, new[3], at, beat.offsetMs)
            stored = dict(await conn.fetchrow(_BY_PEER, space, peer))
        return stored, now

    async def devices(self, space: str) -> tuple[list[dict[str, Any]], datetime]:
        async with self.pool.acquire() as conn, conn.transaction():
            now: datetime = await conn.fetchval("SELECT clock_timestamp()")
            rows = await conn.fetch(
                'SELECT * FROM devices WHERE space = $1 ORDER BY peer COLLATE "C"', space
            )
        return [dict(row) for row in rows], now

    async def last_seen(self, space: str, peer: str, window: float) -> tuple[bool, str | None]:
        row = await self.pool.fetchrow(
            "SELECT d.last_seen, d.stopped, clock_timestamp() AS now FROM (SELECT 1) AS one "
            "LEFT JOIN devices d ON d.space = $1 AND d.peer = $2",
            space,
            peer,
        )
        if row["last_seen"] is None:
            return False, None
        seen = datetime.fromtimestamp(row["last_seen"], UTC)
        live = row["now"] - seen <= timedelta(seconds=window) and not row["stopped"]
        return live, iso(seen)


async def _window(
    conn: asyncpg.Connection, space: str, peer: str, up_since: float, now: float, beat: HeartbeatIn
) -> None:
    """The window `up_since` begins (or goes on) up to `now` (`history.beat`)."""
    if up_since == now:
        await conn.execute(
            "INSERT INTO history_windows VALUES ($1, $2, $3, $3, $4, $5, 0) "
            "ON CONFLICT (space, peer, began) DO UPDATE SET last_seen = $3, stopped = $4, "
            "slept = $5, applied_seq = 0",
            space,
            peer,
            now,
            beat.stopped,
            beat.sleptSeconds,
        )
        return
    await conn.execute(
        "UPDATE history_windows SET last_seen = $4, stopped = $5 "
        "WHERE space = $1 AND peer = $2 AND began = $3",
        space,
        peer,
        up_since,
        now,
        beat.stopped,
    )


async def _applied(
    conn: asyncpg.Connection, space: str, peer: str, up_since: float, now: float, seq: int
) -> None:
    """When the device's applied feed position first passed a revision (only then)."""
    before = await conn.fetchval(
        "SELECT applied_seq FROM history_windows WHERE space = $1 AND peer = $2 AND began = $3",
        space,
        peer,
        up_since,
    )
    before = int(before or 0)
    if seq <= before:
        return
    await conn.execute(
        "UPDATE history_windows SET applied_seq = $4 WHERE space = $1 AND peer = $2 AND began = $3",
        space,
        peer,
        up_since,
        seq,
    )
    crossed = await conn.fetchval(
        "SELECT EXISTS (SELECT 1 FROM history_revisions WHERE space = $1 AND seq > $2 "
        "AND seq <= $3)",
        space,
        before,
        seq,
    )
    if crossed or before == 0:
        await conn.execute(
            "INSERT INTO history_applied VALUES ($1, $2, $3, $4)", space, peer, now, seq
        )


async def _offset(
    conn: asyncpg.Connection, space: str, peer: str, up_since: float, now: float, ms: float
) -> None:
    """The device's clock offset: the first of its window, then only when it moved."""
    last = await conn.fetchval(
        "SELECT offset_ms FROM history_offsets WHERE space = $1 AND peer = $2 AND at >= $3 "
        "ORDER BY at DESC LIMIT 1",
        space,
        peer,
        up_since,
    )
    if history.offset_noted(last, ms):
        await conn.execute(
            "INSERT INTO history_offsets VALUES ($1, $2, $3, $4)", space, peer, now, ms
        )
