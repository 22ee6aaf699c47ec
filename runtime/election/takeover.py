"""The bridge rule: from when a device that takes the lease fires what it did not see.

Owns one decision (SPEC "Failover loses nothing, downtime replays nothing"): on gaining the
lease, the floating triggers fire the unclaimed slots and messages of the last W that came
while some device still up was up (`covered_since`, pure; `confirm` checks "still up" by a
fresh heartbeat). What came while no device was up never fires. Must not apply the
per-record clamp (`activeSince`: the ticker's and the feeds'); time only through the Clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from core.peerwire import DeviceOut
from runtime.client.seat import Seat

BRIDGE_WINDOW = timedelta(seconds=120)
"""W: a bridge never starts further back (the one clamp of what a takeover fires)."""


Span = tuple[datetime, datetime]


def covered_since(spans: Iterable[Span], now: datetime) -> datetime:
    """The start of the stretch ending at `now` that the spans cover without a break."""
    ordered = sorted(spans, key=lambda span: span[0])
    start = now
    changed = True
    while changed:
        changed = False
        for begin, end in ordered:
            if begin < start <= end:
                start, changed = begin, True
    return start


def spans(
    first: list[DeviceOut], last: list[DeviceOut], me: str, now: datetime
) -> list[tuple[datetime, datetime]]:
    """Each device's up span: this device and every device that beat again between the
    two listings are up until `now`; any other until its last heartbeat."""
    seen = {d.peer: d.lastSeen for d in first}
    out: list[Span] = []
    for d in last:
        beat_again = d.peer in seen and d.lastSeen > seen[d.peer] and not d.stopped
        end = now if d.peer == me or beat_again else d.lastSeen
        out.append((d.upSince, max(d.upSince, end)))
    return out


def bridge_start(spans_: Iterable[Span], gained: datetime, window: timedelta) -> datetime:
    """Where the bridge of a takeover at `gained` starts: covered, and at most W back."""
    return max(covered_since(spans_, gained), gained - window)


class Takeover:
    """Reads the space's devices around a takeover and says where its bridge starts."""

    def __init__(self, seat: Seat, *, window: timedelta = BRIDGE_WINDOW) -> None:
        self._client, self._space, self._peer, self._clock = seat
        self._window = window

    async def start(self, gained: datetime, settle: float) -> datetime:
        """The bridge start for a takeover at `gained` (raises `ApiError` if unreadable)."""
        first, last = await self.confirm(settle)
        return bridge_start(spans(first, last, self._peer, gained), gained, self._window)

    async def confirm(self, settle: float) -> tuple[list[DeviceOut], list[DeviceOut]]:
        """Two listings: now, and once every other live device beat again (or `settle`
        seconds passed); the devices that did not beat again are taken as gone."""
        first = await self._listing()
        seen = {d.peer: d.lastSeen for d in first}
        waiting = {d.peer for d in first if d.live and d.peer != self._peer}
        deadline = self._clock.monotonic() + settle
        last = first
        while waiting and self._clock.monotonic() < deadline:
            await self._clock.sleep(min(settle / 8, deadline - self._clock.monotonic()))
            last = await self._listing()
            waiting -= {d.peer for d in last if d.peer in seen and d.lastSeen > seen[d.peer]}
        return first, last

    async def _listing(self) -> list[DeviceOut]:
        return (await self._client.devices(self._space)).devices
