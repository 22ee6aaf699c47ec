"""Append-only logs kept per key and pruned by count and age: run records, agent turns.

Owns the queries such a log needs: whether an entry is written already (each is written
once by its id: the same body again changes nothing, another body is refused), pruning
one key's rows (failures kept longer than successes, by `RunRetention`) and listing rows
oldest first, from `since` or the latest `limit`. A log table has the columns `seq`
(autoincrement), `space`, `started_at` (unix seconds), `failure` (0/1), `body` (JSON), its
id column and one key column. Table and column names are this package's constants, never
request input.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import msgspec
import sqlite_utils

from core.wire import Aware
from space import oddrows
from space.appstate import RunRetention
from space.http import Refusal


def written(
    db: sqlite_utils.Database, table: str, id_column: str, space: str, entry_id: str, body: str
) -> bool:
    """Whether this very entry is in the log already (then nothing is to be written);
    409 `<entry>_exists` when its id holds other content (`runs` → `run_exists`)."""
    row = db.execute(
        f"SELECT body FROM {table} WHERE space = ? AND {id_column} = ?", [space, entry_id]
    ).fetchone()
    if row is None:
        return False
    if row[0] != body:
        raise conflict(id_column, entry_id)
    return True


def conflict(id_column: str, entry_id: str) -> Refusal:
    """409 `<entry>_exists`: another entry holds this id."""
    what = id_column.removesuffix("_id")
    return Refusal(409, f"{what}_exists", f"{what} {entry_id!r} exists with other content")


def stored(
    db: sqlite_utils.Database, table: str, id_column: str, space: str, ids: list[str]
) -> dict[str, str]:
    """The bodies written under `ids` (one query), by id."""
    marks = ", ".join("?" * len(ids))
    rows = db.execute(
        f"SELECT {id_column}, body FROM {table} WHERE space = ? AND {id_column} IN ({marks})",
        [space, *ids],
    ).fetchall()
    return {row[0]: row[1] for row in rows}


def prune(
    db: sqlite_utils.Database,
    table: str,
    key_column: str,
    space: str,
    key: str,
    failure: bool,
    keep: RunRetention,
    now: datetime,
) -> None:
    """Keep the newest rows of `key` of this kind (failures or not) within count and age."""
    prune_key(db, table, key_column, space, key, failure, keep)
    prune_age(db, table, space, failure, keep, now)


def prune_key(
    db: sqlite_utils.Database,
    table: str,
    key_column: str,
    space: str,
    key: str,
    failure: bool,
    keep: RunRetention,
) -> None:
    """Keep the newest rows of `key` of this kind (failures or not) within their count."""
    count = keep.failure_per_trigger if failure else keep.ok_per_trigger
    db.execute(  # the rows past the newest `count`: a walk of the index, no set of the kept
        f"DELETE FROM {table} WHERE seq IN (SELECT seq FROM {table} WHERE space = ? AND "
        f"{key_column} = ? AND failure = ? ORDER BY started_at DESC, seq DESC LIMIT -1 OFFSET ?)",
        [space, key, failure, count],
    )


def prune_age(
    db: sqlite_utils.Database,
    table: str,
    space: str,
    failure: bool,
    keep: RunRetention,
    now: datetime,
) -> None:
    """Drop the space's rows of this kind older than their age."""
    days = keep.failure_days if failure else keep.ok_days
    cutoff = (now - timedelta(days=days)).timestamp()
    db.execute(
        f"DELETE FROM {table} WHERE space = ? AND failure = ? AND started_at < ?",
        [space, failure, cutoff],
    )


def query(
    db: sqlite_utils.Database,
    table: str,
    space: str,
    filters: dict[str, str],
    since: float | None,
    limit: int,
) -> list[dict[str, Any]]:
    """Bodies oldest first: from `since` (unix seconds, `instant`) on if given, else the
    latest `limit`."""
    params: list[object]
    where, params = "space = ?", [space]
    for column, value in filters.items():
        where, params = f"{where} AND {column} = ?", [*params, value]
    if since is not None:
        where, params = where + " AND started_at >= ?", [*params, since]
        order = "started_at, seq"
    else:
        order = "started_at DESC, seq DESC"
    rows = db.execute(
        f"SELECT seq, body FROM {table} WHERE {where} ORDER BY {order} LIMIT ?", [*params, limit]
    ).fetchall()
    bodies, _ = oddrows.each(rows, entry, lambda r: r[0], table)  # an odd row is left out
    return bodies if since is not None else bodies[::-1]


def one(
    db: sqlite_utils.Database, table: str, id_column: str, space: str, entry_id: str
) -> dict[str, Any] | None:
    """The body written under `entry_id`, or None (also for an odd row: it is left out)."""
    row = db.execute(
        f"SELECT seq, body FROM {table} WHERE space = ? AND {id_column} = ?", [space, entry_id]
    ).fetchone()
    bodies, _ = oddrows.each([row] if row else [], entry, lambda r: r[0], table)
    return bodies[0] if bodies else None


def entry(row: tuple[int, str]) -> dict[str, Any]:
    """A row `(seq, body)` as listed (either store); `oddrows` leaves out one that raises."""
    body = msgspec.json.decode(row[1])
    if not isinstance(body, dict):
        raise TypeError(f"a {type(body).__name__}, not a JSON object")
    return body


def instant(text: str) -> float:
    """The `since` query parameter as unix seconds; 400 naming it when it is not RFC 3339."""
    try:
        return msgspec.convert(text, Aware).timestamp()
    except msgspec.ValidationError:
        raise Refusal(
            400, "invalid_query", f"`since` must be an RFC 3339 instant with offset, got {text!r}"
        ) from None
