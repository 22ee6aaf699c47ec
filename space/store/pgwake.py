"""The PostgreSQL store's wake-ups: one listener connection a server, a hint and nothing more.

Owns `Wakes`: a dedicated connection (never a pooled one) that LISTENs on `CHANNEL`, where
a feed append says `feed:<space>` and a message `chat:<objectId>` (`postgres`), and calls
`wake(topic)`. A notification is only a hint: after every (re)connect it calls
`wake(None)` — re-read every cursor, since what was notified while it was down is lost —
it pings its own connection to find a dead one (asyncpg notices a dead TCP peer late),
and while it cannot listen (no database, PgBouncer in transaction mode: `listen=False`)
it calls `wake(None)` every `poll_every` seconds. Must not read the feed itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import asyncpg

log = logging.getLogger("baton.space")

CHANNEL = "baton_changes"
_LOST = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)


class Wakes:
    def __init__(
        self,
        dsn: str,
        wake: Callable[[str | None], None],
        *,
        listen: bool = True,
        ping_every: float = 10.0,
        poll_every: float = 1.0,
    ) -> None:
        self.dsn, self.wake, self.listen = dsn, wake, listen
        self.ping_every, self.poll_every = ping_every, poll_every
        self.connects = 0  # listener connections made: a reconnect shows here
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="baton-pg-wakes")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            if self.listen:
                with contextlib.suppress(*_LOST):
                    await self._listen()
            self.wake(None)  # polling: no listener now, so every cursor is read again
            await asyncio.sleep(self.poll_every)

    async def _listen(self) -> None:
        """Listen until the connection is lost; returns (or raises) when it is."""
        conn = await asyncpg.connect(self.dsn)
        lost = asyncio.Event()
        try:
            conn.add_termination_listener(lambda _conn: lost.set())
            await conn.add_listener(CHANNEL, self._notified)
            self.connects += 1
            self.wake(None)  # what was written while nobody listened
            while not lost.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(lost.wait(), self.ping_every)
                    continue
                await asyncio.wait_for(conn.fetchval("SELECT 1"), self.ping_every)
            log.warning("the listener connection was lost; listening again")
        finally:
            conn.terminate()

    def _notified(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        self.wake(payload)
