"""Published programs on PostgreSQL: the twin of `programs`'s SQL, by the database's clock.

Owns the programs' SQL on the PostgreSQL store (schema v6). A publication is
`INSERT … ON CONFLICT DO NOTHING`, so of servers publishing one `name@vN` at once one
stores it and the others answer its row untouched; before it, a device's first publication
is checked against the space's records (`programs.not_for_others`). `createdAt` is the
database's `clock_timestamp()`. What is checked and shown is `programs`'s. Must not know
HTTP beyond the refusal `not_for_others` raises.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from space import programs, record_view
from space.programs import Publication
from space.servertime import iso

_FIND = "SELECT * FROM programs WHERE space = $1 AND name = $2 AND version = $3"
_INSERT = (
    "INSERT INTO programs (space, name, version, source, sha256, any_tool, created_at, "
    "publisher) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING RETURNING *"
)


class PgPrograms:
    """The program operations of `PostgresStore` (its pool)."""

    pool: asyncpg.Pool

    async def publish_program(self, pub: Publication) -> tuple[dict[str, Any], bool]:
        async with self.pool.acquire() as conn, conn.transaction():
            existing = await conn.fetchrow(_FIND, pub.space, pub.name, pub.version)
            if existing is not None:
                return dict(existing), False
            if pub.device is not None:
                rows = await conn.fetch("SELECT id, body FROM triggers WHERE space = $1", pub.space)
                programs.not_for_others([record_view.flagged(*tuple(r)) for r in rows], pub)
            now = iso(await conn.fetchval("SELECT clock_timestamp()"))
            made = await conn.fetchrow(_INSERT, *programs.row_of(pub), now, pub.publisher)
            if made is None:  # published by another server meanwhile
                return dict(await conn.fetchrow(_FIND, pub.space, pub.name, pub.version)), False
        return dict(made), True

    async def program(self, space: str, name: str, version: int) -> dict[str, Any] | None:
        row = await self.pool.fetchrow(_FIND, space, name, version)
        return None if row is None else dict(row)

    async def programs(self, space: str) -> list[dict[str, Any]]:
        rows = await self.pool.fetch(
            'SELECT * FROM programs WHERE space = $1 ORDER BY name COLLATE "C", version', space
        )
        return [dict(row) for row in rows]
