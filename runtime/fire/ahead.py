"""Fires claimed ahead of their slot, each waiting for it.

Owns the short wait between the claim of a cron or once fire and its due instant (SPEC
"When triggers fire"): the ticker takes what falls due within `CLAIM_AHEAD` of now
(runtime.fire.ticker), so the claim's round trip is over when the slot comes and the
program starts on time. A waiting fire is withdrawn, never run late or out of turn, when
its trigger leaves this device's registry (paused, deleted, moved away, the election lost)
or the machine sleeps, or when it wakes long past its slot (the device was frozen): its
caller records it with the reason. The claim stays: the slot was this device's, and nobody
else runs it. Must not claim, admit, run or record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field

from core.aio import SLEEP_THRESHOLD
from core.clock import Clock, sleep_or_wake
from core.vocab import RunReason
from runtime.fire.dispatch import FireRequest
from triggers.records import TriggerId

CLAIM_AHEAD = 0.05
"""Seconds before its slot that a cron or once fire is taken and claimed."""


@dataclass(eq=False)
class _Waiter:
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    reason: str = ""  # why it was withdrawn


class Ahead:
    """The waiting room; `await until_due(request)` per fire claimed ahead."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._waiting: dict[TriggerId, set[_Waiter]] = {}

    async def until_due(self, request: FireRequest) -> str:
        """Wait until `request` is due: "" then, or the reason it was withdrawn first."""
        left = (request.due_at - self._clock.wall()).total_seconds()
        if left <= 0:
            return ""
        waiter = _Waiter()
        waiting = self._waiting.setdefault(request.trigger.id, set())
        waiting.add(waiter)
        try:
            await sleep_or_wake(self._clock, left, waiter.wake)
        finally:
            waiting.discard(waiter)
            if not waiting:
                self._waiting.pop(request.trigger.id, None)
        late = (self._clock.wall() - request.due_at).total_seconds()
        if not waiter.reason and late > SLEEP_THRESHOLD:  # woken long past it: a freeze
            return RunReason.SLEPT
        return waiter.reason

    def withdraw(self, tids: Iterable[TriggerId], reason: str) -> None:
        """Withdraw the fires of `tids` that wait, with `reason`."""
        for tid in tids:
            for waiter in self._waiting.get(tid, ()):
                waiter.reason = waiter.reason or reason
                waiter.wake.set()

    def withdraw_all(self, reason: str) -> None:
        self.withdraw(list(self._waiting), reason)
