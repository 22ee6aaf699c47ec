"""This device's presence in the space: its heartbeat and what it learns of the live devices.

Owns `device_put` (name, priority, instance, the change feed position applied, a
suspend just seen and, given `report`, the device's own status for `baton status`),
reading the live devices and their priorities after each beat, when the next beat is
due, and signing off on a clean stop. A report that fails is sent as an error, never
skipped. Must not decide anything about the lease (that is `runtime.election.loop` and
`runtime.election.decision`). Time only through the injected `Clock`.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable

import msgspec

from core.peerwire import HeartbeatIn, Report
from runtime.client.seat import Seat

log = logging.getLogger(__name__)


class Heartbeat:
    """One device's heartbeats in one space."""

    def __init__(
        self, seat: Seat, name: str, *, report: Callable[[], object] | None = None
    ) -> None:
        self._client, self._space, self._peer, self._clock = seat
        self._name, self._report = name, report
        self.due = float("-inf")  # monotonic: when the next beat is due
        self.instance = ""  # sent with each beat: a new one restarts the space's upSince
        self.applied: Callable[[], int] | None = None  # the change feed position applied
        self.offset: Callable[[], float | None] | None = None  # s the space's clock is ahead
        self.slept: float | None = None  # a suspend seen since the last beat (seconds), sent once
        self.live: frozenset[str] = frozenset()
        self.priorities: dict[str, int] = {}

    def beat_now(self) -> None:
        self.due = float("-inf")

    def anew(self) -> None:
        """A new instance: this run of the device, or a wake from sleep (upSince restarts)."""
        self.instance = secrets.token_hex(8)

    async def beat(self, priority: int, every: float) -> None:
        """Send one heartbeat, then read who is live; the next is due `every` s after."""
        sent = self._clock.monotonic()
        slept, self.slept = self.slept, None
        body = HeartbeatIn(
            name=self._name,
            priority=priority,
            instance=self.instance or None,
            status=_status_report(self._report) if self._report is not None else None,
            appliedSeq=self.applied() if self.applied is not None else None,
            sleptSeconds=round(max(0.0, slept), 3) if slept is not None else None,
            offsetMs=_ms(self.offset() if self.offset is not None else None),
        )
        try:
            await self._client.device_put(self._space, self._peer, body)
        except BaseException:
            self.slept = slept if self.slept is None else self.slept  # told at the next beat
            raise
        self.due = sent + every
        live = [d for d in (await self._client.devices(self._space)).devices if d.live]
        self.live = frozenset(d.peer for d in live)
        self.priorities = {d.peer: d.priority for d in live}

    async def sign_off(self) -> None:
        """Tell the space this device stopped cleanly: it is not live from now on."""
        try:
            await self._client.device_put(self._space, self._peer, HeartbeatIn(stopped=True))
        except Exception as exc:
            log.warning("election: could not sign off: %s", exc)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def _status_report(report: Callable[[], object]) -> Report:
    """The device's report as JSON, for the heartbeat."""
    try:
        built: Report = msgspec.to_builtins(report())
        return built
    except Exception as exc:
        log.warning("election: the status report failed: %s", exc)
        return {"error": f"{type(exc).__name__}: {exc}"}
