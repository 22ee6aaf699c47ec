"""The PostgreSQL store's faults: a connection not had in time, or a lost database, is a 503.

Owns `BoundedPool` (the store's pool, every connection asked for within `ACQUIRE_S`, else
`storage.Stalled`), the middleware that answers a lost, refused or shut-down database
`503 storage_unavailable` (fault `unavailable`) as `storage.guard` answers SQLite's faults,
and `/healthz` on PostgreSQL: one `SELECT 1` on the pool within `HEALTH_S`, else 503 with
the body SQLite's stall has. Must not hold the store's queries.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

import asyncpg
from aiohttp import web

from core.clock import SystemClock
from space import storage
from space.appstate import CLOCK
from space.http import Handler, answer
from space.servertime import iso
from space.storage import STORAGE, Stalled

ACQUIRE_S = 5.0  # a request that has no connection this long after asking: 503, not a hang
HEALTH_S = 2.5  # /healthz's ping: its connection and its `SELECT 1`, within this
_TICKS = SystemClock()
LOST = (  # the database is gone, refused us, or is shutting down: not a bug of the request
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.OperatorInterventionError,
    asyncpg.InsufficientResourcesError,
)


class Unavailable(Exception):
    """No connection to the database could be made (refused, unreachable)."""


class BoundedPool:
    """`asyncpg.Pool`'s query methods and `acquire`, each connection had within `wait`."""

    def __init__(self, pool: asyncpg.Pool, wait: float = ACQUIRE_S) -> None:
        self.pool, self.wait = pool, wait

    def acquire(self, wait: float | None = None) -> _Acquire:
        return _Acquire(self.pool, self.wait if wait is None else wait)

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async with self.acquire() as conn:
            return await conn.fetch(query, *args)

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        async with self.acquire() as conn:
            return await conn.fetchrow(query, *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        async with self.acquire() as conn:
            return await conn.fetchval(query, *args)

    async def execute(self, query: str, *args: Any) -> str:
        async with self.acquire() as conn:
            return await conn.execute(query, *args)

    async def close(self) -> None:
        await self.pool.close()


class _Acquire:
    def __init__(self, pool: asyncpg.Pool, wait: float) -> None:
        self._ctx = pool.acquire(timeout=wait)
        self.wait = wait

    async def __aenter__(self) -> asyncpg.Connection:
        try:
            return await self._ctx.__aenter__()
        except TimeoutError:
            raise Stalled(f"no database connection was free in {self.wait:g} s") from None
        except LOST as exc:
            raise Unavailable(f"the database cannot be reached: {exc}") from exc

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._ctx.__aexit__(t, e, tb)


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A database lost or refused under a request is a 503 (`storage.guard` has the stall)."""
    try:
        return await handler(request)
    except (Unavailable, *LOST) as exc:
        if isinstance(exc, OSError) and not isinstance(exc, Unavailable) and not _pg(exc):
            raise  # a client's socket, not the database's
        request.app[STORAGE].seen["unavailable"] += 1
        return storage.refusal("unavailable", str(exc) or type(exc).__name__)


def _pg(exc: BaseException) -> bool:
    """Whether an OSError came out of asyncpg (a database socket), by its traceback."""
    tb = exc.__traceback__
    while tb is not None:
        if "asyncpg" in tb.tb_frame.f_code.co_filename:
            return True
        tb = tb.tb_next
    return False


def healthz(pool: Callable[[], BoundedPool]) -> Handler:
    """`/healthz` on PostgreSQL: a connection and `SELECT 1` within `HEALTH_S`."""

    async def get_healthz(request: web.Request) -> web.StreamResponse:
        app, retry = request.app, {"Retry-After": str(storage.RETRY_AFTER_S)}
        began = _TICKS.monotonic()
        try:
            async with _TICKS.timeout(HEALTH_S), pool().acquire(HEALTH_S) as conn:
                await conn.fetchval("SELECT 1")
        except (TimeoutError, Stalled):
            took = _TICKS.monotonic() - began
            return answer(_stall_view(took, app[CLOCK]()), 503, retry)
        except (Unavailable, *LOST) as exc:
            view = {"storage": "unavailable", "detail": str(exc), "since": iso(app[CLOCK]())}
            return answer({"status": "storage_unavailable", **view}, 503, retry)
        return answer({"status": "ok"})

    return get_healthz


def _stall_view(seconds: float, now: datetime) -> dict[str, object]:
    """The body of SQLite's stall (`metrics._stall_view`), for a ping not answered in time."""
    return {
        "status": "storage_unavailable",
        "storage": "stalled",
        "detail": f"the database has not answered a ping in {seconds:.1f} s",
        "since": iso(now - timedelta(seconds=seconds)),
        "stalledFor": round(seconds, 3),
    }
