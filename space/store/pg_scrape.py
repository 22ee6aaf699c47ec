"""The `/metrics` scrape on PostgreSQL: the twin of `scrape`'s SQL.

Owns the scrape's reads, in one repeatable-read transaction, devices judged at the
database's clock, and the accepted instants of messages (fire latency). What the families
say is `scrape`'s and `metrics`'. Must not know HTTP.
"""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg

from space import scrape
from space.servertime import iso
from space.store.pg_fires import lease_of


class PgScrape:
    """The scrape operations of `PostgresStore` (its pool)."""

    pool: asyncpg.Pool

    async def scrape(self) -> scrape.Scrape:
        async with self.pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
            now: datetime = await conn.fetchval("SELECT clock_timestamp()")
            spaces = await conn.fetch('SELECT id FROM spaces ORDER BY id COLLATE "C"')
            failed = await conn.fetch(
                "SELECT space, trigger_id, sum(count) FROM run_rollups WHERE status = ANY($1) "
                "GROUP BY space, trigger_id",
                scrape.failed_statuses(),
            )
            last = await conn.fetch(
                "SELECT DISTINCT ON (space, trigger_id) space, trigger_id, body FROM runs "
                "ORDER BY space, trigger_id, seq DESC"
            )
            devices = await conn.fetch(
                "SELECT space, peer, last_seen, stopped, status FROM devices "
                'ORDER BY space COLLATE "C", peer COLLATE "C"'
            )
            runs = await conn.fetch(
                "SELECT space, status, sum(count)::bigint FROM run_rollups GROUP BY space, status "
                'ORDER BY space COLLATE "C", status COLLATE "C"'
            )
            claims = await conn.fetch(
                'SELECT space, count(*) FROM fires GROUP BY space ORDER BY space COLLATE "C"'
            )
            held = await conn.fetch('SELECT * FROM leases ORDER BY space COLLATE "C"')
        return scrape.Scrape(
            now=now,
            spaces=[row["id"] for row in spaces],
            failed={(s, t): float(n) for s, t, n in failed},
            late=scrape.lateness_of((s, t, body) for s, t, body in last),
            devices=[tuple(row) for row in devices],
            runs=[(s, st, int(n)) for s, st, n in runs],
            fires=[(s, int(n)) for s, n in claims],
            held=[(row["space"], lease_of(row)) for row in held],
        )

    async def messages_accepted(self, message_ids: list[str]) -> dict[str, str | None]:
        rows = await self.pool.fetch(
            "SELECT message_id, created_ts FROM chat_messages WHERE message_id = ANY($1)",
            message_ids,
        )
        found = {r["message_id"]: iso(datetime.fromtimestamp(r["created_ts"], UTC)) for r in rows}
        return {key: found.get(key) for key in message_ids}
