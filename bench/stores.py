"""The store seam's decisions per second, SQLite and PostgreSQL side by side in one run.

Run: .venv/bin/python bench/stores.py [N]   (default 2,000 claims; about 15 s)

Claims of distinct keys under a held lease (each one the fenced `INSERT … ON CONFLICT`),
64 in flight; then feed appends (`seq` from the counter row), 8 writers. PostgreSQL is a
throwaway cluster of Debian's package (tests/pgcluster.py: `fsync=off`, so these are
upper bounds), through 1 pool and through 3 pools (three servers' worth) on one database.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[0:1] = [str(ROOT), str(ROOT / "tests")]  # the `space` package, not bench/space.py

from pgcluster import Cluster, binaries  # noqa: E402

from space import leases  # noqa: E402
from space.app import create_app  # noqa: E402
from space.change_log import Change  # noqa: E402
from space.dbthread import DB_THREAD  # noqa: E402
from space.store import STORE, ClaimIn, Store  # noqa: E402
from space.store.postgres import PostgresStore  # noqa: E402

SPACE = "home"
IN_FLIGHT = 64


async def rates(stores: list[Store], count: int) -> tuple[float, float]:
    """(claims/s, appends/s) spreading the work over `stores` (all on one database)."""
    length = timedelta(minutes=5)
    await stores[0].change_lease(
        SPACE, lambda lease, now: leases.acquire(lease, "a", 0, now, length)
    )
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def claim(n: int) -> None:
        async with gate:
            fire = ClaimIn(
                space=SPACE, trigger_id="t", key=f"k{n}", term=1, peer="a", floating=True
            )
            await stores[n % len(stores)].claim(fire)

    start = time.perf_counter()
    await asyncio.gather(*(claim(n) for n in range(count)))
    claims = count / (time.perf_counter() - start)

    async def writer(w: int) -> None:
        for n in range(count // 8):
            await stores[w % len(stores)].append_change(Change(SPACE, "t", "update", n, "{}", "at"))

    start = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(8)))
    return claims, count / (time.perf_counter() - start)


def show(what: str, figures: tuple[float, float]) -> None:
    print(f"{what:<22} claims/s {figures[0]:8.0f}   appends/s {figures[1]:8.0f}")


async def main(count: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(Path(tmp) / "space.db")
        show("sqlite", await rates([app[STORE]], count))
        app[DB_THREAD].close_blocking()
    bin_dir = binaries()
    if bin_dir is None:
        print("postgresql: not installed")
        return
    cluster = Cluster(bin_dir)
    cluster.start()
    try:
        for pools in (1, 3):
            name = cluster.next_name()
            cluster.create_database(name)
            stores: list[Store] = [
                await PostgresStore.open(cluster.dsn(name)) for _ in range(pools)
            ]
            figures = await rates(stores, count)
            show(f"postgresql, {pools} pool(s)", figures)
            for store in stores:
                await store.close()
    finally:
        cluster.stop()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000))
