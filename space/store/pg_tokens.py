"""Bearer tokens on PostgreSQL: the twin of `token_store`'s SQL, by the database's clock.

Owns the tokens' SQL on the PostgreSQL store (the `tokens` table of schema v3: only the
SHA-256 of a secret is kept). A lookup judges the row at `clock_timestamp()`; a revocation
or a rotation locks every live admin row first (`FOR UPDATE`), so two servers revoking two
admin tokens at once never leave none; a run token dies at the database's `now` plus its
life, and expired rows are pruned after the commit, skipping rows others hold. What a token
is, how it is judged and listed is `token_store`'s. Must not know HTTP.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from space import token_store
from space.store.pg_fires import PRUNE
from space.token_store import ID_DIGITS, Principal, Role, token_row

_NOW = "SELECT extract(epoch FROM clock_timestamp())::float8"
_MINT = (
    "INSERT INTO tokens (hash, role, peer, space, trigger_id, run_id, created_at, expires_at) "
    "VALUES ($1, $2, $3, $4, $5, $6, coalesce($7, extract(epoch FROM clock_timestamp())), $8) "
    "ON CONFLICT DO NOTHING"
)
_LOCK_ADMINS = "SELECT 1 FROM tokens WHERE role = 'admin' AND revoked_at IS NULL FOR UPDATE"
_BY_ID = f'SELECT * FROM tokens WHERE substr(hash, 1, {ID_DIGITS}) = $1 ORDER BY hash COLLATE "C"'
_LIVE_ADMINS = "SELECT count(*) FROM tokens WHERE role = 'admin' AND revoked_at IS NULL"


class PgTokens:
    """The token operations of `PostgresStore` (its pool)."""

    pool: asyncpg.Pool

    async def mint_token(self, who: Principal) -> str:
        token = token_store.new_token(who.role)
        await _mint(self.pool, token, who)
        return token

    async def lookup_token(self, token: str) -> Principal:
        digest = token_store.token_hash(token)
        row = await self.pool.fetchrow(
            f"SELECT *, ({_NOW}) AS now FROM tokens WHERE hash = $1", digest
        )
        stored = None if row is None else dict(row)
        who = token_store.judge(stored, 0.0 if row is None else row["now"])
        if stored is not None and token_store.touched(stored, stored["now"]):
            await self.pool.execute(
                "UPDATE tokens SET last_used_at = $2 WHERE hash = $1", digest, stored["now"]
            )
        return who

    async def list_tokens(self, *, everything: bool = False) -> list[dict[str, Any]]:
        async with self.pool.acquire() as conn, conn.transaction():
            now = await conn.fetchval(_NOW)
            rows = await conn.fetch(
                "SELECT * FROM tokens WHERE $1 OR (revoked_at IS NULL AND "
                '(expires_at IS NULL OR expires_at > $2)) ORDER BY created_at, hash COLLATE "C"',
                everything,
                now,
            )
        return [token_store.entry(dict(row), now) for row in rows]

    async def revoke_token(self, tid: str) -> dict[str, Any] | None:
        if not token_store.is_id(tid):
            return None
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(_LOCK_ADMINS)  # revocations of admin tokens one at a time
            now = await conn.fetchval(_NOW)
            found = [token_store.entry(dict(r), now) for r in await conn.fetch(_BY_ID, tid)]
            if not found:
                return None
            if token_store.last_admin(found[0], await conn.fetchval(_LIVE_ADMINS)):
                raise token_store.LastAdminToken(tid)
            await conn.execute(
                "UPDATE tokens SET revoked_at = coalesce(revoked_at, $2) "
                f"WHERE substr(hash, 1, {ID_DIGITS}) = $1",
                tid,
                now,
            )
            return token_store.entry(dict((await conn.fetch(_BY_ID, tid))[0]), now)

    async def rotate_admin(self, path: Path | None) -> str:
        token = token_store.new_token(Role.ADMIN)
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(_LOCK_ADMINS)
            await _mint(conn, token, Principal(role=Role.ADMIN))
            await conn.execute(
                f"UPDATE tokens SET revoked_at = ({_NOW}) WHERE role = 'admin' "
                "AND revoked_at IS NULL AND hash != $1",
                token_store.token_hash(token),
            )
            if path is not None:  # before the commit: both or neither
                token_store.write_private(path, token + "\n")
        return token

    async def ensure_admin_token(self, path: Path) -> None:
        if not path.exists():
            minted = await self.mint_token(Principal(role=Role.ADMIN))
            token_store.write_private(path, minted + "\n")
            return
        token = token_store.read_private(path)
        await _mint(self.pool, token, Principal(role=Role.ADMIN))
        row = await self.pool.fetchrow(
            "SELECT role, revoked_at FROM tokens WHERE hash = $1", token_store.token_hash(token)
        )
        if row["role"] != Role.ADMIN or row["revoked_at"] is not None:
            raise token_store.not_admin(path)

    async def mint_run_token(
        self, space: str, trigger_id: str, run_id: str, ttl: float, peer: str | None
    ) -> tuple[str, datetime]:
        token = token_store.new_token(Role.RUN)
        who = Principal(role=Role.RUN, space=space, trigger_id=trigger_id, run_id=run_id, peer=peer)
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                now: datetime = await conn.fetchval("SELECT clock_timestamp()")
                expires = now + timedelta(seconds=ttl)
                await _mint(conn, token, who, now.timestamp(), expires.timestamp())
            await conn.execute(PRUNE)
        return token, expires

    async def end_run_tokens(self, space: str, run_ids: list[str], peer: str | None = None) -> int:
        return await end_runs(self.pool, space, run_ids, peer)

    async def fire_claim(self, space: str, trigger_id: str, key: str) -> tuple[str, int] | None:
        row = await self.pool.fetchrow(
            "SELECT peer, term FROM fires WHERE space = $1 AND trigger_id = $2 AND key = $3",
            space,
            trigger_id,
            key,
        )
        return None if row is None else (row["peer"], row["term"])


async def _mint(
    db: asyncpg.Pool | asyncpg.Connection,
    token: str,
    who: Principal,
    now: float | None = None,
    expires_at: float | None = None,
) -> None:
    """Store `token`'s hash for `who` (created at `now`, default the database's clock)."""
    await db.execute(_MINT, *token_row(token, who), now, expires_at)


async def end_runs(
    db: asyncpg.Pool | asyncpg.Connection, space: str, run_ids: list[str], peer: str | None
) -> int:
    """Revoke the run tokens of `run_ids` (with `peer`: of its fires only), in the caller's
    transaction when `db` is a connection; how many."""
    status = await db.execute(
        f"UPDATE tokens SET revoked_at = ({_NOW}) WHERE role = 'run' AND space = $1 "
        "AND run_id = ANY($2::text[]) AND revoked_at IS NULL "
        "AND ($3::text IS NULL OR peer = $3)",
        space,
        run_ids,
        peer,
    )
    return int(status.rsplit(" ", 1)[-1])
