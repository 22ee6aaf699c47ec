"""The space store: one SQLite file (WAL) opened through sqlite-utils.

Owns opening the database (created owner-only) and the app key under which handlers find
it, the one transaction helper, and timing transactions for stalls (`watch_stalls`: a hung
disk holds the whole server). Each area of the API (records, chats, …) creates its own
tables with its own `ensure_schema(db)`; this module must not know their shapes.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
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


StallHook = Callable[[sqlite_utils.Database, float, float], None]
STALL_S = 2.0  # a transaction that held the server this long was a stall of the disk


class _Watch:
    def __init__(self, clock: Callable[[], datetime], hook: StallHook) -> None:
        self.clock, self.hook = clock, hook


_WATCHED: weakref.WeakKeyDictionary[sqlite_utils.Database, _Watch] = weakref.WeakKeyDictionary()


def watch_stalls(db: sqlite_utils.Database, clock: Callable[[], datetime], hook: StallHook) -> None:
    """Time each transaction of `db` by `clock`; one that took over `STALL_S` (the disk
    hung: the server could not run meanwhile) is told to `hook(db, began, seconds)` right
    after it ends, before any other request runs."""
    _WATCHED[db] = _Watch(clock, hook)


@contextmanager
def transaction(db: sqlite_utils.Database) -> Iterator[None]:
    """All or nothing: `BEGIN IMMEDIATE` … `COMMIT`, rolled back on any exception.

    Inside another transaction it is a savepoint of it: undone alone on an exception,
    written with the outer one (a batch of runs applies each run and its stamps so)."""
    if db.conn.in_transaction:
        with _savepoint(db):
            yield
        return
    watch = _WATCHED.get(db)
    began = watch.clock() if watch is not None else None
    try:
        with _outermost(db):
            yield
    finally:
        if watch is not None and began is not None:
            took = (watch.clock() - began).total_seconds()
            if took > STALL_S:
                watch.hook(db, began.timestamp(), took)


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
