"""The failover tests' household on PostgreSQL: `baton space serve` processes on one database.

`pg_house` starts three servers on the test's database (tests/pgfixtures.py); the test's
admin client talks to the first, and the devices are spread over the other two in turn,
so every write a device must see crosses servers. `KillingHousehold` SIGKILLs the server
the holder talks to once a cron has fired (and, `away_past_the_lease`, lets a device on
the other server take over), and starts it again on its port: a device is
given one URL (`baton device --url`), so it retries that address until its server is
back (docs/operations.md "Several servers"); the cron fires again before the test goes on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

from household import LEASE_FLAGS, SETTLE, SPACE, Household
from support import Procs, Servers, eventually

from runtime.client.api import SpaceClient


class KillingHousehold(Household):
    """A household whose holder's server is SIGKILLed and restarted at the cron's first run."""

    servers: Servers
    away_past_the_lease = False  # restart only once a device on another server took over
    outages: list[float]  # seconds from each SIGKILL to its server listening again
    terms: list[tuple[int, int]]  # the lease's term before each SIGKILL, and once fired again

    async def first_run(self, trigger: str) -> str:
        holder = await super().first_run(trigger)
        term = (await self.api.election(SPACE)).term
        index = self.servers.urls.index(self.url_of(holder))
        await self.servers.kill(index)
        down = datetime.now(UTC)
        if self.away_past_the_lease:
            await eventually(self._new_term(term), timeout=SETTLE, what="a takeover elsewhere")
        await self.servers.restart(index)
        up = datetime.now(UTC)
        self.outages.append((up - down).total_seconds())

        async def fired_again() -> bool:
            return any(slot > up for slot in await self.slots(trigger))

        await eventually(fired_again, timeout=SETTLE, what=f"a run after server {index} was back")
        holder = await self.holder()
        self.terms.append((term, (await self.api.election(SPACE)).term))
        return holder

    def _new_term(self, term: int) -> Callable[[], Awaitable[bool]]:
        async def taken() -> bool:
            return (await self.api.election(SPACE)).term > term

        return taken


@asynccontextmanager
async def pg_house(
    tmp_path: Path, dsn: str, kind: type[Household] = Household
) -> AsyncIterator[Household]:
    async with Procs(tmp_path) as procs:
        servers = Servers(procs, dsn, tmp_path / "admin.token", *LEASE_FLAGS)
        urls = await servers.start(3)
        admin = (tmp_path / "admin.token").read_text().strip()
        async with SpaceClient(urls[0], admin) as api:
            house = kind(procs, api, *urls[1:])
            if isinstance(house, KillingHousehold):
                house.servers, house.outages, house.terms = servers, [], []
            yield await house.prepare()
