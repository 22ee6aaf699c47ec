"""Fire claims on PostgreSQL: the fence and the key decided in one transaction, by its clock.

Owns the claims' SQL on the PostgreSQL store. A claim locks its record row and, for a
floating record, the lease row `FOR SHARE`, reads `clock_timestamp()` once both are held,
judges them with `fence.check`, then `INSERT … ON CONFLICT DO NOTHING`: a takeover's
`UPDATE leases` waits for the claim's commit, so no claim commits under a term being
replaced. A run's token is minted (hashed) in the claim's transaction; a 409 goes into the
claim ledger (`history_refusals`). What the answers say is `fires`'s. Must not know HTTP
beyond raising `Refusal`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg

from core.wire import FireIn
from space import fence, fires, leases, token_store, trigger_store
from space.http import Refusal
from space.servertime import iso
from space.store import Taken
from triggers.policies import base_key

_INSERT = (
    "INSERT INTO fires (space, trigger_id, key, term, peer, claimed_at, claim_id) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING RETURNING claimed_at"
)
_TOKEN = (
    "INSERT INTO tokens (hash, role, peer, space, trigger_id, run_id, created_at, expires_at) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING"
)
PRUNE = (  # tokens past their expiry by the database's clock; rows another transaction holds wait
    "DELETE FROM tokens WHERE hash IN (SELECT hash FROM tokens WHERE expires_at IS NOT NULL "
    "AND expires_at <= extract(epoch FROM clock_timestamp()) LIMIT 1000 FOR UPDATE SKIP LOCKED)"
)


def lease_of(row: asyncpg.Record | None) -> leases.Lease:
    if row is None or row["term"] is None:
        return leases.Lease()
    return leases.Lease(
        active=row["active"], term=row["term"], expires_at=row["expires_at"], want=row["want"]
    )


async def claim_fire(pool: asyncpg.Pool, space: str, fire: FireIn, margin: float) -> dict[str, Any]:
    refusal = None
    async with pool.acquire() as conn:
        async with conn.transaction():
            try:
                async with conn.transaction():  # a savepoint: the ledger's row outlives it
                    claimed = await _claim_one(conn, space, fire, margin)
            except Refusal as exc:
                refusal = exc
                await _refused(conn, space, fire, exc)
        if refusal is not None:
            raise refusal
        if "token" in claimed:
            await conn.execute(PRUNE)
    return claimed


async def claim_list(
    pool: asyncpg.Pool, space: str, batch: list[FireIn], margin: float
) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    async with pool.acquire() as conn:
        async with conn.transaction():
            for fire in batch:
                results.append(fires.listed(fire, await _attempt(conn, space, fire, margin)))
        if any("token" in r for r in results):
            await conn.execute(PRUNE)
    return results


async def _attempt(
    conn: asyncpg.Connection, space: str, fire: FireIn, margin: float
) -> dict[str, Any] | Refusal | Exception:
    """One claim of a list in a savepoint of its own: what it claimed or why not."""
    try:
        async with conn.transaction():
            return await _claim_one(conn, space, fire, margin)
    except Refusal as exc:
        await _refused(conn, space, fire, exc)
        return exc
    except fires.ODD_RECORD as exc:
        return exc


async def _claim_one(
    conn: asyncpg.Connection, space: str, fire: FireIn, margin: float
) -> dict[str, Any]:
    row = await conn.fetchrow(
        "SELECT rev, body FROM triggers WHERE space = $1 AND id = $2 FOR SHARE",
        space,
        fire.triggerId,
    )
    _, record = trigger_store.parsed(space, fire.triggerId, None if row is None else tuple(row))
    lease = None
    if not fence.pinned(record):
        lease = lease_of(
            await conn.fetchrow(
                "SELECT active, term, expires_at, want FROM leases WHERE space = $1 FOR SHARE",
                space,
            )
        )
    message_at = None
    if record.get("kind") == "event":
        ts = await conn.fetchval(
            "SELECT created_ts FROM chat_messages WHERE message_id = $1", base_key(fire.key)
        )
        message_at = None if ts is None else iso(datetime.fromtimestamp(ts, UTC))
    now: datetime = await conn.fetchval("SELECT clock_timestamp()")  # the locks are held
    fence.check(record, fire, now, lease, message_at)
    claimed = fires.claimed_out(fire, await _insert(conn, space, fire, now))
    if fire.run is None:
        return claimed
    expires = fires.run_token_expiry(fire, record, now, margin)
    token = token_store.new_token(token_store.Role.RUN)
    await conn.execute(
        _TOKEN,
        token_store.token_hash(token),
        token_store.Role.RUN.value,
        fire.peer,
        space,
        fire.triggerId,
        fire.run.runId,
        now.timestamp(),
        expires.timestamp(),
    )
    return {**claimed, "token": token, "expiresAt": iso(expires)}


async def _insert(conn: asyncpg.Connection, space: str, fire: FireIn, now: datetime) -> str:
    """The key claimed (its instant), or the refusal naming the claim that has it."""
    at = iso(now)
    while True:
        args = (space, fire.triggerId, fire.key, fire.term, fire.peer, now, fire.claimId or "")
        if await conn.fetchval(_INSERT, *args) is not None:
            return at
        row = await conn.fetchrow(
            "SELECT term, peer, claimed_at, claim_id FROM fires "
            "WHERE space = $1 AND trigger_id = $2 AND key = $3",
            space,
            fire.triggerId,
            fire.key,
        )
        if row is None:
            continue  # the conflicting claim was rolled back or forgotten meanwhile
        if fire.claimId and row["claim_id"] == fire.claimId:
            return iso(row["claimed_at"])  # this very claim, sent again
        held = Taken(peer=row["peer"], term=row["term"], claimed_at=iso(row["claimed_at"]))
        raise fires.taken(fire, held)


async def _refused(conn: asyncpg.Connection, space: str, fire: FireIn, exc: Refusal) -> None:
    at = await conn.fetchval("SELECT extract(epoch FROM clock_timestamp())::float8")
    row = fires.refusal_row(space, fire, at, exc)
    if row is not None:
        await conn.execute(
            "INSERT INTO history_refusals VALUES ($1, $2, $3, $4, $5, $6, $7, $8)", *row
        )


async def recent(
    pool: asyncpg.Pool, space: str, trigger: str | None, limit: int
) -> list[dict[str, Any]]:
    rows = await pool.fetch(
        "SELECT trigger_id, key, term, peer, claimed_at FROM fires WHERE space = $1 "
        "AND ($2::text IS NULL OR trigger_id = $2) ORDER BY n DESC LIMIT $3",
        space,
        trigger,
        limit,
    )
    return [
        dict(zip(fires.FIRE_KEYS, (*tuple(row)[:4], iso(row["claimed_at"])), strict=True))
        for row in reversed(rows)
    ]
