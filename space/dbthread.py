"""The database thread: one per app, owning its SQLite connection, one unit of work at a time.

Owns running the store's sync work off the event loop (`db_call`): the connection is opened
in the thread (sqlite3's `check_same_thread`, so a use from the loop raises at once), each
unit (one call: its whole transaction) runs there whole, in the order asked. A unit running
over `STALL_S` (monotonic) is a stall: `stalled_for` tells `/healthz` without touching the
database, `on_stall` hears of it as it ends, before the next unit runs. A unit not begun
`WAIT_S` after it was asked is dropped and raises `Stalled` (503 `storage_unavailable`).
Storage faults and commits are told to the app's `StorageState` from the thread, in the
order they happen. Must not know any table.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import sqlite_utils
from aiohttp import web

from core.clock import Clock, SystemClock
from space.appstate import CLOCK
from space.db import open_db
from space.servertime import ServerClock
from space.storage import STORAGE, Stalled, StorageState, fault_of

log = logging.getLogger("baton.space")
P = ParamSpec("P")
T = TypeVar("T")
STALL_S = 2.0  # a unit that ran this long was a stall of the disk
WAIT_S = 5.0  # a unit not begun this long after it was asked is dropped: 503, not a hang
CLOSE_WAIT_S = 5.0  # what closing waits for the unit in hand (a hung disk: not for ever)
StallHook = Callable[[sqlite_utils.Database, float, float], None]  # (db, began, seconds)
_Unit = tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DbThread:
    """The thread owning the connection to the SQLite file at `path`."""

    def __init__(
        self,
        path: str | Path,
        storage: StorageState,
        clock: ServerClock,
        ticks: Clock | None = None,
    ) -> None:
        self.storage, self.clock, self.ticks = storage, clock, ticks or SystemClock()
        self.began: float | None = None  # monotonic start of the unit in hand
        self.stalls = 0  # units that ran over STALL_S
        self.stalled_s = 0.0  # seconds units that ended ran past their first STALL_S
        self.on_stall: list[StallHook] = []  # told on the thread, before the next unit runs
        self.asked = 0  # units asked (counted by the askers)
        self.finished = 0  # units ended or dropped (counted by the thread)
        self._queue: queue.SimpleQueue[_Unit | None] = queue.SimpleQueue()
        opened: concurrent.futures.Future[sqlite_utils.Database] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._serve, args=(path, opened), name="baton-db", daemon=True
        )
        self._thread.start()
        self.db = opened.result()  # the file could not be opened: raised here

    def stalled_for(self) -> float:
        """How long the unit in hand has run, when over `STALL_S`; else 0."""
        began = self.began
        took = 0.0 if began is None else self.ticks.monotonic() - began
        return took if took > STALL_S else 0.0

    def idle(self) -> bool:
        """Whether every unit asked has ended (tests in fake time wait for it)."""
        return self.finished >= self.asked

    def stalled_total(self) -> float:
        """Seconds units ran past their first `STALL_S`, the one in hand included."""
        now = self.stalled_for()
        return self.stalled_s + (now - STALL_S if now else 0.0)

    def _serve(self, path: str | Path, opened: concurrent.futures.Future[Any]) -> None:
        try:
            db = open_db(path)
        except BaseException as exc:
            opened.set_exception(exc)
            return
        opened.set_result(db)
        while (unit := self._queue.get()) is not None:
            done, fn, args, kwargs = unit
            if not done.set_running_or_notify_cancel():
                self.finished += 1
                continue  # its asker gave up (`WAIT_S`): it never runs
            self.began, at = self.ticks.monotonic(), self.clock()
            try:
                done.set_result(self._run(db, fn, args, kwargs))
            except BaseException as exc:
                done.set_exception(exc)
            finally:
                self._ended(db, fn, at)
                self.finished += 1

    def _ended(self, db: sqlite_utils.Database, fn: object, at: datetime) -> None:
        """Count a unit that stalled, and tell `on_stall` (it credits leases) before any
        other unit runs. Its length is the monotonic one: a step of the wall clock while a
        unit runs is no stall."""
        took, self.began = self.ticks.monotonic() - (self.began or 0.0), None
        if took <= STALL_S or fn is _close:
            return
        self.stalls, self.stalled_s = self.stalls + 1, self.stalled_s + took - STALL_S
        for hook in self.on_stall:
            try:
                hook(db, at.timestamp(), took)
            except Exception:
                log.exception("a stall of the store was not told to %r", hook)

    def _run(
        self, db: sqlite_utils.Database, fn: Callable[..., T], args: tuple[Any, ...], kw: Any
    ) -> T:
        conn = db.conn
        if fn is _close:
            return fn(db)
        before = conn.total_changes
        try:
            result = fn(db, *args, **kw)
        except sqlite3.Error as exc:
            if conn.in_transaction:  # a failed COMMIT may leave it open
                conn.rollback()
            if (fault := fault_of(exc)) is not None:
                self.storage.failed(fault, str(exc), self.clock())
            raise
        if conn.total_changes != before and not conn.in_transaction:
            self.storage.committed(self.clock())
        return result

    def _ask(self, fn: Callable[..., T], args: Any, kwargs: Any) -> concurrent.futures.Future[T]:
        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        self.asked += 1
        self._queue.put((done, fn, args, kwargs))
        return done

    async def call(
        self,
        fn: Callable[Concatenate[sqlite_utils.Database, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """`fn(db, *args, **kwargs)` on the thread; `Stalled` if it could not begin in `WAIT_S`."""
        return await self.call_within(WAIT_S, fn, *args, **kwargs)

    async def call_within(
        self,
        wait: float,
        fn: Callable[Concatenate[sqlite_utils.Database, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """`fn(db, …)` on the thread; `Stalled` if it could not begin within `wait` seconds.
        The answer comes back by one `call_soon_threadsafe` into a loop future (no
        `wrap_future`), waited for under the clock's `timeout`."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[T] = loop.create_future()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        done.add_done_callback(lambda d: loop.call_soon_threadsafe(_settle, answer, d))
        self.asked += 1
        asked = self.ticks.monotonic()
        self._queue.put((done, fn, args, kwargs))
        try:
            async with self.ticks.timeout(wait):
                return await asyncio.shield(answer)
        except TimeoutError:
            if not done.cancel():  # begun: its answer is the truth, however late
                return await answer
        took = self.ticks.monotonic() - asked  # not begun: it never runs
        raise Stalled(f"the database has not taken this work up in {took:.1f} s (a hung disk?)")

    def blocking(
        self,
        fn: Callable[Concatenate[sqlite_utils.Database, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """`fn(db, …)` on the thread, waiting here: for startup and tools, never a handler."""
        assert threading.current_thread() is not self._thread
        return self._ask(fn, args, kwargs).result()

    async def close(self) -> None:
        """Close the connection on the thread after the work asked before; then it ends."""
        done = self._ask(_close, (), {})
        self._queue.put(None)
        try:
            await asyncio.wait_for(asyncio.wrap_future(done), CLOSE_WAIT_S)
        except TimeoutError:
            log.warning("the database did not close within %.0f s (a hung disk?)", CLOSE_WAIT_S)

    def close_blocking(self) -> None:
        done = self._ask(_close, (), {})
        self._queue.put(None)
        done.result(timeout=CLOSE_WAIT_S)


def _settle(answer: asyncio.Future[T], done: concurrent.futures.Future[T]) -> None:
    """On the loop: the unit's outcome into its asker's future (unless it gave up)."""
    if answer.done() or done.cancelled():
        return
    exc = done.exception()
    if exc is not None:
        answer.set_exception(exc)
    else:
        answer.set_result(done.result())


def _close(db: sqlite_utils.Database) -> None:
    db.conn.close()


DB_THREAD = web.AppKey("db_thread", DbThread)


def start(app: web.Application, path: str | Path) -> DbThread:
    """The app's database thread on the file at `path`, closed at the app's cleanup."""
    thread = app[DB_THREAD] = DbThread(path, app[STORAGE], app[CLOCK])

    async def close(_: web.Application) -> None:
        await thread.close()

    app.on_cleanup.append(close)
    return thread


async def db_call(
    app: web.Application,
    fn: Callable[Concatenate[sqlite_utils.Database, P], T],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """Run `fn(db, *args, **kwargs)` on the app's database thread: one hop, one unit."""
    return await app[DB_THREAD].call(fn, *args, **kwargs)
