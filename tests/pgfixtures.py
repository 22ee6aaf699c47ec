"""PostgreSQL for the tests: a real server from Debian's package, a database per test.

`pg_cluster` (one a test process) is started in a temporary directory (tests/pgcluster.py),
with a template database already migrated; `pg_dsn` is a database of its own for each
test, `CREATE DATABASE … TEMPLATE` of it. Without the package the PostgreSQL cases are
skipped locally, saying why; `.ci/run` installs it and sets `BATON_REQUIRE_POSTGRES`, so
there they fail instead. Registered for every test by tests/conftest.py.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from pgcluster import Cluster, binaries

from space.store.postgres import PostgresStore

TEMPLATE = "baton_template"


async def _migrate(dsn: str) -> None:
    store = await PostgresStore.open(dsn, max_size=1)
    await store.close()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    bin_dir = binaries()
    if bin_dir is None:
        reason = "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb)"
        if os.environ.get("BATON_REQUIRE_POSTGRES"):  # CI: `.ci/run` installs it
            pytest.fail(reason)
        pytest.skip(reason)
    cluster = Cluster(bin_dir)
    cluster.start()
    try:
        cluster.create_database(TEMPLATE)
        with ThreadPoolExecutor(1) as pool:  # a loop of its own, whatever the test's is doing
            pool.submit(asyncio.run, _migrate(cluster.dsn(TEMPLATE))).result()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_dsn(pg_cluster: Cluster) -> str:
    """A fresh database for this test, copied from the migrated template."""
    name = pg_cluster.next_name()
    pg_cluster.create_database(name, template=TEMPLATE)
    return pg_cluster.dsn(name)
