"""Spaces and a `/metrics` scrape on PostgreSQL: the twins of `spaces`' and `scrape`'s SQL.

Owns the `spaces` table's SQL on the PostgreSQL store (schema v9): a space and its general
chat are one transaction, and of servers creating one id at once one creates it
(`INSERT … ON CONFLICT DO NOTHING`), the others answer 409. Owns the scrape's reads too, in
one repeatable-read transaction, devices judged at the database's clock. What a space is
and what the families say is `spaces`', `scrape`'s and `metrics`'. Must not know HTTP
beyond raising `Refusal`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg

from space import chat_store, scrape
from space.http import Refusal
from space.servertime import iso
from space.spaces import GENERAL_CHAT_NAME
from space.store.pg_fires import lease_of

_SPACES = 'SELECT * FROM spaces WHERE $1::text IS NULL OR id = $1 ORDER BY id COLLATE "C"'


class PgSpaces:
    """The spaces and scrape operations of `PostgresStore` (its pool)."""

    pool: asyncpg.Pool

    async def create_space(self, space: str, name: str) -> dict[str, Any]:
        async with self.pool.acquire() as conn, conn.transaction():
            now: datetime = await conn.fetchval("SELECT clock_timestamp()")
            chat = chat_store.new_chat(space, GENERAL_CHAT_NAME, now.timestamp())
            made = await conn.fetchrow(
                "INSERT INTO spaces VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING *",
                space,
                name or space,
                chat.objectId,
                iso(now),
            )
            if made is None:
                raise Refusal(409, "space_exists", f"space {space!r} already exists")
            await conn.execute(
                "INSERT INTO chats (object_id, space, name, created_at) VALUES ($1, $2, $3, $4)",
                chat.objectId,
                space,
                GENERAL_CHAT_NAME,
                chat.createdAt,
            )
        return dict(made)

    async def space_rows(self, space: str | None = None) -> list[dict[str, Any]]:
        return [dict(row) for row in await self.pool.fetch(_SPACES, space)]

    async def space_exists(self, space: str) -> bool:
        found = await self.pool.fetchval("SELECT 1 FROM spaces WHERE id = $1", space)
        return found is not None

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
