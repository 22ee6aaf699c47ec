"""`baton space migrate`: a space's SQLite file copied into PostgreSQL, all or nothing.

Owns the copy of each table of `migrate_map.TABLES` (in batches, `ON CONFLICT` leaving
existing keys), the refusals (a target with rows, unless `merge`; with it, a space with
changes or messages on both sides), and the counters set after the copy (feeds, chats'
`last_seq`, the identity sequences). The file is read read-only in one snapshot; the target
is migrated and written in one transaction. Must not know argparse or HTTP.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import asyncpg

from space.migrate_map import KEEP_LARGER, TABLES, Convert, Table, number, record_name
from space.store import pgschema

__all__ = ["TABLES", "Refused", "migrate"]
BATCH = 1000


class Refused(Exception):
    """The copy is refused or failed (nothing was written); the message names the argument."""


_HISTORIES = (  # the spaces whose change feed or chats have entries
    "SELECT space FROM changes UNION SELECT c.space FROM chat_messages m "
    "JOIN chats c ON c.object_id = m.object_id"
)


async def migrate(source: Path, dsn: str, merge: bool = False) -> dict[str, int]:
    """Copy `source` into `dsn` (see the module); the rows copied by table."""
    lite = _open(source)
    try:
        try:
            conn = await asyncio.wait_for(asyncpg.connect(dsn), 10)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, ValueError) as exc:
            raise Refused(f"--to: cannot connect: {exc}") from None
        try:
            async with conn.transaction():
                return await _copy(lite, conn, source, merge)
        except asyncpg.PostgresError as exc:
            raise Refused(f"--to: the copy failed, nothing was written: {exc}") from None
        finally:
            await conn.close()
    finally:
        lite.close()


def _open(source: Path) -> sqlite3.Connection:
    if not source.is_file():
        raise Refused(f"--from: {source}: no such file")
    lite = sqlite3.connect(source.resolve().as_uri() + "?mode=ro", uri=True, isolation_level=None)
    try:
        lite.execute("BEGIN")  # one snapshot of the whole file
        have = {r[0] for r in lite.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        lite.close()
        raise Refused(f"--from: {source}: {exc}") from None
    missing = [t.name for t in TABLES if t.name not in have] + (
        ["history_meta"] if "history_meta" not in have else []
    )
    if missing:
        lite.close()
        raise Refused(
            f"--from: {source} has no table {missing[0]}: not a space's file, or from an older "
            "build (serve it once with this build first)"
        )
    return lite


async def _copy(
    lite: sqlite3.Connection, conn: asyncpg.Connection, source: Path, merge: bool
) -> dict[str, int]:
    try:
        await pgschema.migrate(conn)  # a savepoint of this transaction
    except pgschema.NewerStore as exc:
        raise Refused(f"--to: {exc}") from None
    names = ", ".join(t.name for t in TABLES)
    await conn.execute(f"LOCK TABLE {names}, feeds, history_meta IN EXCLUSIVE MODE")
    await _refuse(lite, conn, merge)
    copied = {}
    for table in TABLES:
        copied[table.name] = await _table(lite, conn, source, table)
    await conn.execute(
        "INSERT INTO feeds AS f SELECT space, max(seq) FROM changes GROUP BY space "
        "ON CONFLICT (space) DO UPDATE SET seq = greatest(f.seq, excluded.seq)"
    )
    since = lite.execute("SELECT value FROM history_meta WHERE name = 'since'").fetchone()
    if since is not None:
        await conn.execute(
            "INSERT INTO history_meta AS h VALUES ('since', $1) "
            "ON CONFLICT (name) DO UPDATE SET value = least(h.value, excluded.value)",
            number(since[0]),
        )
    for table in TABLES:
        if table.identity:
            await conn.execute(
                f"SELECT setval(pg_get_serial_sequence('{table.name}', '{table.identity}'), "
                f"coalesce(max({table.identity}), 0) + 1, false) FROM {table.name}"
            )
    return copied


async def _refuse(lite: sqlite3.Connection, conn: asyncpg.Connection, merge: bool) -> None:
    if not merge:
        for table in (*TABLES, Table("feeds", ())):
            if await conn.fetchval(f"SELECT EXISTS (SELECT 1 FROM {table.name})"):
                raise Refused(
                    f"--to: the database is not empty (table {table.name} has rows); "
                    "give an empty database, or --merge to add this file's spaces to it"
                )
        return
    here = {r[0] for r in lite.execute(_HISTORIES)}
    there = {r[0] for r in await conn.fetch(_HISTORIES)}
    if both := sorted(here & there):
        raise Refused(
            f"--merge: space {both[0]!r} has changes or messages in both the file and the "
            "database; two histories of one space are not merged into one feed"
        )


async def _table(lite: sqlite3.Connection, conn: asyncpg.Connection, source: Path, t: Table) -> int:
    cols = [c for c, _ in t.columns]
    shift = 0
    if t.identity:  # past the target's own rows (0 into an empty one: the same values)
        shift = await conn.fetchval(f"SELECT coalesce(max({t.identity}), 0) FROM {t.name}")
    marks = ", ".join(f"${i}" for i in range(1, len(cols) + 1))
    sql = (
        f"INSERT INTO {t.name} ({', '.join(cols)}) "
        f"{'OVERRIDING SYSTEM VALUE ' if t.identity else ''}VALUES ({marks}) "
        f"ON CONFLICT {t.key}{KEEP_LARGER.get(t.name, ' DO NOTHING')}"
    )
    select = ", ".join(_source(t, c, f) for c, f in t.columns)
    count = 0
    for batch in _batches(lite, source, t, f"SELECT {select} FROM {t.name} ORDER BY {t.order}"):
        if t.identity:
            at = cols.index(t.identity)
            batch = [(*r[:at], r[at] + shift, *r[at + 1 :]) for r in batch]  # type: ignore[operator]
        await conn.executemany(sql, batch)
        count += len(batch)
    return count


def _source(t: Table, column: str, kind: Convert) -> str:
    """What SQLite's SELECT reads for PostgreSQL's `column`."""
    if t.rowid and column == t.identity:
        return "rowid"
    return "body" if kind is record_name else column


def _batches(
    lite: sqlite3.Connection, source: Path, t: Table, sql: str
) -> Iterator[list[tuple[object, ...]]]:
    n, cursor = 0, None
    while True:
        try:  # a page the file cannot read is refused like a table it lacks
            cursor = cursor or lite.execute(sql)
            rows = cursor.fetchmany(BATCH)
        except sqlite3.DatabaseError as exc:
            raise Refused(f"--from: {source}: table {t.name}: {exc}") from None
        if not rows:
            return
        batch = []
        for row in rows:
            n += 1
            try:
                batch.append(tuple(f(v) for (_, f), v in zip(t.columns, row, strict=True)))
            except (TypeError, ValueError, OverflowError, OSError) as exc:
                raise Refused(
                    f"--from: {source}: table {t.name}, row {n}: {exc}; nothing was written"
                ) from None
        yield batch
