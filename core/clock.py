"""The one place that reads time or sleeps.

Owns `Clock` (aware UTC wall clock, monotonic clock, async sleep, `timeout()`), the real
`SystemClock`, the tests' `FakeClock` (time moves only on `advance()`) and `sleep_or_wake`
(a deadline *or* a change, never polling). Nothing else in `runtime/` or `space/` may read
a clock or sleep on time; see docs/architecture.md, "Module notes".
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Protocol

from core.vocab import iso as iso  # the one wire format, taken here with the Clock


class Clock(Protocol):
    def wall(self) -> datetime:
        """Now, as an aware UTC datetime."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (it may stop while the machine sleeps)."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        """A deadline on an `async with` block: TimeoutError once `seconds` pass."""
        ...


class SystemClock:
    """The machine's clocks and the event loop's sleep."""

    def wall(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        return asyncio.timeout(seconds)


async def sleep_or_wake(clock: Clock, seconds: float, wake: asyncio.Event) -> bool:
    """Sleep on `clock` until `seconds` pass or `wake` is set; True when woken.

    The event is left set: the caller clears it once it has acted on the change.
    """
    if wake.is_set():
        return True
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    waker = asyncio.ensure_future(wake.wait())
    try:
        await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (sleeper, waker):
            task.cancel()
        await asyncio.gather(sleeper, waker, return_exceptions=True)
    return wake.is_set()


class FakeClock:
    """A clock that moves only on `advance()`; sleepers wake when their deadline is reached."""

    def __init__(self, start: datetime | None = None) -> None:
        self._start = start or datetime(2026, 1, 1, tzinfo=UTC)
        if self._start.tzinfo is None:
            raise ValueError("start: must be an aware datetime")
        self._elapsed = 0.0
        self._wall_offset = 0.0  # wall-only jumps: a suspend, or the wall clock being set
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._changed = asyncio.Event()
        self.slept: list[float] = []  # every duration asked of sleep(), in order

    def wall(self) -> datetime:
        seconds = self._elapsed + self._wall_offset
        return (self._start + timedelta(seconds=seconds)).astimezone(UTC)

    def monotonic(self) -> float:
        return self._elapsed

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._elapsed + seconds, next(self._order), future))
        self._changed.set()
        await future

    @asynccontextmanager
    async def timeout(self, seconds: float) -> AsyncIterator[object]:
        """The loop's timeout, moved to now when `advance()` reaches the deadline."""
        async with asyncio.timeout(None) as scope:
            due = asyncio.get_running_loop().create_future()
            heapq.heappush(self._sleepers, (self._elapsed + seconds, next(self._order), due))
            due.add_done_callback(lambda f: None if f.cancelled() else scope.reschedule(0))
            self._changed.set()
            if seconds <= 0:
                scope.reschedule(0)
            try:
                yield scope
            finally:
                due.cancel()

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline is now due."""
        if seconds < 0:
            raise ValueError("seconds: time cannot go back")
        self._elapsed += seconds
        while self._sleepers and self._sleepers[0][0] <= self._elapsed:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)

    def jump_wall(self, seconds: float) -> None:
        """Move the wall clock alone (either way), as a suspend or a clock step does."""
        self._wall_offset += seconds

    def advance_to_next(self) -> float:
        """Advance to the earliest pending deadline; return how far time moved (0 if none)."""
        pending = [deadline for deadline, _, future in self._sleepers if not future.done()]
        step = max(0.0, min(pending) - self._elapsed) if pending else 0.0
        self.advance(step)
        return step

    @property
    def sleepers(self) -> int:
        """How many sleeps are pending (cancelled ones excluded)."""
        return sum(1 for *_, future in self._sleepers if not future.done())

    async def wait_for_sleepers(self, count: int = 1) -> None:
        """Return once at least `count` sleeps are pending (wrap in a deadline)."""
        while self.sleepers < count:
            self._changed.clear()
            await self._changed.wait()
