"""Fixtures of the space server tests: a settable server clock and an admin caller.

A module with `BOTH_STORES = True` runs each test against a server whose store seam is
SQLite and again on PostgreSQL (`store_kind`), but for tests marked `sqlite_only`: those
read the SQLite file or move the fake clock, which the PostgreSQL store does not go by.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from space_support import Api, FakeClock, serve


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
    dsn = str(request.getfixturevalue("pg_dsn")) if store_kind == "postgres" else None
    return await serve(aiohttp_client, tmp_path / "space.db", space_clock, dsn)
