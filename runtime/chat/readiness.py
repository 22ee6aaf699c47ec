"""Whether the device's chat responder can answer now: probing it, and telling chat-watch.

Owns the probe loop of a responder that has `probe() -> str` (a model behind an HTTP
endpoint): while ready it probes every `ready_every` seconds, while not ready every
`retry_every` seconds, and at once when chat-watch reports a call that found the
endpoint unavailable (`kick`). The verdict and its reason go to
`ChatWatch.set_ready`, so waiting messages are taken up as soon as the endpoint
answers; the device's heartbeat carries the reason to `baton status`. A responder
without `probe` is always ready and needs no loop. Time only through the Clock; it
must not answer messages.
"""

from __future__ import annotations

import asyncio
import logging

from core.clock import Clock, sleep_or_wake
from runtime.chat.responders import Probing, Responder
from runtime.chat.watch import ChatWatch

log = logging.getLogger("baton.device")


class Readiness:
    """`await run()` until cancelled; never raises for the responder's sake."""

    def __init__(
        self,
        responder: Responder,
        chatwatch: ChatWatch,
        *,
        clock: Clock,
        ready_every: float = 15.0,
        retry_every: float = 2.0,
    ) -> None:
        self._responder, self._chatwatch, self._clock = responder, chatwatch, clock
        self._ready_every, self._retry_every = ready_every, retry_every
        self._wake = asyncio.Event()
        chatwatch.on_unavailable = self.kick

    @property
    def needed(self) -> bool:
        return isinstance(self._responder, Probing) and callable(self._responder.probe)

    def kick(self) -> None:
        """Probe again now (a call just found the endpoint unavailable)."""
        self._wake.set()

    async def check(self) -> str:
        """Probe once and tell chat-watch; the reason it is not ready ('' when it is)."""
        if not isinstance(self._responder, Probing):
            return ""  # nothing to probe: ready
        try:
            reason = await self._responder.probe()
        except Exception as exc:  # a probe that fails is a reason, never a dead part
            reason = f"probe failed: {type(exc).__name__}: {exc}"
        self._chatwatch.set_ready(not reason, reason)
        return reason

    async def run(self) -> None:
        if not self.needed:
            await asyncio.Event().wait()  # nothing to probe: ready for good
        while True:
            self._wake.clear()
            reason = await self.check()
            every = self._retry_every if reason else self._ready_every
            await sleep_or_wake(self._clock, every, self._wake)
