"""Trigger records on PostgreSQL: the twin of `trigger_store`'s SQL, every write a change.

Owns the records' SQL on the PostgreSQL store: ids never reused (`trigger_ids`), the raw
JSON kept, names unique by an index; each write is one transaction with its change (the
feed's counter row, `append_change`) and its history revision. A patch, stamp or delete
locks the row (`FOR UPDATE`) before it reads the rev, so `If-Match` is a compare-and-set,
and stamps the instant by the database's `clock_timestamp()` once the lock is held. What a
write makes of a record is `trigger_store`'s (its pure helpers). Must not know HTTP beyond
raising `Refusal`.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable
from datetime import datetime

import asyncpg
import msgspec

from space import history, record_input, record_view, trigger_store
from space.change_log import Change
from space.history import Author
from space.http import Refusal
from space.servertime import iso
from space.store.pgwake import CHANNEL
from space.trigger_store import Record

_APPEND = """
WITH counter AS (INSERT INTO feeds AS f (space, seq) VALUES ($1, 1)
  ON CONFLICT (space) DO UPDATE SET seq = f.seq + 1 RETURNING seq),
appended AS (INSERT INTO changes (space, seq, trigger_id, op, rev, body, at, writer)
  SELECT $1, seq, $2, $3, $4, $5, $6, $7 FROM counter RETURNING seq)
SELECT seq, pg_notify('CHANNEL', 'feed:' || $1) FROM appended
""".replace("CHANNEL", CHANNEL)
_CREATE_IF_ABSENT = (  # every unique index is an arbiter: a concurrent create of the same
    "INSERT INTO triggers (space, id, rev, body, name) VALUES ($1, $2, $3, $4, $5) "
    "ON CONFLICT DO NOTHING RETURNING id"  # reserved record may meet it at the name's first
)
_UPSERT = (
    "INSERT INTO triggers (space, id, rev, body, name) VALUES ($1, $2, $3, $4, $5) "
    "ON CONFLICT (space, id) DO UPDATE SET rev = $3, body = $4, name = $5"
)


class Instant(msgspec.Struct, frozen=True):
    """The database's clock in the write's transaction: as the wire shows it and as unix."""

    text: str
    unix: float


async def append_change(conn: asyncpg.Connection, change: Change) -> int:
    """`change` into the feed, in the caller's transaction; its `seq` (the space's counter
    row, locked until the commit: gapless and in commit order). NOTIFYs the hint."""
    c = change
    seq = await conn.fetchval(_APPEND, c.space, c.trigger_id, c.op, c.rev, c.body, c.at, c.writer)
    return int(seq)


async def create(pool: asyncpg.Pool, space: str, body: Record, by: Author) -> Record:
    record_input.check(body)
    async with pool.acquire() as conn, conn.transaction():
        now = await _now(conn)
        await _name_free(conn, space, body.get("name"))
        tid = await _mint_id(conn, space)
        record = trigger_store.new_record(tid, body, now.text)
        seq = await _write(conn, space, record, "create", now)
        await _revision(conn, space, None, record, seq, now, by)
    return record


async def create_reserved(
    pool: asyncpg.Pool, space: str, tid: str, body: Record, by: Author
) -> tuple[Record, bool]:
    """Create-if-absent for a reserved id (`trigger_store.create_reserved`): of concurrent
    ones, one creates; the others answer its record untouched."""
    trigger_store.check_reserved(tid, body)
    async with pool.acquire() as conn, conn.transaction():
        now = await _now(conn)
        record = trigger_store.new_record(tid, body, now.text)
        text = json.dumps(record, separators=(",", ":"))
        name = record.get("name") if isinstance(record.get("name"), str) else None
        await _name_free(conn, space, name, tid)
        made = await conn.fetchval(_CREATE_IF_ABSENT, space, tid, 1, text, name)
        if made is None:
            row = await _locked(conn, space, tid)
            if row is None:  # not the id but the name, taken by another record meanwhile
                await _name_free(conn, space, name, tid)
                raise Refusal(409, "name_taken", f"the name {name!r} was taken meanwhile")
            return record_view.parse(row[1]) or {"id": tid}, False
        await conn.execute(
            "INSERT INTO trigger_ids VALUES ($1, $2) ON CONFLICT DO NOTHING", space, tid
        )
        seq = await append_change(conn, Change(space, tid, "create", 1, text, now.text))
        await _revision(conn, space, None, record, seq, now, by)
    return record, True


async def patch(
    pool: asyncpg.Pool, space: str, tid: str, changes: Record, if_match: int | None, by: Author
) -> Record:
    async with pool.acquire() as conn, conn.transaction():
        rev, old = trigger_store.parsed(space, tid, await _locked(conn, space, tid))
        trigger_store.check_rev(rev, if_match)
        now = await _now(conn)
        record = trigger_store.patched(tid, rev, old, changes, now.text)
        if trigger_store.renames(old, changes):
            await _name_free(conn, space, changes["name"], tid)
        seq = await _write(conn, space, record, "update", now)
        await _revision(conn, space, old, record, seq, now, by)
    return record


async def ask_run(
    pool: asyncpg.Pool, space: str, tid: str, if_match: int | None, by: Author
) -> Record:
    """A run asked of `tid` (`trigger_store.ask_run`), at the database's clock."""
    async with pool.acquire() as conn, conn.transaction():
        rev, old = trigger_store.parsed(space, tid, await _locked(conn, space, tid))
        trigger_store.check_rev(rev, if_match)
        now = await _now(conn)
        record = trigger_store.asked(tid, rev, old, now.text)
        seq = await _write(conn, space, record, "update", now)
        await _revision(conn, space, old, record, seq, now, by)
    return record


async def stamp_in(
    conn: asyncpg.Connection,
    space: str,
    tid: str,
    stamps: Record,
    if_match: int | None = None,
    writer: str = "",
    fence: Callable[[Record], Awaitable[None]] | None = None,
) -> tuple[Record, int]:
    """`stamp` in the caller's transaction, the row locked before `fence(record)` may refuse
    (`Refusal`, nothing written): the record and the seq of its change (0: unchanged)."""
    rev, record = trigger_store.parsed(space, tid, await _locked(conn, space, tid))
    trigger_store.check_rev(rev, if_match)
    if fence is not None:
        await fence(record)
    new = trigger_store.stamped(tid, rev, record, stamps)
    if new is None:
        return record, 0
    return new, await _write(conn, space, new, "stamp", await _now(conn), writer)


async def delete(
    pool: asyncpg.Pool, space: str, tid: str, if_match: int | None, by: Author
) -> None:
    async with pool.acquire() as conn, conn.transaction():
        row = await _locked(conn, space, tid)
        if row is None:
            raise trigger_store.unknown(space, tid)
        rev = row[0]
        trigger_store.check_rev(rev, if_match)
        now = await _now(conn)
        await conn.execute("DELETE FROM triggers WHERE space = $1 AND id = $2", space, tid)
        seq = await append_change(conn, Change(space, tid, "delete", rev + 1, None, now.text))
        old = {**(record_view.parse(row[1]) or {"id": tid}), "id": tid, "rev": rev}
        await _revision(conn, space, old, None, seq, now, by)


async def stored_row(pool: asyncpg.Pool, space: str, tid: str) -> tuple[int, str] | None:
    row = await pool.fetchrow(
        "SELECT rev, body FROM triggers WHERE space = $1 AND id = $2", space, tid
    )
    return None if row is None else (row["rev"], row["body"])


async def latest_seq(pool: asyncpg.Pool, space: str) -> int:
    """The feed's counter row: its last committed `seq`."""
    seq = await pool.fetchval("SELECT seq FROM feeds WHERE space = $1", space)
    return int(seq or 0)


async def listing_page(
    pool: asyncpg.Pool, space: str, after: str, limit: int, *, stored: bool
) -> tuple[list[Record | msgspec.Raw], str | None]:
    """As `trigger_store.listing_page`: by id (byte order, as SQLite's) after `after`;
    `limit` -1: all."""
    rows = await pool.fetch(
        'SELECT id, body FROM triggers WHERE space = $1 AND id COLLATE "C" > $2 '
        'ORDER BY id COLLATE "C" LIMIT $3',
        space,
        after,
        limit if limit >= 0 else None,
    )
    read = record_view.as_stored if stored else record_view.flagged
    last = rows[-1]["id"] if len(rows) == limit else None
    return [read(row["id"], row["body"]) for row in rows], last


async def _now(conn: asyncpg.Connection) -> Instant:
    text = iso(await conn.fetchval("SELECT clock_timestamp()"))
    return Instant(text, datetime.fromisoformat(text).timestamp())


async def _locked(conn: asyncpg.Connection, space: str, tid: str) -> tuple[int, str] | None:
    row = await conn.fetchrow(
        "SELECT rev, body FROM triggers WHERE space = $1 AND id = $2 FOR UPDATE", space, tid
    )
    return None if row is None else (row["rev"], row["body"])


async def _mint_id(conn: asyncpg.Connection, space: str) -> str:
    while True:
        tid = trigger_store.ID_PREFIX + secrets.token_hex(8)
        minted = await conn.fetchval(
            "INSERT INTO trigger_ids VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING id",
            space,
            tid,
        )
        if minted is not None:
            return tid


async def _name_free(conn: asyncpg.Connection, space: str, name: object, tid: str = "") -> None:
    """Names are unique within a space: 409 `name_taken` naming the record that has it."""
    if not isinstance(name, str):
        return
    other = await conn.fetchval(
        "SELECT id FROM triggers WHERE space = $1 AND name = $2 AND id != $3 LIMIT 1",
        space,
        name,
        tid,
    )
    if other is not None:
        detail = f"trigger {other} in space {space!r} is named {name!r} already - at `$.name`"
        raise Refusal(409, "name_taken", detail, id=other)


async def _write(
    conn: asyncpg.Connection, space: str, record: Record, op: str, now: Instant, writer: str = ""
) -> int:
    """The row and its change; a name taken by a write committed meanwhile is `name_taken`."""
    body = json.dumps(record, separators=(",", ":"))
    name = record.get("name") if isinstance(record.get("name"), str) else None
    if op == "stamp":  # the locked row keeps its name: the index cannot refuse it
        await conn.execute(_UPSERT, space, record["id"], record["rev"], body, name)
    else:
        try:
            async with conn.transaction():  # a savepoint: the name's index may refuse the row
                await conn.execute(_UPSERT, space, record["id"], record["rev"], body, name)
        except asyncpg.UniqueViolationError:
            await _name_free(conn, space, name, record["id"])
            raise
    change = Change(space, record["id"], op, record["rev"], body, now.text, writer)
    return await append_change(conn, change)


async def _revision(
    conn: asyncpg.Connection,
    space: str,
    old: Record | None,
    new: Record | None,
    seq: int,
    now: Instant,
    by: Author,
) -> None:
    await conn.execute(
        "INSERT INTO history_revisions VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) "
        "ON CONFLICT (space, trigger_id, rev) DO UPDATE SET seq = $4, at = $5, op = $6, "
        "actor = $7, note = $8, changes = $9, record = $10",
        *history.revision_row(space, old, new, seq, now.unix, by),
    )
