"""The change feed's table in SQLite: each record write's change, by a gapless `seq`.

Owns the `changes` table: `append` in the writing transaction (space.trigger_store),
pages read by `seq` with a device's own stamps named, not sent (space.changes, "writer"),
and a row as the API shows it. Must not write records.
"""

from __future__ import annotations

from typing import Any

import msgspec
import sqlite_utils

from space import record_view
from space.db import add_columns

Record = dict[str, Any]
SCHEMA = """
CREATE TABLE IF NOT EXISTS changes (seq INTEGER PRIMARY KEY AUTOINCREMENT,
  space TEXT NOT NULL, trigger_id TEXT NOT NULL, op TEXT NOT NULL, rev INTEGER NOT NULL,
  body TEXT, at TEXT NOT NULL, writer TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS changes_by_space ON changes (space, seq);
"""


def ensure_schema(db: sqlite_utils.Database) -> None:
    db.executescript(SCHEMA)
    add_columns(db, "changes", {"writer": "TEXT NOT NULL DEFAULT ''"})  # an older build's store


class Change(msgspec.Struct, frozen=True):
    """One change of the feed as written: `writer` marks a device's stamps, so that its own
    change stream may leave them out (space.changes, "writer")."""

    space: str
    trigger_id: str
    op: str
    rev: int
    body: str | None
    at: str
    writer: str = ""


def append(db: sqlite_utils.Database, change: Change) -> int:
    """`change` into the feed, in the caller's transaction; its `seq` (AUTOINCREMENT under
    `BEGIN IMMEDIATE`: gapless and in commit order)."""
    cur = db.execute(
        "INSERT INTO changes (space, trigger_id, op, rev, body, at, writer) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            change.space,
            change.trigger_id,
            change.op,
            change.rev,
            change.body,
            change.at,
            change.writer,
        ],
    )
    return int(cur.lastrowid or 0)


def latest(db: sqlite_utils.Database, space: str) -> int:
    row = db.execute("SELECT MAX(seq) FROM changes WHERE space = ?", [space]).fetchone()
    return int(row[0] or 0)


def since(
    db: sqlite_utils.Database, space: str, since: int, limit: int, omit: str = ""
) -> list[Record]:
    """Up to `limit` changes after `since`, oldest first; a stamp `omit` wrote only as
    `{"seq", "omitted": true}` (its body neither read nor parsed)."""
    rows = db.execute(
        "SELECT seq, trigger_id, op, rev, CASE WHEN writer = ? AND op = 'stamp' THEN NULL "
        "ELSE body END, at, writer = ? AND op = 'stamp' FROM changes "
        "WHERE space = ? AND seq > ? ORDER BY seq LIMIT ?",
        [omit or "\n", omit or "\n", space, since, limit],  # no writer is "\n"
    )
    return [
        {"seq": row[0], "omitted": True} if row[6] else view(*row[:6]) for row in rows.fetchall()
    ]


def view(seq: int, tid: str, op: str, rev: int, body: str | None, at: str) -> Record:
    """A row of the feed as the API shows it."""
    record = None if body is None else record_view.parse(body) or {"id": tid, "raw": body}
    return {"seq": seq, "triggerId": tid, "op": op, "rev": rev, "at": at, "record": record}
