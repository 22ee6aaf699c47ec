"""Detects that the machine slept or that its wall clock jumped.

Owns one comparison: every `period` seconds, how far the wall clock moved
against how far the monotonic clock moved. The monotonic clock stops while the
machine is suspended (Linux, macOS) and never steps; the wall clock counts the
suspend and follows clock changes. When the two deltas differ by more than
`threshold` seconds, every listener is called once (with no argument): the
device then distrusts its lease and its stream cursors.

Must not decide what a sleep means for anyone; listeners do that. Time only
through the injected `Clock`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from core.clock import Clock

log = logging.getLogger(__name__)

Listener = Callable[[], object]


class SleepWatch:
    """Calls its listeners once per detected suspend or wall-clock jump."""

    def __init__(self, clock: Clock, threshold: float = 3.0, period: float = 1.0) -> None:
        if threshold <= 0 or period <= 0:
            raise ValueError("threshold, period: must be positive")
        self._clock = clock
        self._threshold = threshold
        self._period = period
        self._listeners: list[Listener] = []
        self._anchor: tuple[datetime, float] | None = None
        self.detected = 0
        self.last_jump: float | None = None  # seconds the wall moved beyond monotonic

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    async def run(self) -> None:
        """Check every `period` until cancelled."""
        self._anchor = self._read()
        while True:
            await self._clock.sleep(self._period)
            self.check()

    def check(self) -> bool:
        """Compare the clocks since the last check; call the listeners on a divergence."""
        now = self._read()
        before, self._anchor = self._anchor, now
        if before is None:
            return False
        jump = _divergence(before, now)
        if abs(jump) <= self._threshold:
            return False
        self.detected += 1
        self.last_jump = jump
        log.warning("clock check: the wall clock moved %+.1f s beyond monotonic time", jump)
        self._notify()
        return True

    def _read(self) -> tuple[datetime, float]:
        return self._clock.wall(), self._clock.monotonic()

    def _notify(self) -> None:
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:
                log.exception("clock check: a sleep listener failed")

    def status(self) -> dict[str, Any]:
        return {"detected": self.detected, "lastJumpSeconds": self.last_jump}


def _divergence(before: tuple[datetime, float], now: tuple[datetime, float]) -> float:
    """Seconds the wall clock moved beyond (or, negative, short of) the monotonic clock."""
    wall = (now[0] - before[0]).total_seconds()
    return wall - (now[1] - before[1])
