"""Fixtures of the space server tests: a settable server clock and an admin caller.

A module with `BOTH_STORES = True` runs each test against a server whose store seam is
SQLite and again on PostgreSQL (`store_kind`), but for tests marked `sqlite_only`: those
read the SQLite file or move the fake clock, which the PostgreSQL store does not go by.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from space_support import SPACE, Api, FakeClock

from space.app import create_app, default_admin_token_file
from space.store import STORE
from space.store.postgres import PostgresStore


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    both = getattr(metafunc.module, "BOTH_STORES", False)
    if not both or "store_kind" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("sqlite_only") is None:
        metafunc.parametrize("store_kind", ["sqlite", "postgres"], indirect=True)


@pytest.fixture
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def store_dsn(store_kind: str, request: pytest.FixtureRequest) -> str | None:
    """The PostgreSQL database of a `postgres` case; None on SQLite."""
    return str(request.getfixturevalue("pg_dsn")) if store_kind == "postgres" else None


@pytest.fixture
def space_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def api(
    tmp_path: Path,
    space_clock: FakeClock,
    aiohttp_client: Any,
    store_kind: str,
    request: pytest.FixtureRequest,
) -> Api:
    db_path = tmp_path / "space.db"
    app = create_app(db_path, clock=space_clock, lease_seconds=15, live_seconds=15)
    if store_kind == "postgres":  # the routes behind the seam answer from PostgreSQL
        store = await PostgresStore.open(str(request.getfixturevalue("pg_dsn")))
        app[STORE] = store
        app.on_cleanup.append(lambda _: store.close())
        await store.ensure_admin_token(default_admin_token_file(db_path))  # the file's token
    client = await aiohttp_client(app)
    token = default_admin_token_file(db_path).read_text().strip()
    admin = Api(client, token, db_path)
    status, body = await admin.post("/spaces", {"id": SPACE, "name": "Home"})
    assert status == 201, body
    return admin
