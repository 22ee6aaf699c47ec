"""Append-only logs on PostgreSQL (run records, agent turns): the twin of `logtable`'s SQL.

Owns the logs' queries on the PostgreSQL store (the bodies stored under some ids, the
prunes by count per key and by age at the database's clock, the listing oldest first) and
the turns (`PgTurns`): a turn is written once, `INSERT … ON CONFLICT DO NOTHING` deciding
between two servers posting one `turnId`, the same body again changing nothing, another
refused (409 `turn_exists`). Table and column names are this package's constants, never
request input. Must not know HTTP beyond raising `Refusal`.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from core.vocab import TurnOutcome
from core.wire import TurnIn
from space import logtable, oddrows, turns
from space.appstate import RunRetention
from space.store.logwire import LogQuery

DAY_S = 86400.0


async def stored(
    conn: asyncpg.Connection, table: str, id_column: str, space: str, ids: list[str]
) -> dict[str, str]:
    """The bodies written under `ids` (one query), by id."""
    rows = await conn.fetch(
        f"SELECT {id_column}, body FROM {table} WHERE space = $1 AND {id_column} = ANY($2)",
        space,
        ids,
    )
    return {row[0]: row[1] for row in rows}


async def prune_key(
    conn: asyncpg.Connection,
    table: str,
    key_column: str,
    space: str,
    key: str,
    failure: bool,
    keep: RunRetention,
) -> None:
    """Keep the newest rows of `key` of this kind (failures or not) within their count."""
    count = keep.failure_per_trigger if failure else keep.ok_per_trigger
    await conn.execute(
        f"DELETE FROM {table} WHERE seq IN (SELECT seq FROM {table} WHERE space = $1 AND "
        f"{key_column} = $2 AND failure = $3 ORDER BY started_at DESC, seq DESC OFFSET $4)",
        space,
        key,
        failure,
        count,
    )


async def prune_age(
    conn: asyncpg.Connection, table: str, space: str, failure: bool, keep: RunRetention
) -> None:
    """Drop the space's rows of this kind older than their age, by the database's clock."""
    days = keep.failure_days if failure else keep.ok_days
    await conn.execute(
        f"DELETE FROM {table} WHERE space = $1 AND failure = $2 "
        "AND started_at < extract(epoch FROM clock_timestamp()) - $3::float8",
        space,
        failure,
        days * DAY_S,
    )


async def query(pool: asyncpg.Pool, table: str, space: str, q: LogQuery) -> list[dict[str, Any]]:
    """Bodies oldest first: from `q.since` on if given, else the latest `q.limit`."""
    params: list[object] = [space]
    where = "space = $1"
    for column, value in q.filters.items():
        params.append(value)
        where += f" AND {column} = ${len(params)}"
    if q.since is not None:
        params.append(q.since)
        where, order = where + f" AND started_at >= ${len(params)}", "started_at, seq"
    else:
        order = "started_at DESC, seq DESC"
    params.append(q.limit)
    rows = await pool.fetch(
        f"SELECT seq, body FROM {table} WHERE {where} ORDER BY {order} LIMIT ${len(params)}",
        *params,
    )
    bodies, _ = oddrows.each([tuple(r) for r in rows], logtable.entry, lambda r: r[0], table)
    return bodies if q.since is not None else bodies[::-1]


async def one(
    pool: asyncpg.Pool, table: str, id_column: str, space: str, entry_id: str
) -> dict[str, Any] | None:
    """The body written under `entry_id`, or None (also for an odd row)."""
    row = await pool.fetchrow(
        f"SELECT seq, body FROM {table} WHERE space = $1 AND {id_column} = $2", space, entry_id
    )
    bodies, _ = oddrows.each([tuple(row)] if row else [], logtable.entry, lambda r: r[0], table)
    return bodies[0] if bodies else None


class PgTurns:
    """The agent turns' operations of `PostgresStore`."""

    pool: asyncpg.Pool

    async def post_turn(self, space: str, turn: TurnIn, keep: RunRetention) -> bool:
        body, failure = turns.body_of(turn), turn.outcome is not TurnOutcome.OK
        async with self.pool.acquire() as conn, conn.transaction():
            while True:
                made = await conn.fetchval(
                    "INSERT INTO agent_turns (space, turn_id, object_id, started_at, failure, "
                    "body) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING RETURNING seq",
                    space,
                    turn.turnId,
                    turn.objectId,
                    turn.startedAt.timestamp(),
                    failure,
                    body,
                )
                if made is not None:
                    break
                there = (await stored(conn, "agent_turns", "turn_id", space, [turn.turnId])).get(
                    turn.turnId
                )
                if there == body:
                    return False
                if there is not None:
                    raise logtable.conflict("turn_id", turn.turnId)
                # pruned between the two statements: write it again
            await prune_key(conn, "agent_turns", "object_id", space, turn.objectId, failure, keep)
            await prune_age(conn, "agent_turns", space, failure, keep)
        return True

    async def turns_page(self, space: str, query_: LogQuery) -> list[dict[str, Any]]:
        return await query(self.pool, "agent_turns", space, query_)
