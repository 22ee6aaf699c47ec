"""Supervision of a device's parts: a part that dies is restarted, or the device stops.

Owns running the long-lived parts of a device (ticker, reconciler, subscriptions,
election, health pass, sleep watch) as tasks (SPEC "Bad input": device parts). A
part's `run()` ends only by cancellation; when one raises instead, the supervisor
logs it with the part's name, tells `on_down(name)` (the device stops holding the
lease while a part is down), waits a short backoff, calls the part's `run()`
again and tells `on_up(name)`. A part that dies `max_restarts` times within
`within` seconds cannot be kept running: `run()` raises `PartFailed`, the device
stops, and the CLI exits non-zero with one line. Never a device that heartbeats
and holds the lease but fires nothing. Time only through the Clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping

from core.aio import Backoff
from core.clock import Clock

log = logging.getLogger("baton.device")

Part = Callable[[], Awaitable[None]]


class PartFailed(RuntimeError):
    """A device part kept failing; the message says which and why, in one line."""


class Supervisor:
    """`await Supervisor(...).run(parts)` until cancelled (or a part cannot be kept up)."""

    def __init__(
        self,
        clock: Clock,
        *,
        on_down: Callable[[str], object],
        on_up: Callable[[str], object],
        max_restarts: int = 5,
        within: float = 60.0,
        backoff: float = 0.5,
    ) -> None:
        self._clock, self._on_down, self._on_up = clock, on_down, on_up
        self._max_restarts, self._within = max_restarts, within
        # doubling per recent death; the cap is never reached before max_restarts stops it
        self._backoff = Backoff(base=backoff, cap=backoff * 2**max_restarts, jitter=False)
        self.restarts: dict[str, int] = {}

    async def run(self, parts: Mapping[str, Part]) -> None:
        """Run every part; cancelling this cancels them all and waits for them."""
        try:
            async with asyncio.TaskGroup() as group:
                for name, part in parts.items():
                    group.create_task(self._keep(name, part), name=f"part {name}")
        except* PartFailed as failed:
            raise failed.exceptions[0] from None

    async def _keep(self, name: str, part: Part) -> None:
        deaths: deque[float] = deque()
        while True:
            try:
                await part()
                error = "it returned"  # a part ends only when cancelled: this is a bug
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                log.exception("device part %s died", name)
            now = self._clock.monotonic()
            deaths.append(now)
            while deaths and deaths[0] < now - self._within:
                deaths.popleft()
            if len(deaths) >= self._max_restarts:
                raise PartFailed(f"device part {name} died {len(deaths)} times: {error}")
            self._notify(self._on_down, name)
            await self._clock.sleep(self._backoff.delay(len(deaths)))
            self.restarts[name] = self.restarts.get(name, 0) + 1
            log.warning("device part %s restarted (%s)", name, error)
            self._notify(self._on_up, name)

    @staticmethod
    def _notify(listener: Callable[[str], object], name: str) -> None:
        try:
            listener(name)
        except Exception:
            log.exception("device part %s: a supervision listener failed", name)
