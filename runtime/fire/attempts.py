"""Attempts: the runs of a trigger in flight (so `restart` can stop them) and the retries.

Owns two policies of SPEC "Trigger policies" and "Runs" that outlive one run's walk:
`Running` keeps each trigger's runs in tasks of their own, so a newer fire under
`overlap: restart` cancels them (the worker and the run's processes are killed; the run
ends `cancelled`, reason `superseded`); `Retries` waits out a failed fire's backoff and
hands its next attempt (`<key>#k`, claimed like any fire) back to the pipeline,
unless its trigger left this device first. Must not claim, admit or record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime

import msgspec

from core.aio import TaskSet
from core.clock import Clock
from core.vocab import RunReason
from runtime.fire import bodies
from runtime.fire.ahead import Ahead
from runtime.fire.dispatch import FireRequest, named
from runtime.fire.execute import Ending
from triggers import policies
from triggers.records import EventTrigger, FireKey, Trigger, TriggerId

log = logging.getLogger(__name__)


class Running:
    """`await running.run(tid, work)`: the ending of `work`, or `cancelled` if superseded."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._runs: dict[TriggerId, set[asyncio.Future[Ending]]] = {}

    async def run(self, tid: TriggerId, work: Awaitable[Ending]) -> Ending:
        started = self._clock.monotonic()
        run = asyncio.ensure_future(work)
        running = self._runs.setdefault(tid, set())
        running.add(run)
        try:
            await asyncio.wait([run])
        except asyncio.CancelledError:  # the device stops: the run goes with it
            run.cancel()
            await asyncio.wait([run])
            raise
        finally:
            running.discard(run)
            if not running:
                self._runs.pop(tid, None)
        if run.cancelled():
            elapsed = (self._clock.monotonic() - started) * 1000
            return bodies.cancelled(elapsed), RunReason.SUPERSEDED
        return run.result()

    def supersede(self, tid: TriggerId) -> None:
        """Cancel every run of `tid` in flight."""
        for run in self._runs.get(tid, ()):
            run.cancel()


class Retries:
    """`retries.after(request, now)` schedules the next attempt of a failed fire, if any."""

    def __init__(self, clock: Clock, fire: Callable[[FireRequest], Awaitable[None]]) -> None:
        self._waiting = Ahead(clock)
        self._fire = fire
        self._tasks = TaskSet("retry")  # apart from the fires: a backoff is not a fire in flight

    def __len__(self) -> int:
        return len(self._tasks)

    def schedule(self, failed: FireRequest, key: str, due: datetime) -> None:
        """Fire `failed` again as `key` at `due` (`triggers.policies.next_attempt`)."""
        self._tasks.spawn(self._retry(failed, FireKey(key), due), name=f"retry {key}")

    async def _retry(self, failed: FireRequest, key: FireKey, due: datetime) -> None:
        again = msgspec.structs.replace(failed, key=key, due_at=due, catchup=True)
        if why := await self._waiting.until_due(again):
            log.info("retry %s@%s withdrawn: %s", named(failed.trigger), key, why)
            return
        await self._fire(again)

    def adopt(self, records: Iterable[Trigger], start: datetime) -> int:
        """After a takeover: each floating event trigger's stamped retry that came due after
        `start` is run here (the bridge rule), never one from before it nor from before the
        record's `activeSince`; how many. (A cron or
        once trigger's retry comes with its ticker entry.)"""
        taken = 0
        for record in records:
            stamped = record.next_attempt
            if not isinstance(record, EventTrigger) or not record.floating or stamped is None:
                continue
            if stamped.event is None or stamped.due_at <= start or _before_active(record):
                continue
            key = FireKey(policies.base_key(stamped.key))
            failed = FireRequest(
                trigger=record, key=key, due_at=stamped.due_at, event=stamped.event
            )
            self.schedule(failed, stamped.key, stamped.due_at)
            taken += 1
        return taken

    def withdraw(self, tids: list[TriggerId]) -> None:
        self._waiting.withdraw(tids, RunReason.WITHDRAWN)

    async def close(self) -> None:
        await self._tasks.close()


def _before_active(record: Trigger) -> bool:
    """Whether the stamped retry is from before the record's `activeSince` (SPEC "Active
    since": nothing of the paused time fires): due before it, or its failed run ended
    before it (a pause and resume, a move here since; the fence would refuse its claim)."""
    since, stamped = record.fires_from, record.next_attempt
    if since is None or stamped is None:
        return False
    ended = record.last_run_at
    return stamped.due_at <= since or (ended is not None and ended <= since)
