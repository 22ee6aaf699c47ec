"""The space store: one SQLite file (WAL) opened through sqlite-utils.

Owns opening the database and the app key under which handlers find it. Each
area of the API (records, chats, …) creates its own tables with its own
`ensure_schema(db)`; this module must not know their shapes.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlite_utils
from aiohttp import web

DB = web.AppKey("db", sqlite_utils.Database)


def open_db(path: str | Path) -> sqlite_utils.Database:
    """Open (creating) the store at `path`: WAL, so a killed server loses no acknowledged write."""
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=5000")
    return sqlite_utils.Database(conn)


@contextmanager
def transaction(db: sqlite_utils.Database) -> Iterator[None]:
    """All or nothing: `BEGIN IMMEDIATE` … `COMMIT`, rolled back on any exception."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
