"""The ticker: when armed cron and once triggers are due, dispatched once per slot.

Owns the timers of this device's armed `cron` and `once` entries (SPEC "When triggers
fire", "Sleep and clocks"): arming, `rearm`, `update`, `remove`, `bridge` and `slept`; one
sleep to the earliest next fire or a change; at a wake, what is due `lead` seconds ahead,
handed to the `Dispatcher` together; shortly before a slot, how many fires it brings
(`expect`: the executor forks spares ahead). The cursor math is runtime.fire.cursors
(pure), the order runtime.fire.nextfires (a heap); one entry's failure is its own. Must
not claim, run or record fires, nor handle event triggers; reads time only through the Clock.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

import msgspec

from core.aio import MAX_SLEEP
from core.clock import Clock, iso, sleep_or_wake
from runtime.fire.ahead import CLAIM_AHEAD
from runtime.fire.cursors import (
    Entry,
    add_attempt,
    add_backfill,
    add_bridge,
    arm,
    restart,
    retake_backfill,
    take,
)
from runtime.fire.dispatch import Dispatcher, FireRequest, named
from runtime.fire.nextfires import Entries, FireHeap
from runtime.health.touched import Touched
from triggers.records import CronTrigger, OnceTrigger, TriggerId
from triggers.registry import Armed, Diff

log = logging.getLogger(__name__)

ARM_CHUNK = 500
"""At most this many entries are armed between two yields to the loop (≈ 5–25 ms)."""
HAND_OFF = 100
"""At most this many fires of one wake are handed to the dispatcher (claimed) at once."""
EXPECT_AHEAD = 2.0
"""Seconds before a slot that `expect` hears how many fires it brings (spares forked ahead)."""
EXPECT_WINDOW = timedelta(seconds=1)
EXPECT_MAX = 1024  # fires counted at most
_TIMED = (CronTrigger, OnceTrigger)


def _expression(armed: Armed) -> str:
    record = armed.record
    return record.spec.expr if isinstance(record, CronTrigger) else ""


class DueFire(msgspec.Struct, frozen=True, kw_only=True):
    trigger: str
    at: str


class TickerStatus(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    armed: int
    pending: int
    cron: int
    once: int
    dispatched: int
    failed: dict[TriggerId, str]  # why its entry was dropped
    last_wake: str | None
    next: DueFire | None


def _bridged(entry: Entry, start: datetime, now: datetime) -> int:
    """A takeover's bridge for one entry: its floating slots in `(start, cursor]`, its
    stamped retry if that came due after `start`, and its backfill request again (its
    slots taken while the device could not act were dropped); how many fires that adds."""
    if not entry.record.floating:
        return 0
    added = add_bridge(entry, start) + add_attempt(entry, start)
    return added + (entry.record.backfill is not None and retake_backfill(entry, now))


class Ticker:
    """Fires this device's armed cron and once triggers; `await run()` until cancelled."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        *,
        clock: Clock,
        max_sleep: float = MAX_SLEEP,
        lead: float = CLAIM_AHEAD,
        touched: Touched | None = None,
        awake: Callable[[], object] | None = None,
        expect: Callable[[int], object] | None = None,
        entries: Entries | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        self._expect = expect  # told of the next slot's fires (`Executor.prepare`), once
        self._expected: datetime | None = None  # the slot it was told of last
        self._awake = awake  # asked at each wake: a sleep or freeze seen restarts the cursors
        self._clock = clock
        self._max_sleep = max_sleep
        self._lead = timedelta(seconds=lead)
        self._entries = Entries() if entries is None else entries  # read by `nextFireAt`
        self.failed: dict[TriggerId, str] = {}  # entries dropped because they raised
        self.up_since = clock.wall()  # this device's start (or its last wake from sleep)
        self._wake = asyncio.Event()
        self.dispatched = 0  # fires handed to the dispatcher so far
        self.last_wake: datetime | None = None
        self._heap = FireHeap(self._entries)
        self._pending: dict[TriggerId, tuple[Armed, datetime]] = {}  # to arm, with its `now`
        self.chunk = ARM_CHUNK
        self._pending_bridge: datetime | None = None  # a takeover's start, for pending entries
        self.touched = Touched() if touched is None else touched  # ids whose next fire moved
        self.settled = asyncio.Event()  # set while nothing waits to be armed
        self.settled.set()

    def apply(self, diff: Diff, now: datetime) -> None:
        """Arm, re-arm, refresh or disarm from a registry diff; event triggers are ignored.

        Up to `chunk` entries to arm are armed at once; more wait in `pending` for the run
        loop (`arm_pending`), each armed as of the `now` its diff came with."""
        self.touched.update(diff.remove)
        for tid in diff.remove:
            self._entries.pop(tid, None)
            self._pending.pop(tid, None)
            self.failed.pop(tid, None)
        incoming = (*diff.add, *diff.rearm)
        if len(incoming) > self.chunk:  # entries of one expression in a row: one slot search
            incoming = tuple(sorted(incoming, key=_expression))  # (`schedule.next_fire`)
        pending = self._pending
        for armed in incoming:
            if (tid := armed.record.id) in pending:
                del pending[tid]  # to the end: it arms after what came before it
            pending[tid] = (armed, now)
        for armed in diff.update:
            if armed.record.id in self._pending:  # not armed yet: it arms with the newest
                self._pending[armed.record.id] = (armed, self._pending[armed.record.id][1])
            else:
                self._refresh(armed)
        if len(self._pending) <= self.chunk:
            self._arm_some(len(self._pending))
        else:
            self.settled.clear()
        self._wake.set()

    @property
    def pending(self) -> int:
        """Entries received but not armed yet (a large diff being armed in chunks)."""
        return len(self._pending)

    async def arm_pending(self) -> int:
        """Arm every pending entry, `chunk` at a time, yielding to the loop between; how many."""
        armed = 0
        while self._pending:
            armed += self._arm_some(self.chunk)
            await asyncio.sleep(0)
        if armed:
            log.info("ticker: armed %d entries in chunks of %d", armed, self.chunk)
        return armed

    def _arm_some(self, count: int) -> int:
        taken = list(itertools.islice(self._pending, count))  # ids: no item tuple each
        start = self._pending_bridge
        for tid in taken:
            armed, now = self._pending.pop(tid)
            entry = self._arm(armed, now, self._entries.get(tid))
            if start is not None and entry is not None and _bridged(entry, start, now):
                self._push(entry)  # a takeover came before its arming
        if not self._pending:
            self._pending = {}  # a dict keeps its size when emptied: 100,000 slots
            self._pending_bridge = None
            self.settled.set()
        return len(taken)

    def bridge(self, start: datetime) -> int:
        """After a takeover: every floating cron entry fires its slots in `(start, cursor]`
        (not before its `activeSince`; claims drop what already ran); how many."""
        added, now = 0, self._clock.wall()
        for entry in self._entries.values():
            if n := _bridged(entry, start, now):
                added += n
                self._push(entry)
        if self._pending:  # entries not armed yet bridge as they are armed
            self._pending_bridge = min(start, self._pending_bridge or start)
        self._wake.set()
        return added

    def _arm(self, armed: Armed, now: datetime, prev: Entry | None) -> Entry | None:
        record = armed.record
        if self.failed:
            self.failed.pop(record.id, None)
        if not isinstance(record, _TIMED):
            if self._entries.pop(record.id, None) is not None:  # a kind change to `event`
                self.touched.add(record.id)
            return None
        try:
            entry = arm(record, now + self._lead, prev, self.up_since)  # as `tick` sees now
        except Exception as exc:
            self._drop(record.id, "arm", exc)
            return None
        self._entries[record.id] = entry
        self._push(entry)
        return entry

    def _push(self, entry: Entry) -> None:
        self.touched.add(entry.record.id)  # its next fire may have moved
        self._heap.push(entry)

    def _drop(self, tid: TriggerId, what: str, exc: Exception) -> None:
        """One entry raised: log it, forget it; the others are untouched."""
        self._entries.pop(tid, None)
        self.touched.add(tid)
        self.failed[tid] = f"{what}: {type(exc).__name__}: {exc}"
        log.error("ticker: trigger %s dropped, %s", tid, self.failed[tid])

    def _refresh(self, armed: Armed) -> None:
        entry = self._entries.get(armed.record.id)
        if entry is not None and type(armed.record) is type(entry.record):
            entry.record = armed.record  # fire times stay; a backfill asked of it joins
            if add_backfill(entry, self._clock.wall()):
                self._push(entry)

    def slept(self, now: datetime) -> None:
        """The machine slept or the wall clock jumped: restart every cursor from `now`."""
        self.up_since = now
        for tid, entry in list(self._entries.items()):
            try:
                restart(entry, now, self._lead)
            except Exception as exc:
                self._drop(tid, "restart", exc)
        self._pending = {tid: (armed, now) for tid, (armed, _) in self._pending.items()}
        self._pending_bridge = None  # nothing of the sleep is bridged
        self.touched.update(self._entries)
        self._heap.rebuild()
        self._wake.set()

    def next_fires(self) -> dict[TriggerId, datetime]:
        """When each armed entry fires next (for `nextFireAt` and `baton status`)."""
        return {tid: e.next_at for tid, e in self._entries.items() if e.next_at is not None}

    def next_fire(self, tid: TriggerId) -> datetime | None:
        """When one armed entry fires next; None when it is not armed or never fires again."""
        return self._entries.next_fire(tid)

    async def run(self) -> None:
        """Fire what is due, sleep until the next fire or a change; until cancelled."""
        while True:
            await self.tick()
            await self._nap()

    async def tick(self) -> int:
        """One wake: dispatch every fire due by the wall clock's now plus the lead; how many.

        The fires are handed over in batches of up to `HAND_OFF` (each claimed in one
        request), so the first of a large burst are claimed while the later entries are
        still being computed (a cron step costs ≈ 50–80 µs).
        """
        self._wake.clear()
        if self._awake is not None:
            self._awake()  # a sleep or a freeze seen here calls `slept` before anything is due
        await self.arm_pending()
        self.last_wake = self._clock.wall()
        now = self.last_wake + self._lead  # what is due by then is claimed now
        batch: list[FireRequest] = []
        count = 0
        for entry in self._heap.pop_due(now):  # a snapshot: `apply` may change entries meanwhile
            try:
                fires = take(entry, now)
            except Exception as exc:
                self._drop(entry.record.id, "take", exc)
                continue
            self._push(entry)
            for key, at, catchup in fires:
                batch.append(FireRequest(trigger=entry.record, key=key, due_at=at, catchup=catchup))
            if len(batch) >= HAND_OFF:
                count += await self._dispatch(batch)
                batch = []
                await asyncio.sleep(0)  # a yield, not a wait: let the fires just taken start
        return count + await self._dispatch(batch)

    async def _dispatch(self, batch: list[FireRequest]) -> int:
        if not batch:
            return 0
        self.dispatched += len(batch)
        log.debug("due %s", ", ".join(f"{r.trigger.id}@{r.key}" for r in batch))
        try:
            await self._dispatcher.fire(*batch)
        except Exception:
            log.exception(
                "dispatch of %s fires (%s@%s, …) failed",
                len(batch),
                named(batch[0].trigger),
                batch[0].key,
            )
        return len(batch)

    def delay(self, now: datetime) -> float:
        """Seconds to sleep from `now`: until the lead before the earliest next fire, at
        most `max_sleep`."""
        if self._pending:
            return 0.0
        earliest = self._heap.earliest()
        if earliest is None:
            return self._max_sleep
        return min(self._max_sleep, max(0.0, (earliest - self._lead - now).total_seconds()))

    async def _nap(self) -> None:
        now = self._clock.wall()
        await sleep_or_wake(self._clock, self._foresee(now, self.delay(now)), self._wake)

    def _foresee(self, now: datetime, delay: float) -> float:
        """Within `EXPECT_AHEAD` of the next slot, tells `expect` how many fires fall due in
        the second from it (once per slot); further off, wakes then to tell it. The sleep."""
        expect = self._expect
        earliest = self._heap.earliest() if expect is not None else None
        if expect is None or earliest is None or earliest == self._expected:
            return delay
        ahead = (earliest - now).total_seconds()
        if ahead > EXPECT_AHEAD:
            return min(delay, ahead - EXPECT_AHEAD)
        self._expected = earliest
        count = self._heap.count_until(earliest + EXPECT_WINDOW, EXPECT_MAX)
        try:
            expect(count)
        except Exception:
            log.exception("ticker: telling %d fires ahead failed", count)
        return delay

    def status(self) -> TickerStatus:
        first = self._heap.first()
        return TickerStatus(
            armed=len(self._entries),
            pending=len(self._pending),
            cron=sum(isinstance(e.record, CronTrigger) for e in self._entries.values()),
            once=sum(isinstance(e.record, OnceTrigger) for e in self._entries.values()),
            dispatched=self.dispatched,
            failed=dict(self.failed),
            last_wake=iso(self.last_wake) if self.last_wake else None,
            next=DueFire(trigger=first[0], at=iso(first[1])) if first else None,
        )
