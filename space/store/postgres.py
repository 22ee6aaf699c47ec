"""The PostgreSQL store behind the seam: asyncpg, every decision by the database's clock.

Owns the operations' SQL. A lease change locks the lease row (`FOR UPDATE`) and decides
by `clock_timestamp()` read once the row is held; a claim is one statement, `INSERT … ON
CONFLICT DO NOTHING` fenced by the lease row held `FOR SHARE`, so no claim commits under
a term that is being replaced; the feed's `seq` comes from a per-space counter row updated
in the writing transaction, so it is gapless and in commit order, and each chat's `seq`
likewise; appends NOTIFY a hint (`pgwake`).
Must not know HTTP; the schema is `pgschema`'s.
"""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any

import asyncpg
import msgspec

from core.wire import FireIn
from space import change_log, leases
from space.change_log import Change
from space.history import Author
from space.servertime import iso
from space.store import (
    Claimed,
    ClaimIn,
    LeaseChange,
    LeaseStep,
    Stale,
    Taken,
    pg_fires,
    pg_records,
    pgschema,
)
from space.store.pg_chats import PgChats
from space.store.pg_devices import PgDevices
from space.store.pg_history import PgHistory
from space.store.pg_idempotency import PgIdempotency
from space.store.pg_logs import PgTurns
from space.store.pg_programs import PgPrograms
from space.store.pg_runs import Fence, PgRuns
from space.store.pg_scrape import PgScrape
from space.store.pg_spaces import PgSpaces
from space.store.pg_tokens import PgTokens
from space.token_store import Principal
from space.trigger_store import Record

_CLAIM = """
WITH lease AS (SELECT 1 FROM leases WHERE space = $1 AND active = $5 AND term = $4
  AND expires_at > clock_timestamp() FOR SHARE)
INSERT INTO fires (space, trigger_id, key, term, peer, claim_id)
SELECT $1, $2, $3, $4, $5, $6 WHERE NOT $7::boolean OR EXISTS (SELECT 1 FROM lease)
ON CONFLICT DO NOTHING RETURNING claimed_at
"""


async def _kept(conn: asyncpg.Connection) -> None:
    """A connection back in the pool is kept as it is: the store leaves no session state
    (no `SET`, `LISTEN`, session advisory lock or cursor outside a transaction: its locks
    are `pg_advisory_xact_lock`, its LISTEN a connection of its own, `pgwake`), so
    asyncpg's reset query would be a round trip a release for nothing. An open
    transaction is still rolled back by asyncpg before this is called."""


class PostgresStore(
    PgTokens,
    PgDevices,
    PgPrograms,
    PgHistory,
    PgScrape,
    PgSpaces,
    PgChats,
    PgRuns,
    PgTurns,
    PgIdempotency,
):
    """A pool of connections for the operations; `open` migrates the schema first. The
    operations of one area each are its bases."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.origin = secrets.token_hex(8)  # this server in the hints it NOTIFYs

    @classmethod
    async def open(cls, dsn: str, *, max_size: int = 10) -> PostgresStore:
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=max_size, reset=_kept)
        try:
            async with pool.acquire() as conn:
                await pgschema.migrate(conn)
        except BaseException:
            await pool.close()
            raise
        return cls(pool)

    async def close(self) -> None:
        await self.pool.close()

    async def lease(self, space: str) -> tuple[leases.Lease, datetime]:
        row = await self.pool.fetchrow(
            "SELECT l.active, l.term, l.expires_at, l.want, now() AS now "
            "FROM (SELECT 1) AS one LEFT JOIN leases l ON l.space = $1",
            space,
        )
        return pg_fires.lease_of(row), row["now"]

    async def change_lease(self, space: str, step: LeaseStep) -> LeaseChange:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO leases (space) VALUES ($1) ON CONFLICT DO NOTHING", space
            )
            row = await conn.fetchrow(
                "SELECT active, term, expires_at, want FROM leases WHERE space = $1 FOR UPDATE",
                space,
            )
            now: datetime = await conn.fetchval("SELECT clock_timestamp()")  # the row is held
            lease = pg_fires.lease_of(row)
            try:
                new: leases.Lease | None = step(lease, now)
            except leases.Conflict:
                new = None
            if new is not None:
                await conn.execute(
                    "UPDATE leases SET active = $2, term = $3, expires_at = $4, want = $5 "
                    "WHERE space = $1",
                    space,
                    new.active,
                    new.term,
                    new.expires_at,
                    new.want,
                )
                await _remember(conn, space, leases.term_events(lease, new, now))
        return LeaseChange(lease, new, now)

    async def claim(self, claim: ClaimIn) -> Claimed | Taken | Stale:
        c = claim
        args = (c.space, c.trigger_id, c.key, c.term, c.peer, c.claim_id, c.floating)
        while True:
            at = await self.pool.fetchval(_CLAIM, *args)
            if at is not None:
                return Claimed(iso(at))
            row = await self.pool.fetchrow(
                "SELECT term, peer, claimed_at, claim_id FROM fires "
                "WHERE space = $1 AND trigger_id = $2 AND key = $3",
                c.space,
                c.trigger_id,
                c.key,
            )
            if row is not None:
                if c.claim_id and row["claim_id"] == c.claim_id:
                    return Claimed(iso(row["claimed_at"]))  # this very claim, sent again
                return Taken(peer=row["peer"], term=row["term"], claimed_at=iso(row["claimed_at"]))
            if c.floating:
                return Stale(*await self.lease(c.space))
            # not fenced and not taken: the key was freed in between; claim again

    async def claim_fire(self, space: str, fire: FireIn, margin: float) -> dict[str, Any]:
        return await pg_fires.claim_fire(self.pool, space, fire, margin)

    async def claim_list(
        self, space: str, batch: list[FireIn], margin: float
    ) -> list[dict[str, Any]]:
        return await pg_fires.claim_list(self.pool, space, batch, margin)

    async def fires_page(self, space: str, trigger: str | None, limit: int) -> list[dict[str, Any]]:
        return await pg_fires.recent(self.pool, space, trigger, limit)

    async def append_change(self, change: Change) -> int:
        async with self.pool.acquire() as conn, conn.transaction():
            return await pg_records.append_change(conn, change)

    async def record_row(self, space: str, tid: str) -> tuple[int, str] | None:
        return await pg_records.stored_row(self.pool, space, tid)

    async def latest_seq(self, space: str) -> int:
        return await pg_records.latest_seq(self.pool, space)

    async def records_page(
        self, space: str, after: str, limit: int, *, stored: bool
    ) -> tuple[list[Record | msgspec.Raw], str | None]:
        return await pg_records.listing_page(self.pool, space, after, limit, stored=stored)

    async def create_record(self, space: str, body: Record, by: Author) -> Record:
        return await pg_records.create(self.pool, space, body, by)

    async def create_reserved_record(
        self, space: str, tid: str, body: Record, by: Author
    ) -> tuple[Record, bool]:
        return await pg_records.create_reserved(self.pool, space, tid, body, by)

    async def patch_record(
        self, space: str, tid: str, changes: Record, if_match: int | None, by: Author
    ) -> Record:
        return await pg_records.patch(self.pool, space, tid, changes, if_match, by)

    async def ask_run(self, space: str, tid: str, if_match: int | None, by: Author) -> Record:
        return await pg_records.ask_run(self.pool, space, tid, if_match, by)

    async def stamp_record(
        self, space: str, tid: str, stamps: Record, if_match: int | None, who: Principal | None
    ) -> tuple[Record, bool]:
        async with self.pool.acquire() as conn, conn.transaction():
            fence = Fence(conn, space, who, tid)
            record, seq = await pg_records.stamp_in(conn, space, tid, stamps, if_match, fence=fence)
        return record, seq > 0

    async def delete_record(self, space: str, tid: str, if_match: int | None, by: Author) -> None:
        await pg_records.delete(self.pool, space, tid, if_match, by)

    async def changes_since(
        self, space: str, since: int, limit: int, omit: str = ""
    ) -> list[dict[str, Any]]:
        rows = await self.pool.fetch(
            "SELECT seq, trigger_id, op, rev, CASE WHEN writer = $4 AND op = 'stamp' THEN NULL "
            "ELSE body END, at, writer = $4 AND op = 'stamp' FROM changes "
            "WHERE space = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            space,
            since,
            limit,
            omit or "\n",  # no writer is "\n"
        )
        return [
            {"seq": row[0], "omitted": True} if row[6] else change_log.view(*tuple(row)[:6])
            for row in rows
        ]


async def _remember(
    conn: asyncpg.Connection, space: str, events: list[leases.TermBegan | leases.TermEnded]
) -> None:
    """The history of terms, in the lease's transaction (`leases.term_events`)."""
    for event in events:
        if isinstance(event, leases.TermBegan):
            await conn.execute(
                "UPDATE history_terms SET ended = $3, how = 'superseded' "
                "WHERE space = $1 AND term < $2 AND ended IS NULL",
                space,
                event.term,
                event.at,
            )
            await conn.execute(
                "INSERT INTO history_terms (space, term, holder, began) VALUES ($1, $2, $3, $4) "
                "ON CONFLICT (space, term) DO UPDATE SET holder = excluded.holder, "
                "began = excluded.began, ended = NULL, how = NULL",
                space,
                event.term,
                event.holder,
                event.at,
            )
        else:
            await conn.execute(
                "UPDATE history_terms SET ended = $3, how = $4 "
                "WHERE space = $1 AND term = $2 AND ended IS NULL",
                space,
                event.term,
                event.at,
                event.how,
            )
