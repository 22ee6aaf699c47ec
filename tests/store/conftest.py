"""The two stores of the seam as one parametrized fixture (PostgreSQL's: tests/pgfixtures.py);
`other_store` is a second server's store on the same database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from space.app import create_app
from space.dbthread import DB_THREAD
from space.store import STORE, Store
from space.store.postgres import PostgresStore


@pytest.fixture(params=["sqlite", "postgres"])
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the `store` of this case lives: a SQLite file or a PostgreSQL database."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_dsn"))
    return str(tmp_path / "space.db")


@pytest.fixture
async def store(store_target: str) -> AsyncIterator[Store]:
    """Each store of the seam in turn, empty, deciding by its own clock."""
    if store_target.startswith("postgresql://"):
        made = await PostgresStore.open(store_target, max_size=20)
        yield made
        await made.close()
        return
    app = create_app(store_target)  # the server's own SQLite store, with every table
    yield app[STORE]
    app[DB_THREAD].close_blocking()


@pytest.fixture
async def other_store(store_target: str, store: Store) -> AsyncIterator[Store]:
    """Another server on the database of `store`: a pool of its own, or a second app on the
    same SQLite file."""
    if store_target.startswith("postgresql://"):
        made = await PostgresStore.open(store_target, max_size=5)
        yield made
        await made.close()
        return
    app = create_app(store_target)
    yield app[STORE]
    app[DB_THREAD].close_blocking()
