"""Opening the app's store: a SQLite file at once, or PostgreSQL at startup; what each needs.

Owns `open_store`, the one place a store is opened. On a path: the database thread, every
SQLite table (`sqlite.ensure_schemas`, one list in order), the admin token file, and what
only SQLite has (a stall of its thread, or storage recovering, credits leases). On a
`postgresql://` DSN: `PostgresStore` (migrated) and its `Wakes` listener opened in
`cleanup_ctx` (before every area's), the token file accepted or minted through the seam,
`/healthz` pinging the pool (`pghealth`); no file is made but the token's. Wakes reach the
streams (`route_wakes`). Must not hold routes' logic.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import cast

import asyncpg
import msgspec
from aiohttp import web

from space import changes, chat_stream, chats, leases, pghealth, token_store
from space.appstate import ADMIN_TOKEN_PATH, CLOCK
from space.db import DB
from space.dbthread import start
from space.storage import STORAGE
from space.store import STORE
from space.store.pgwake import Wakes
from space.store.postgres import PostgresStore
from space.store.sqlite import SqliteStore, ensure_schemas

log = logging.getLogger("baton.space")


class PgOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How a server uses PostgreSQL: its pool's size, and whether it LISTENs (False behind
    PgBouncer in transaction mode: it polls every `poll_every` seconds instead)."""

    pool_size: int = 10
    acquire_s: float = pghealth.ACQUIRE_S  # a request without a connection this long: 503
    listen: bool = True
    poll_every: float = 1.0
    ping_every: float = 10.0


WAKES = web.AppKey("pg_wakes", Wakes)  # a PostgreSQL server's listener (tests kill it)


def is_dsn(db: str | Path) -> bool:
    return isinstance(db, str) and db.startswith(("postgresql://", "postgres://"))


def open_store(
    app: web.Application, db: str | Path, token_file: Path, pg: PgOptions | None = None
) -> None:
    """`app[STORE]` on the SQLite file or the PostgreSQL DSN `db`, the admin token in
    `token_file`."""
    app[ADMIN_TOKEN_PATH] = token_file
    if is_dsn(db):
        _open_postgres(app, str(db), token_file, pg or PgOptions())
        return
    thread = start(app, db)  # the connection lives in the database thread
    app[DB] = thread.db
    app[STORE] = SqliteStore(thread, app[CLOCK])
    thread.blocking(ensure_schemas, app[CLOCK]().timestamp())
    thread.blocking(token_store.ensure_admin_token, token_file, app[CLOCK]().timestamp())
    thread.on_stall.append(leases.credit_stall)
    app[STORAGE].recovered.append(lambda began, s: leases.credit_stall(thread.db, began, s))


class _NotOpen:
    def __getattr__(self, name: str) -> object:
        raise RuntimeError("the PostgreSQL store opens at the app's startup")


def _open_postgres(app: web.Application, dsn: str, token_file: Path, pg: PgOptions) -> None:
    """The store's object now (handlers find it), its pool and listener at startup."""
    store = PostgresStore(cast(asyncpg.Pool, _NotOpen()))
    app[STORE] = store
    app[WAKES] = wakes = Wakes(
        dsn, route_wakes(app), listen=pg.listen, ping_every=pg.ping_every, poll_every=pg.poll_every
    )
    app.router.add_get("/healthz", pghealth.healthz(lambda: cast(pghealth.BoundedPool, store.pool)))

    async def opened(_: web.Application) -> None:
        made = await PostgresStore.open(dsn, max_size=pg.pool_size)
        store.pool = cast(asyncpg.Pool, pghealth.BoundedPool(made.pool, pg.acquire_s))
        try:
            await store.ensure_admin_token(token_file)
        except BaseException:
            store.pool = cast(asyncpg.Pool, _NotOpen())
            await made.close()
            raise
        wakes.start()

    async def lifetime(app: web.Application) -> AsyncIterator[None]:
        """Open before the areas' own contexts start (the history's pruner), close after."""
        await opened(app)
        try:
            yield
        finally:
            await wakes.stop()
            await store.close()

    app.cleanup_ctx.append(lifetime)


def route_wakes(app: web.Application) -> Callable[[str | None], None]:
    """`Wakes`' hints to this server's streams: `feed:<space>` to that space's change
    streams, `chat:<objectId>` to that chat's, None to every stream (re-read every cursor).
    Hints arriving together are told once each, at the loop's next turn."""
    pending: set[str | None] = set()

    def flush() -> None:
        topics = set(pending)
        pending.clear()
        if None in topics:
            changes.wake(app, None)
            chat_stream.wake(app[chats.TOPICS], None)
            return
        for topic in topics:
            kind, _, key = (topic or "").partition(":")
            if kind == "feed":
                changes.wake(app, key)
            elif kind == "chat":
                chat_stream.wake(app[chats.TOPICS], key)
            elif kind == "edit":
                _edited_elsewhere(app, key)

    def wake(topic: str | None) -> None:
        if not pending:
            asyncio.get_running_loop().call_soon(flush)
        pending.add(topic)

    return wake


_EDITS: set[asyncio.Task[None]] = set()  # reads of messages edited on another server
_AGAIN: dict[tuple[str, str, str], bool] = {}  # a message being read: read it once more after


def _edited_elsewhere(app: web.Application, key: str) -> None:
    """`<objectId>/<messageId>@<origin>`: another server edited the message; this server's
    streams of its chat get the `update` as stored (none for this server's own edit). The
    reads of one message are one after another, so its updates go out in the order of its
    edits (a burst of hints, one read more)."""
    where, _, origin = key.rpartition("@")
    object_id, _, message_id = where.partition("/")
    store = cast(PostgresStore, app[STORE])
    if origin == store.origin or not message_id or not app[chats.TOPICS].count(object_id):
        return
    reading = (store.origin, object_id, message_id)
    if reading in _AGAIN:
        _AGAIN[reading] = True
        return
    _AGAIN[reading] = False

    async def tell() -> None:
        try:
            while True:
                found = await store.message(object_id, message_id)
                if found is not None:
                    seq, body = found
                    app[chats.TOPICS].publish(object_id, (seq, body, chat_stream.UPDATE))
                if not _AGAIN[reading]:
                    return
                _AGAIN[reading] = False
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("an edit of %s not read: %s", message_id, exc)
        finally:
            del _AGAIN[reading]

    task = asyncio.create_task(tell(), name="baton-edit-elsewhere")
    _EDITS.add(task)
    task.add_done_callback(_EDITS.discard)
