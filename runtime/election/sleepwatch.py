"""Detects that the machine slept or that its wall clock jumped, and says so on the bus.

Owns when the device looks: every `period` seconds, and whenever a part asks
(`check()`, e.g. the elector before it reports that it may fire). The comparison
itself is `core.aio.SleepDetector`, the device's only one. Each detected suspend or
jump is published once as `Slept` on the device's `Bus`: the parts then distrust
their lease and their stream cursors.

Must not decide what a sleep means for anyone; subscribers do that. Time only
through the injected `Clock`.
"""

from __future__ import annotations

import logging

import msgspec

from core.aio import SLEEP_THRESHOLD, SleepDetector
from core.clock import Clock
from runtime.events import Bus, Slept

log = logging.getLogger(__name__)


class SleepStatus(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    detected: int
    last_jump_seconds: float | None


class SleepWatch:
    """Publishes `Slept` once per detected suspend or wall-clock jump."""

    def __init__(
        self,
        clock: Clock,
        bus: Bus | None = None,
        *,
        threshold: float = SLEEP_THRESHOLD,
        period: float = 1.0,
    ) -> None:
        if period <= 0:
            raise ValueError("period: must be positive")
        self._clock, self.bus, self._period = clock, bus or Bus(), period
        self._detector = SleepDetector(clock, threshold)
        self._detector.rebase()
        self.detected = 0
        self.last_jump: float | None = None  # seconds the wall moved beyond monotonic

    async def run(self) -> None:
        """Check every `period` until cancelled."""
        self._detector.rebase()
        while True:
            await self._clock.sleep(self._period)
            self.check()

    def check(self) -> bool:
        """Compare the clocks since the last check; publish `Slept` on a divergence."""
        jump = self._detector.check()
        if jump is None:
            return False
        self.detected += 1
        self.last_jump = jump
        log.warning("clock check: the wall clock moved %+.1f s beyond monotonic time", jump)
        self.bus.publish(Slept(jump=jump, at=self._clock.wall()))
        return True

    def status(self) -> SleepStatus:
        return SleepStatus(detected=self.detected, last_jump_seconds=self.last_jump)
