"""Detects that the machine slept or that its wall clock jumped, and says so on the bus.

Owns when the device looks: every `period` seconds, and whenever a part asks (`check()`:
the elector before it says it may fire, the ticker before it takes what is due). A gap
between two looks longer than the period and the threshold is a freeze (SIGSTOP, a
stalled loop), handled like a sleep, so a woken holder drops stale cursors before it
fires. The comparison is `core.aio.SleepDetector`; each detection is published once as
`Slept` on the `Bus`. Must not decide what a sleep means; time only through the `Clock`.
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
        self._threshold = threshold
        self._checked: float | None = None  # monotonic time of the last check while running
        self.detected = 0
        self.last_jump: float | None = None  # seconds the wall moved beyond monotonic

    async def run(self) -> None:
        """Check every `period` until cancelled."""
        self._detector.rebase()
        self._checked = self._clock.monotonic()
        try:
            while True:
                await self._clock.sleep(self._period)
                self.check()
        finally:
            self._checked = None

    def check(self) -> bool:
        """Compare the clocks since the last check; publish `Slept` on a divergence, or when
        the device did not run for longer than a period and the threshold (it was frozen:
        SIGSTOP, a stalled loop), since both clocks moved on while it could not look."""
        jump, frozen = self._detector.check(), self._frozen()
        if jump is not None:
            log.warning("clock check: the wall clock moved %+.1f s beyond monotonic time", jump)
        elif frozen is not None:
            log.warning("clock check: this device could not run for %.1f s (frozen)", frozen)
            jump = frozen
        else:
            return False
        self.detected += 1
        self.last_jump = jump
        self.bus.publish(Slept(jump=jump, at=self._clock.wall()))
        return True

    def _frozen(self) -> float | None:
        """Seconds this device could not run beyond its period, if past the threshold."""
        if self._checked is None:  # not running (an elector alone): on-demand checks only
            return None
        now, before = self._clock.monotonic(), self._checked
        self._checked = now
        stalled = now - before - self._period
        return stalled if stalled > self._threshold else None

    def status(self) -> SleepStatus:
        return SleepStatus(detected=self.detected, last_jump_seconds=self.last_jump)
