"""`baton space migrate`: a space's SQLite file copied into PostgreSQL, all or nothing.

Owns the map of every SQLite table onto pgschema's (`TABLES`: columns and how each value
converts: epoch seconds and RFC 3339 text to timestamptz, 0/1 to boolean, a record's name
out of its body), the refusals (a target with rows, unless `merge`; with it, a space with
changes or messages on both sides), and the counters set after the copy (feeds, chats'
`last_seq`, the identity sequences). The file is read read-only in one snapshot; the target
is migrated and written in one transaction. Must not know argparse or HTTP.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import msgspec

from space.store import pgschema

BATCH = 1000
Convert = Callable[[object], object]


class Refused(Exception):
    """The copy is refused or failed (nothing was written); the message names the argument."""


def _text(v: object) -> object:
    if v is None or isinstance(v, str):
        return v
    raise TypeError(f"{v!r} is not text")


def _int(v: object) -> object:
    if v is None or (isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63):
        return v
    raise TypeError(f"{v!r} is not a 64-bit integer")


def _float(v: object) -> object:
    if v is None or isinstance(v, float):
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    raise TypeError(f"{v!r} is not a number")


def _bool(v: object) -> object:
    if v is None or v in (0, 1):
        return None if v is None else bool(v)
    raise TypeError(f"{v!r} is not 0 or 1")


def _epoch(v: object) -> object:
    """Epoch seconds (SQLite REAL) as a timestamptz."""
    n = _float(v)
    return None if n is None else datetime.fromtimestamp(n, UTC)  # type: ignore[arg-type]


def _instant(v: object) -> object:
    """RFC 3339 text (SQLite TEXT) as a timestamptz."""
    if v is None:
        return None
    at = datetime.fromisoformat(str(_text(v)))
    if at.tzinfo is None:
        raise TypeError(f"{v!r} has no offset")
    return at


def _bytes(v: object) -> object:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    raise TypeError(f"{v!r} is not bytes")


def _name(body: object) -> object:
    """A record's `name` as PostgreSQL's `triggers.name` holds it (`pg_records`)."""
    try:
        record = msgspec.json.decode(str(body))
    except msgspec.DecodeError:
        return None
    name = record.get("name") if isinstance(record, dict) else None
    return name if isinstance(name, str) else None


@dataclass(frozen=True)
class Table:
    """One table: PostgreSQL's columns, each read from SQLite's column of that name."""

    name: str
    columns: tuple[tuple[str, Convert], ...]
    key: str = ""  # the key whose existing rows are left as they are ("": any key)
    order: str = "rowid"
    identity: str = ""  # GENERATED ALWAYS: copied past the target's largest, then setval
    rowid: bool = False  # SQLite has no such column: its rowid is the identity's value


KINDS: dict[str, Convert] = {
    "T": _text,
    "I": _int,
    "F": _float,
    "B": _bool,
    "E": _epoch,
    "S": _instant,
    "X": _bytes,
    "N": _name,
}
# table column:kind …, then key= order= identity=[col, @rowid]; an indented line goes on.
# T text, I integer, F double, B 0/1 as boolean, E epoch seconds and S RFC 3339 text as
# timestamptz, X bytes, N the record's name read out of its body (SQLite indexes the body).
MAP = """
spaces id:T name:T general_chat:T created_at:T key=(id)
tokens hash:T role:T peer:T space:T trigger_id:T run_id:T created_at:F expires_at:F
  revoked_at:F last_used_at:F key=(hash)
idempotency owner:T key:T digest:T status:I content_type:T headers:T body:X at:F
trigger_ids space:T id:T
triggers space:T id:T rev:I body:T name:N
changes space:T seq:I trigger_id:T op:T rev:I body:T at:T writer:T order=seq
leases space:T active:T term:I expires_at:E want:T
history_terms space:T term:I holder:T began:E ended:E how:T
fires space:T trigger_id:T key:T term:I peer:T claimed_at:S claim_id:T run_id:T status:T
  reason:T started_at:F late_ms:F n:I identity=n@rowid
programs space:T name:T version:I source:T sha256:T any_tool:B created_at:T publisher:T
devices space:T peer:T name:T priority:I last_seen:F live_since:F status:T instance:T
  stopped:B
runs seq:I space:T run_id:T trigger_id:T status:T started_at:F failure:B body:T
  key=(space,run_id) order=seq identity=seq
run_rollups space:T trigger_id:T status:T count:I last_run_at:T
agent_turns seq:I space:T turn_id:T object_id:T started_at:F failure:B body:T
  key=(space,turn_id) order=seq identity=seq
state space:T trigger_id:T key:T value:T updated_at:T
history_revisions space:T trigger_id:T rev:I seq:I at:F op:T actor:T note:T changes:T
  record:T
history_windows space:T peer:T began:F last_seen:F stopped:B slept:F applied_seq:I
history_applied space:T peer:T at:F seq:I
history_offsets space:T peer:T at:F offset_ms:F
history_refusals space:T trigger_id:T key:T at:F peer:T term:I code:T detail:T
history_subscriptions space:T peer:T object_id:T began:F ended:F resumed:B id:I
  identity=id@rowid
chats object_id:T space:T name:T created_at:T last_seq:I key=(object_id)
chat_messages object_id:T seq:I message_id:T created_ts:F body:T order=seq
"""
_KEEP_LARGER = {"chats": " DO UPDATE SET last_seq = greatest(chats.last_seq, excluded.last_seq)"}


def _tables(text: str) -> tuple[Table, ...]:
    tables = []
    for line in text.replace("\n  ", " ").strip().splitlines():
        name, *words = line.split()
        cols = tuple((w.split(":")[0], KINDS[w.split(":")[1]]) for w in words if ":" in w)
        opts = dict(w.split("=", 1) for w in words if "=" in w)
        identity, _, rowid = opts.get("identity", "").partition("@")
        key = opts.get("key", "").replace(",", ", ")
        order = opts.get("order", "rowid")
        tables.append(Table(name, cols, key, order, identity, rowid == "rowid"))
    return tuple(tables)


TABLES = _tables(MAP)  # in this order; a table's rows in `order`
# Not copied: history_meta (its 'since' is merged as the earlier) and feeds (set from changes).
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
            _float(since[0]),
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
        f"ON CONFLICT {t.key}{_KEEP_LARGER.get(t.name, ' DO NOTHING')}"
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
    return "body" if kind is _name else column


def _batches(
    lite: sqlite3.Connection, source: Path, t: Table, sql: str
) -> Iterator[list[tuple[object, ...]]]:
    try:
        cursor = lite.execute(sql)
    except sqlite3.DatabaseError as exc:
        raise Refused(f"--from: {source}: table {t.name}: {exc}") from None
    n = 0
    while rows := cursor.fetchmany(BATCH):
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
