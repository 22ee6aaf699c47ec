"""The async kit: background tasks, retrying, capped sleeps and sleep detection, on the Clock.

Owns `TaskSet` (guarded tasks, cancelled together), `Backoff`/`Streak`/`retry()`,
`sleep_until` and `within` (the capped sleep and a timeout on the Clock) and `SleepDetector`
(the one comparison of the wall clock against the monotonic clock). Time only through the
injected `Clock`. Must not know what a task does or what a sleep means: callers decide that.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from core.clock import Clock, sleep_or_wake

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_SLEEP = 30.0  # no loop sleeps longer at once: a suspend or a clock step is seen soon after
SLEEP_THRESHOLD = 3.0  # wall vs monotonic divergence that means "the machine slept"


# --- tasks ---------------------------------------------------------------------------------


class TaskSet:
    """Background tasks owned by one component.

    Shutdown semantics (the one rule): `close()` cancels every task still running and waits
    until all have finished; nothing is drained to completion. Work that must finish
    is awaited by its owner, not spawned. After `close()`, `spawn()` refuses.

    A task's exception is logged with its name and does not touch the other tasks;
    a task spawned with `fatal=True` that fails also cancels the others (and refuses new
    ones), and its exception is re-raised by `close()`.
    """

    def __init__(self, label: str = "task") -> None:
        self._label = label
        self._tasks: set[asyncio.Task[Any]] = set()
        self._failure: BaseException | None = None
        self._closed = False

    def spawn(
        self, work: Coroutine[Any, Any, Any], *, name: str | None = None, fatal: bool = False
    ) -> asyncio.Task[Any]:
        if self._closed:
            work.close()
            raise RuntimeError(f"{self._label}: spawn after close")
        task = asyncio.get_running_loop().create_task(self._guard(work, fatal), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _: work.close())  # cancelled before it began: no warning
        return task

    async def _guard(self, work: Coroutine[Any, Any, Any], fatal: bool) -> None:
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            task = asyncio.current_task()  # this very coroutine's: never None here
            name = task.get_name() if task is not None else "?"
            log.exception("%s %s failed", self._label, name)
            if fatal:
                self._failure = self._failure or exc
                self.cancel()

    def __len__(self) -> int:
        return len(self._tasks)

    def __contains__(self, task: object) -> bool:
        return task in self._tasks

    async def wait(self) -> None:
        """Wait until every task spawned so far has finished (without cancelling any)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def cancel(self) -> None:
        """Cancel every running task now and refuse new ones (`close()` also waits)."""
        self._closed = True
        for task in self._tasks:
            task.cancel()

    async def close(self) -> None:
        """Cancel every running task and wait for all of them; re-raise a fatal failure."""
        self.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure


# --- backoff and retry ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Backoff:
    """Capped exponential backoff: min(cap, base·2^(attempt-1)), times a draw in [0, 1)
    when `jitter` (full jitter); never less than a server's Retry-After (itself capped)."""

    base: float = 1.0
    cap: float = 30.0
    jitter: bool = True

    def __post_init__(self) -> None:
        if self.base <= 0 or self.cap < self.base:
            raise ValueError("base, cap: need 0 < base <= cap")

    def delay(self, attempt: int, draw: float = 1.0, retry_after: float | None = None) -> float:
        """The wait before retry number `attempt` (1 for the first retry)."""
        full = min(self.cap, self.base * 2.0 ** max(0, attempt - 1))
        wait = draw * full if self.jitter else full
        if retry_after is None:
            return wait
        return max(wait, min(retry_after, self.cap))

    def streak(self, draw: Callable[[], float] = random.random) -> Streak:
        return Streak(self, draw)


class Streak:
    """Consecutive failures of one loop under a `Backoff`: each failure lengthens the wait,
    a success resets it."""

    def __init__(self, backoff: Backoff, draw: Callable[[], float] = random.random) -> None:
        self.backoff = backoff
        self._draw = draw
        self.failures = 0

    def failed(self, retry_after: float | None = None) -> float:
        """Count one more failure; return how long to wait before trying again."""
        self.failures += 1
        return self.backoff.delay(self.failures, self._draw(), retry_after)

    def reset(self) -> None:
        self.failures = 0


async def retry(
    work: Callable[[], Awaitable[T]],
    *,
    clock: Clock,
    backoff: Backoff = Backoff(),
    attempts: int | None = None,
    retry_if: Callable[[Exception], bool] = lambda exc: True,
    on_failure: Callable[[Exception, float], object] | None = None,
    draw: Callable[[], float] = random.random,
    until: float | None = None,
) -> T:
    """Await `work()` until it returns, sleeping through `clock` after each failure.

    Gives up (re-raises the exception) after `attempts` tries in all (None: never), once
    the next try would start past `until` (the clock's monotonic seconds; None: no
    deadline), or at once when `retry_if(exc)` is false. `on_failure(exc, delay)` hears
    each retried one."""
    streak = backoff.streak(draw)
    while True:
        try:
            return await work()
        except Exception as exc:
            if not retry_if(exc) or (attempts is not None and streak.failures + 1 >= attempts):
                raise
            delay = streak.failed()
            if until is not None and clock.monotonic() + delay > until:
                raise
            if on_failure is not None:
                on_failure(exc, delay)
            await clock.sleep(delay)


# --- sleeping ------------------------------------------------------------------------------


async def sleep_until(clock: Clock, deadline: float, wake: asyncio.Event | None = None) -> bool:
    """Sleep until `clock.monotonic()` reaches `deadline` or `wake` is set; True when woken.

    Sleeps at most `MAX_SLEEP` at once. The event is left set: the caller clears it once
    it has acted on the change."""
    while True:
        if wake is not None and wake.is_set():
            return True
        left = deadline - clock.monotonic()
        if left <= 0:
            return False
        step = min(MAX_SLEEP, left)
        if wake is None:
            await clock.sleep(step)
        elif await sleep_or_wake(clock, step, wake):
            return True


async def within(clock: Clock, seconds: float, work: Awaitable[T], what: str = "work") -> T:
    """`work`'s result, or TimeoutError once `seconds` pass on `clock` (`work` is cancelled)."""
    task = asyncio.ensure_future(work)
    timer = asyncio.ensure_future(clock.sleep(seconds))
    try:
        done, _ = await asyncio.wait((task, timer), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, timer):
            pending.cancel()
        await asyncio.gather(task, timer, return_exceptions=True)
    if task not in done:
        raise TimeoutError(f"{what} timed out after {seconds:g} s")
    return task.result()


class SleepDetector:
    """Tells a suspend or a wall-clock step from the passing of time.

    The monotonic clock stops while the machine is suspended (Linux, macOS) and never
    steps; the wall clock counts the suspend and follows clock changes. `check()` compares
    how far each moved since the previous check (or `rebase()`)."""

    def __init__(self, clock: Clock, threshold: float = SLEEP_THRESHOLD) -> None:
        if threshold <= 0:
            raise ValueError("threshold: must be positive")
        self._clock, self._threshold = clock, threshold
        self._anchor: tuple[datetime, float] | None = None

    def rebase(self) -> None:
        """Measure from now on."""
        self._anchor = self._read()

    def check(self) -> float | None:
        """Seconds the wall moved beyond (negative: short of) monotonic time since the last
        check, when that exceeds the threshold; else None. Moves the anchor to now."""
        now = self._read()
        before, self._anchor = self._anchor, now
        if before is None:
            return None
        jump = (now[0] - before[0]).total_seconds() - (now[1] - before[1])
        return jump if abs(jump) > self._threshold else None

    def _read(self) -> tuple[datetime, float]:
        return self._clock.wall(), self._clock.monotonic()
