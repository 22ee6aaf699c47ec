"""The space's clock as this device reads it: an offset from the midpoint of each round trip.

Owns `ClockOffset`, fed with every answer's `Baton-Server-Time` (SPEC "Sleep and clocks"): the
sample of the shortest round trip among the last `KEEP` (`serverTime − (sent + rtt/2)`),
taken as none while within that round trip; a sample off by more than its round trip and
`STEP_S` is a step of one of the clocks (`on_step` hears it; the device treats it as a
wake); past `WARN_S` it warns once per crossing. `SpaceTime` is a `Clock` whose wall is
the device's plus the offset: the device fires by it. Must not send anything itself.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta

import msgspec

from core.clock import Clock
from core.vocab import CLOCK_WARN_S

log = logging.getLogger("baton.device")

KEEP = 16
STEP_S = 1.0  # a sample this far off the offset (beyond its round trip) is a step
WARN_S = CLOCK_WARN_S  # an offset past this is logged and shown as a warning
DEAD_BAND_S = 0.005  # below the wire's millisecond and a loopback's noise: no offset
Began = tuple[datetime, float]


class ClockOffset:
    """Seconds the space's clock is ahead of this device's (negative: behind)."""

    def __init__(self, base: Clock, *, on_step: Callable[[float], object] | None = None) -> None:
        self.base = base
        self.on_step = on_step
        self.seconds = 0.0
        self.rtt: float | None = None
        self.samples = 0
        self._kept: deque[tuple[float, float]] = deque(maxlen=KEEP)  # (rtt, sample)

    def begin(self) -> Began:
        """Read before a request is sent."""
        return self.base.wall(), self.base.monotonic()

    def observe(self, began: Began, server_time: str | None) -> None:
        """An answer came with `server_time` (RFC 3339) for the request begun at `began`."""
        server = _instant(server_time)
        if server is None:
            return
        wall, mono = began
        rtt = max(0.0, self.base.monotonic() - mono)
        sample = (server - wall).total_seconds() - rtt / 2
        if self._kept and abs(sample - self.seconds) > STEP_S + rtt:
            self._kept.clear()  # a clock stepped: what was measured before no longer holds
        self._kept.append((rtt, sample))
        self.samples += 1
        best_rtt, best = min(self._kept)
        known = abs(best) > max(DEAD_BAND_S, best_rtt)  # beyond what the round trip blurs
        before, self.seconds = self.seconds, best if known else 0.0
        self.rtt = best_rtt
        self._warn(before)
        if self.on_step is not None and abs(self.seconds - before) > STEP_S:
            self.on_step(self.seconds - before)

    def _warn(self, before: float) -> None:
        if abs(self.seconds) > WARN_S >= abs(before):
            log.warning(
                "clock: this device is %+.1f s off the space's clock (fires go by the space's)",
                -self.seconds,
            )
        elif abs(before) > WARN_S >= abs(self.seconds):
            log.warning("clock: within %.1f s of the space's clock again", WARN_S)

    def known(self) -> float | None:
        """The offset once an answer measured it (None before: not yet known)."""
        return self.seconds if self.samples else None

    def status(self) -> ClockStatus:
        """What `baton status` shows: the offset, its round trip, whether it warns."""
        return ClockStatus(
            offset_ms=round(self.seconds * 1000, 1),
            rtt_ms=None if self.rtt is None else round(self.rtt * 1000, 1),
            warning=abs(self.seconds) > WARN_S,
        )


class ClockStatus(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    offset_ms: float
    rtt_ms: float | None
    warning: bool


class SpaceTime:
    """A `Clock` reading the space's time: the base wall plus the offset; the rest is the
    base's (monotonic time, sleeps and deadlines do not depend on whose wall it is)."""

    def __init__(self, offset: ClockOffset) -> None:
        self.offset = offset
        self.base = offset.base

    def wall(self) -> datetime:
        return self.base.wall() + timedelta(seconds=self.offset.seconds)

    def monotonic(self) -> float:
        return self.base.monotonic()

    async def sleep(self, seconds: float) -> None:
        await self.base.sleep(seconds)

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        return self.base.timeout(seconds)


def _instant(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo is not None else None
