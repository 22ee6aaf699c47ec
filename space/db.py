"""The space store: one SQLite file (WAL) opened through sqlite-utils.

Owns opening the database (created owner-only), the app key under which the database
thread's work finds it (`space.dbthread` owns the connection), and the one transaction
helper. Each area of the API (records, chats, …) creates its own tables with its own
`ensure_schema(db)`; this module must not know their shapes.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlite_utils
from aiohttp import web

DB = web.AppKey("db", sqlite_utils.Database)


def open_db(path: str | Path) -> sqlite_utils.Database:
    """Open (creating) the store at `path`: WAL, so a killed server loses no acknowledged write.

    A new store is created owner-only (0600, its missing directories 0700); SQLite gives
    its `-wal` and `-shm` files the mode of the database. The connection is the opening
    thread's alone (the server's: `space.dbthread`)."""
    _create_private(Path(path))
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=True)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=5000")
    return sqlite_utils.Database(conn)


def _create_private(path: Path) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):  # an existing store keeps its mode
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def add_columns(db: sqlite_utils.Database, table: str, columns: dict[str, str]) -> None:
    """Add those of `columns` (name: declaration) that `table` lacks: a store of an older build."""
    have = {column.name for column in db[table].columns}
    for name, decl in columns.items():
        if name not in have:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")


@contextmanager
def transaction(db: sqlite_utils.Database) -> Iterator[None]:
    """All or nothing: `BEGIN IMMEDIATE` … `COMMIT`, rolled back on any exception.

    Inside another transaction it is a savepoint of it: undone alone on an exception,
    written with the outer one (a batch of runs applies each run and its stamps so)."""
    if db.conn.in_transaction:
        with _savepoint(db):
            yield
        return
    with _outermost(db):
        yield


@contextmanager
def _outermost(db: sqlite_utils.Database) -> Iterator[None]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if db.conn.in_transaction:  # SQLite ends it itself on some faults (a full disk)
            db.execute("ROLLBACK")
        raise
    try:
        db.execute("COMMIT")
    except sqlite3.Error:  # a failed COMMIT (SQLITE_FULL, IOERR) may leave it open
        if db.conn.in_transaction:
            db.execute("ROLLBACK")
        raise


@contextmanager
def _savepoint(db: sqlite_utils.Database) -> Iterator[None]:
    db.execute("SAVEPOINT nested")
    try:
        yield
    except BaseException:
        if db.conn.in_transaction:
            db.execute("ROLLBACK TO nested")
            db.execute("RELEASE nested")
        raise
    db.execute("RELEASE nested")
