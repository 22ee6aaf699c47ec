"""For the space server tests: a real server on 127.0.0.1, a settable clock, a small JSON caller."""

from __future__ import annotations

import io
import os
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import sqlite_utils
from aiohttp.test_utils import TestClient

from space.app import create_app, default_admin_token_file
from space.dbthread import db_call
from space.opening import PgOptions
from space.servertime import ServerClock
from space.store import STORE
from space.store.postgres import PostgresStore

POLL_ONLY = "BATON_TEST_PG_POLL_ONLY"  # set: PostgreSQL servers poll, never LISTEN (PgBouncer)

T = TypeVar("T")

SPACE = "home"
CRON = {"name": "tick", "kind": "cron", "spec": {"expr": "*/5 * * * *"}, "program": "tick@v1"}


async def on_db(api: Api, fn: Callable[[sqlite_utils.Database], T]) -> T:
    """`fn(db)` on the server's database thread, the only one that may use its connection."""
    app = api.client.server.app
    assert app is not None
    return await db_call(app, fn)


class FakeClock:
    """The server's clock, moved by the test."""

    def __init__(self, start: datetime = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Api:
    """JSON calls to the space with a bearer token; answers `(status, body)`."""

    def __init__(self, client: TestClient, token: str, db_path: Path) -> None:
        self.client, self.token, self.db_path = client, token, db_path
        self.created = 0  # records made by `create_trigger`: names are unique in a space

    def as_(self, token: str) -> Api:
        return Api(self.client, token, self.db_path)

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
        token: str | None = None,
    ) -> tuple[int, Any]:
        h = {"Authorization": f"Bearer {token or self.token}", **(headers or {})}
        kwargs: dict[str, Any] = {"data": io.BytesIO(data)} if data is not None else {"json": body}
        if body is None and data is None:
            kwargs = {}
        async with self.client.request(method, "/v1" + path, headers=h, **kwargs) as resp:
            return resp.status, await resp.json()

    async def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        return await self.call("GET", path, **kw)

    async def post(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return await self.call("POST", path, body, **kw)

    async def put(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return await self.call("PUT", path, body, **kw)

    async def patch(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return await self.call("PATCH", path, body, **kw)

    async def delete(self, path: str, **kw: Any) -> tuple[int, Any]:
        return await self.call("DELETE", path, **kw)

    async def device_token(self, peer: str, space: str = SPACE) -> str:
        status, body = await self.post("/tokens/device", {"peer": peer, "space": space})
        assert status == 201, body
        return body["token"]

    async def create_trigger(self, **fields: Any) -> dict[str, Any]:
        """A cron record; named `tick`, then `tick-2`, … unless `name` is given."""
        self.created += 1
        name = CRON["name"] + ("" if self.created == 1 else f"-{self.created}")
        status, body = await self.post(
            f"/spaces/{SPACE}/triggers", {**CRON, "name": name, **fields}
        )
        assert status == 201, body
        return body


def snapshot(db_path: Path) -> list[str]:
    """Every row of every table, as SQL text: equal snapshots mean nothing was written."""
    conn = sqlite3.connect(db_path)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def rows(api: Api, sql: str) -> list[tuple[Any, ...]]:
    """The rows `sql` reads from the space's file, on a connection of its own."""
    conn = sqlite3.connect(api.db_path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


async def serve(
    aiohttp_client: Any, db_path: Path, clock: ServerClock, dsn: str | None = None
) -> Api:
    """A space server on `db_path` by `clock` (with `dsn`: on that PostgreSQL database, every
    route answering from it, no SQLite file), with the space `SPACE`; its admin caller."""
    token_file = default_admin_token_file(db_path)
    pg = PgOptions(listen=False, poll_every=0.05) if os.environ.get(POLL_ONLY) else None
    app = create_app(
        dsn or db_path,
        admin_token_file=token_file,
        pg=pg,
        clock=clock,
        lease_seconds=15,
        live_seconds=15,
    )
    client = await aiohttp_client(app)
    token = default_admin_token_file(db_path).read_text().strip()
    admin = Api(client, token, db_path)
    status, body = await admin.post("/spaces", {"id": SPACE, "name": "Home"})
    assert status == 201, body
    return admin


async def store_rows(api: Api, sql: str) -> list[tuple[Any, ...]]:
    """The rows `sql` (no parameters) reads from the server's store: its SQLite file, or its
    PostgreSQL database when the seam is there."""
    app = api.client.server.app
    assert app is not None
    store = app[STORE]
    if isinstance(store, PostgresStore):
        return [tuple(row) for row in await store.pool.fetch(sql)]
    return rows(api, sql)
