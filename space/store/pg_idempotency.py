"""`Idempotency-Key` answers on PostgreSQL: a key reserved by the first request, whichever
server it reached.

Owns the `idempotency` table's SQL on the PostgreSQL store. The first request with a key
inserts its row being answered (status 0, `INSERT … ON CONFLICT DO NOTHING`: of two servers
one wins), then keeps its answer there or frees the key; a request finding the row being
answered waits for it (polling every `POLL_S`) and replays it, or 422s when it answered
another request, as a retry on the same server does. A reservation older than `LAPSE_S`
(its server died answering) is taken over. Must not know HTTP.
"""

from __future__ import annotations

import asyncio

import asyncpg

from space.store.logwire import Kept

POLL_S = 0.02
LAPSE_S = 60.0
_NOW = "extract(epoch FROM clock_timestamp())"
_RESERVE = (
    "INSERT INTO idempotency (owner, key, digest, status, content_type, headers, body, at) "
    f"VALUES ($1, $2, $3, 0, '', '{{}}', '', {_NOW}) ON CONFLICT DO NOTHING RETURNING 1"
)
_TAKE_OVER = (
    f"UPDATE idempotency SET digest = $3, at = {_NOW} WHERE owner = $1 AND key = $2 "
    f"AND status = 0 AND at < {_NOW} - $4::float8 RETURNING 1"
)


class PgIdempotency:
    """The idempotency keys' operations of `PostgresStore`."""

    pool: asyncpg.Pool

    async def kept_answer(self, owner: str, key: str, digest: str) -> Kept | None:
        while True:
            if await self.pool.fetchval(_RESERVE, owner, key, digest) is not None:
                return None  # reserved: this request answers it
            row = await self.pool.fetchrow(
                "SELECT digest, status, content_type, headers, body FROM idempotency "
                "WHERE owner = $1 AND key = $2",
                owner,
                key,
            )
            if row is None:
                continue  # freed meanwhile: reserve it again
            kept = Kept(
                digest=row["digest"],
                status=row["status"],
                content_type=row["content_type"],
                headers=row["headers"],
                body=bytes(row["body"]),
            )
            if kept.status != 0 or kept.digest != digest:
                return kept  # answered, or another request's: `idempotency.replayed` judges
            if await self.pool.fetchval(_TAKE_OVER, owner, key, digest, LAPSE_S) is not None:
                return None  # its server died answering it
            await asyncio.sleep(POLL_S)  # being answered on another server: wait for it

    async def keep_answer(self, owner: str, key: str, kept: Kept) -> None:
        await self.pool.execute(
            "INSERT INTO idempotency AS i VALUES ($1, $2, $3, $4, $5, $6, $7, "
            f"{_NOW}) ON CONFLICT (owner, key) DO UPDATE SET digest = $3, status = $4, "
            "content_type = $5, headers = $6, body = $7, at = excluded.at",
            owner,
            key,
            kept.digest,
            kept.status,
            kept.content_type,
            kept.headers,
            kept.body,
        )

    async def drop_key(self, owner: str, key: str) -> None:
        await self.pool.execute(
            "DELETE FROM idempotency WHERE owner = $1 AND key = $2 AND status = 0", owner, key
        )
