"""Spaces and programs' state on PostgreSQL: the twins of `spaces`' and `state`'s SQL.

Owns the SQL of the `spaces` and `state` tables (schema v8) on the PostgreSQL store. A
space and its general chat are one transaction; two servers creating one space at once
give one 201 and one 409 (the primary key, `ON CONFLICT DO NOTHING`). `identify` judges a
token and finds the route's space in one statement (every space request makes it). A
state PUT replaces the value, the last write winning, stamped by the database's clock.
Must not know HTTP beyond the refusals `spaces` words.
"""

from __future__ import annotations

from datetime import datetime

import asyncpg

from core.wire import Space
from space import chat_store, spaces, token_store
from space.servertime import iso
from space.store.pg_chats import insert_chat
from space.token_store import Principal

_NOW = "extract(epoch FROM clock_timestamp())::float8"
_ISO = """to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')"""
_IDENTIFY = (
    f"SELECT *, {_NOW} AS now, EXISTS (SELECT 1 FROM spaces WHERE id = $2) AS space_found "
    "FROM tokens WHERE hash = $1"
)


class PgSpaces:
    """The space and state operations of `PostgresStore` (its pool)."""

    pool: asyncpg.Pool

    async def create_space(self, space: str, name: str) -> Space:
        async with self.pool.acquire() as conn, conn.transaction():
            now: datetime = await conn.fetchval("SELECT now()")
            chat = chat_store.new_chat(space, spaces.GENERAL_CHAT_NAME, now.timestamp())
            row = await conn.fetchrow(
                "INSERT INTO spaces (id, name, general_chat, created_at) "
                "VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING *",
                space,
                name,
                chat.objectId,
                iso(now),
            )
            if row is None:
                raise spaces.taken(space)
            await insert_chat(conn, chat)
        return spaces.space_of(row)

    async def spaces(self, only: str | None = None) -> list[Space]:
        rows = await self.pool.fetch(
            'SELECT * FROM spaces WHERE $1::text IS NULL OR id = $1 ORDER BY id COLLATE "C"', only
        )
        return [spaces.space_of(row) for row in rows]

    async def space_exists(self, space: str) -> bool:
        return bool(
            await self.pool.fetchval("SELECT EXISTS (SELECT 1 FROM spaces WHERE id = $1)", space)
        )

    async def identify(self, token: str, space: str) -> tuple[Principal, bool]:
        """`PgTokens.lookup_token` with the space's existence in the same statement."""
        row = await self.pool.fetchrow(_IDENTIFY, token_store.token_hash(token), space)
        stored = None if row is None else dict(row)
        who = token_store.judge(stored, 0.0 if stored is None else stored["now"])
        if stored is not None and token_store.touched(stored, stored["now"]):
            await self.pool.execute(
                "UPDATE tokens SET last_used_at = $2 WHERE hash = $1", stored["hash"], stored["now"]
            )
        return who, stored is not None and bool(stored["space_found"])

    async def state(self, space: str, trigger_id: str, key: str) -> tuple[str, str] | None:
        row = await self.pool.fetchrow(
            "SELECT value, updated_at FROM state WHERE space = $1 AND trigger_id = $2 AND key = $3",
            space,
            trigger_id,
            key,
        )
        return None if row is None else (row[0], row[1])

    async def put_state(self, space: str, trigger_id: str, key: str, value: str) -> str:
        at: str = await self.pool.fetchval(
            "INSERT INTO state (space, trigger_id, key, value, updated_at) "
            f"VALUES ($1, $2, $3, $4, {_ISO}) ON CONFLICT (space, trigger_id, key) "
            "DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at "
            "RETURNING updated_at",
            space,
            trigger_id,
            key,
            value,
        )
        return at
