"""The ticker: when armed cron and once triggers are due, dispatched once per slot.

Owns the timers of this device's armed `cron` and `once` entries (SPEC "When
triggers fire", "Sleep and clocks"). Each entry keeps a *cursor*: slots at or
before it never fire. `run()` sleeps until the earliest next fire or a change
(`apply` wakes it), never longer than `max_sleep`; at every wake it recomputes
what is due from the wall clock (`schedule.due_slots`, `schedule.once_due`),
moves the cursors, and hands each fire to the `Dispatcher` as a `FireRequest`.
A slot is dispatched once by this device; the space's fire claims make it once
across devices.

- Arming (add, resume, start): the cursor starts where the record's last write or
  this device's start left it (`start_cursor`), never before the record's
  `activeSince` (SPEC "Active since"): a resume replays nothing, nothing from
  before a record existed fires, and a slot between a write and its arming does.
- `rearm` recomputes from the new spec without going back; `update` keeps the
  cursor (an args edit neither moves nor refires); `remove` disarms.
- A wake that comes late (a stalled loop, a stopped process) fires every slot it
  passed within the trigger's tolerance, oldest first: the device was up, so they
  are not downtime. Only a detected sleep (`slept(now)`) restarts the cursors at
  `now`, so a machine back from suspend never fires a burst of stale slots.
- `bridge(start)`: after a takeover, each floating cron entry also fires the slots
  in `(start, cursor]` not before its `activeSince`; the device computes `start` by
  the bridge rule (runtime.takeover). Up to the cursor, not only up to where the
  entry was armed: a holder whose lease wavered kept its entries, and the slots it
  took while it could not fire were dropped by the dispatcher; the claims drop the
  ones that did run.

At rest the ticker costs nothing per armed entry: a heap ordered by next fire
holds every entry's `next_at` (stale heap items are skipped when they surface,
and the heap is rebuilt when they outnumber the entries), so a wake looks only at
what is due and the sleep is read off the top. A large diff (a first sync of
100,000 records) is armed in chunks of `ARM_CHUNK` that yield to the loop
between them, so the election's renewals and the streams never starve; a small
one is armed at once.

One entry's failure is its own: an entry whose arming or taking raises is
logged with its id and dropped (`failed` keeps why, for `baton status`), and
every other entry goes on. Event triggers are not the ticker's
(runtime.subscriptions). Must not claim, run or record fires (the Dispatcher
does), and reads time only through the Clock.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from core.clock import Clock, iso, sleep_or_wake
from runtime.dispatch import Dispatcher, FireRequest, named
from triggers import schedule
from triggers.records import Catchup, CronTrigger, FireKey, OnceTrigger, TriggerId
from triggers.registry import Armed, Diff

log = logging.getLogger(__name__)

EPSILON = timedelta(microseconds=1)
ARM_CHUNK = 500
"""At most this many entries are armed between two yields to the loop (≈ 25–100 ms)."""

Timed = CronTrigger | OnceTrigger


@dataclass(slots=True)
class Entry:
    """One armed cron or once trigger and where it stands."""

    record: Timed
    cursor: datetime  # slots at or before the cursor never fire (cron), but for a bridge
    settled: FireKey | None = None  # a once: the key it fired with (or missed)
    bridge: Sequence[datetime] = ()  # cron slots to fire at the next wake (no list per entry)
    next_at: datetime | None = None  # earliest instant this entry may fire; None: never

    def refresh(self) -> None:
        rec = self.record
        if isinstance(rec, OnceTrigger):
            due = self.settled != schedule.fire_key_once(rec.spec)
            self.next_at = rec.spec.at_utc if due else None
        else:
            after = schedule.next_fire(rec.spec, self.cursor)
            self.next_at = self.bridge[0] if self.bridge else after


# --- entry math: (entry, now) → fires; no clock, no I/O --------------------------------


def start_cursor(record: Timed, now: datetime, up_since: datetime) -> datetime:
    """Where a freshly armed entry starts; slots at or before it never fire.

    Never before the record's `activeSince`. `none`: from the record's last write or
    this device's start, whichever is later, within the live tolerance: a slot that
    came between the write and the arming fires (the device was up), a restart
    replays nothing. `latest`: one tolerance back (`schedule.arm_cursor`).
    """
    if isinstance(record, OnceTrigger):
        return now
    since = record.fires_from
    if record.spec.catchup is Catchup.LATEST or since is None:
        cursor = schedule.arm_cursor(record.spec, now)
    else:
        written = max(since, _aware(record.updated_at) or since)
        cursor = max(written - EPSILON, up_since, now - schedule.tolerance(record.spec))
    if since is not None:
        cursor = max(cursor, since - EPSILON)  # a slot at `activeSince` itself may fire
    return min(cursor, now)


def slots_between(record: CronTrigger, start: datetime, end: datetime) -> list[datetime]:
    """Every slot in `(start, end]` at or after the record's `activeSince`, oldest first.

    As many as the span holds: a bridge's start is never more than the bridge window
    back (runtime.takeover.BRIDGE_WINDOW, the one clamp), and a late wake's slots are
    within the trigger's tolerance (`schedule.due_slots`)."""
    since = record.fires_from
    if since is not None:
        start = max(start, since - EPSILON)
    slots: list[datetime] = []
    slot = schedule.next_fire(record.spec, start)
    while slot is not None and slot <= end:
        slots.append(slot)
        slot = schedule.next_fire(record.spec, slot)
    return slots


def _aware(when: datetime | None) -> datetime | None:
    return when if when is not None and when.tzinfo is not None else None


def arm(record: Timed, now: datetime, prev: Entry | None, up_since: datetime) -> Entry:
    """A new entry for `record`; `prev` is the entry it re-arms, if any."""
    cursor = start_cursor(record, now, up_since)
    entry = Entry(record=record, cursor=cursor)
    if prev is not None:
        entry.settled = prev.settled
        if isinstance(prev.record, CronTrigger) and prev.cursor <= now:
            entry.cursor = max(entry.cursor, prev.cursor)  # an edit never goes back
        if _same_slots(prev.record, record):  # a bridge not yet fired survives a repin back
            since = record.fires_from
            entry.bridge = tuple(s for s in prev.bridge if since is None or s >= since)
    entry.refresh()
    return entry


def _same_slots(prev: Timed, record: Timed) -> bool:
    return (
        isinstance(prev, CronTrigger)
        and isinstance(record, CronTrigger)
        and record.floating
        and prev.spec == record.spec
    )


def add_bridge(entry: Entry, start: datetime) -> int:
    """Queue a floating cron entry's slots in `(start, cursor]`; how many are new."""
    rec = entry.record
    if not isinstance(rec, CronTrigger) or not rec.floating:
        return 0
    slots = set(entry.bridge) | set(slots_between(rec, start, entry.cursor))
    added = len(slots) - len(entry.bridge)
    entry.bridge = sorted(slots)
    entry.refresh()
    return added


def take(entry: Entry, now: datetime) -> list[tuple[FireKey, datetime, bool]]:
    """The fires of `entry` due at `now` as `(key, due_at, catchup)`, oldest first.

    `catchup` marks bridged slots and slots a late wake passed (all but the newest):
    they run in turn rather than being skipped for overlap. Advances the entry.
    """
    rec = entry.record
    if isinstance(rec, OnceTrigger):
        fires = [(key, at, False) for key, at in _take_once(entry, rec, now)]
    else:
        fires = [(schedule.fire_key_cron(s), s, True) for s in entry.bridge]
        entry.bridge = ()
        slots = schedule.due_slots(rec.spec, entry.cursor, now)
        fires += [(schedule.fire_key_cron(s), s, s != slots[-1]) for s in slots]
        entry.cursor = max(entry.cursor, now)
    entry.refresh()
    return fires


def _take_once(entry: Entry, rec: OnceTrigger, now: datetime) -> list[tuple[FireKey, datetime]]:
    state = schedule.once_due(rec.spec, now, entry.settled)
    if state is schedule.OnceState.WAIT:
        return []
    key = schedule.fire_key_once(rec.spec)
    entry.settled = key
    if state is schedule.OnceState.MISSED:  # never fires; the health pass stamps `missed`
        log.info("once %s: %s is past its grace, not fired", named(rec), key)
        return []
    return [(key, rec.spec.at_utc)] if state is schedule.OnceState.FIRE else []


def restart(entry: Entry, now: datetime) -> None:
    """After a suspend or a clock jump: the cursor restarts from `now` (never a stale burst)."""
    rec = entry.record
    entry.bridge = ()
    if isinstance(rec, CronTrigger):
        fresh = start_cursor(rec, now, now)
        entry.cursor = max(entry.cursor, fresh) if entry.cursor <= now else fresh
    entry.refresh()


# --- the ticker --------------------------------------------------------------------------


class Ticker:
    """Fires this device's armed cron and once triggers; `await run()` until cancelled."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        *,
        clock: Clock,
        max_sleep: float = 30.0,
    ) -> None:
        self._dispatcher = dispatcher
        self._clock = clock
        self._max_sleep = max_sleep
        self._entries: dict[TriggerId, Entry] = {}
        self.failed: dict[TriggerId, str] = {}  # entries dropped because they raised
        self.up_since = clock.wall()  # this device's start (or its last wake from sleep)
        self._wake = asyncio.Event()
        self.dispatched = 0  # fires handed to the dispatcher so far
        self.last_wake: datetime | None = None
        self._heap: list[tuple[datetime, int, Entry]] = []  # (next_at, order, entry)
        self._order = itertools.count()
        self._pending: dict[TriggerId, tuple[Armed, datetime]] = {}  # to arm, with its `now`
        self.chunk = ARM_CHUNK
        self._pending_bridge: datetime | None = None  # a takeover's start, for pending entries
        self.version = 0  # grows whenever an entry's next fire may have moved

    def apply(self, diff: Diff, now: datetime) -> None:
        """Arm, re-arm, refresh or disarm from a registry diff; event triggers are ignored.

        Up to `chunk` entries to arm are armed at once; more wait in `pending` for the run
        loop (`arm_pending`), each armed as of the `now` its diff came with."""
        self.version += 1
        for tid in diff.remove:
            self._entries.pop(tid, None)
            self._pending.pop(tid, None)
            self.failed.pop(tid, None)
        for armed in (*diff.add, *diff.rearm):
            self._pending.pop(armed.record.id, None)
            self._pending[armed.record.id] = (armed, now)
        for armed in diff.update:
            if armed.record.id in self._pending:  # not armed yet: it arms with the newest
                self._pending[armed.record.id] = (armed, self._pending[armed.record.id][1])
            else:
                self._refresh(armed)
        if len(self._pending) <= self.chunk:
            self._arm_some(len(self._pending))
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
        taken = list(itertools.islice(self._pending.items(), count))
        for tid, (armed, now) in taken:
            del self._pending[tid]
            self._arm(armed, now, self._entries.get(tid))
            entry, start = self._entries.get(tid), self._pending_bridge
            if start is not None and entry is not None and add_bridge(entry, start):
                self._push(entry)  # a takeover came before its arming
        if not self._pending:
            self._pending_bridge = None
        return len(taken)

    def bridge(self, start: datetime) -> int:
        """After a takeover: every floating cron entry fires its slots in `(start, cursor]`
        (not before its `activeSince`; claims drop what already ran); how many."""
        added = 0
        for entry in self._entries.values():
            if n := add_bridge(entry, start):
                added += n
                self._push(entry)
        if self._pending:  # entries not armed yet bridge as they are armed
            self._pending_bridge = min(start, self._pending_bridge or start)
        self._wake.set()
        return added

    def _arm(self, armed: Armed, now: datetime, prev: Entry | None) -> None:
        record = armed.record
        self.failed.pop(record.id, None)
        if not isinstance(record, CronTrigger | OnceTrigger):
            self._entries.pop(record.id, None)  # a kind change to `event`
            return
        try:
            entry = arm(record, now, prev, self.up_since)
        except Exception as exc:
            self._drop(record.id, "arm", exc)
            return
        self._entries[record.id] = entry
        self._push(entry)

    # --- the heap of next fires --------------------------------------------------------

    def _push(self, entry: Entry) -> None:
        """File `entry` under its `next_at`; an older item of it goes stale in the heap."""
        self.version += 1
        if entry.next_at is None:
            return
        heapq.heappush(self._heap, (entry.next_at, next(self._order), entry))
        if len(self._heap) > 2 * len(self._entries) + 1024:
            self._rebuild()

    def _rebuild(self) -> None:
        self.version += 1
        self._heap = [(e.next_at, next(self._order), e)
                      for e in self._entries.values() if e.next_at is not None]  # fmt: skip
        heapq.heapify(self._heap)

    def _current(self, item: tuple[datetime, int, Entry]) -> bool:
        at, _, entry = item
        return entry.next_at == at and self._entries.get(entry.record.id) is entry

    def _earliest(self) -> datetime | None:
        """The earliest `next_at` of any entry; stale items on top are dropped."""
        heap = self._heap
        while heap and not self._current(heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def _pop_due(self, now: datetime) -> list[Entry]:
        """Every entry due at `now`, earliest first, each once; taken off the heap."""
        due: list[Entry] = []
        seen: set[int] = set()
        while (at := self._earliest()) is not None and at <= now:
            entry = heapq.heappop(self._heap)[2]
            if id(entry) not in seen:
                seen.add(id(entry))
                due.append(entry)
        return due

    def _drop(self, tid: TriggerId, what: str, exc: Exception) -> None:
        """One entry raised: log it, forget it; the others are untouched."""
        self._entries.pop(tid, None)
        self.version += 1
        self.failed[tid] = f"{what}: {type(exc).__name__}: {exc}"
        log.error("ticker: trigger %s dropped, %s", tid, self.failed[tid])

    def _refresh(self, armed: Armed) -> None:
        entry = self._entries.get(armed.record.id)
        if entry is not None and type(armed.record) is type(entry.record):
            entry.record = armed.record  # type: ignore[assignment]  # fire times stay

    def slept(self, now: datetime) -> None:
        """The machine slept or the wall clock jumped: restart every cursor from `now`."""
        self.up_since = now
        for tid, entry in list(self._entries.items()):
            try:
                restart(entry, now)
            except Exception as exc:
                self._drop(tid, "restart", exc)
        self._pending = {tid: (armed, now) for tid, (armed, _) in self._pending.items()}
        self._pending_bridge = None  # nothing of the sleep is bridged
        self._rebuild()
        self._wake.set()

    def next_fires(self) -> dict[TriggerId, datetime]:
        """When each armed entry fires next (for `nextFireAt` and `baton status`)."""
        return {tid: e.next_at for tid, e in self._entries.items() if e.next_at is not None}

    def next_fire(self, tid: TriggerId) -> datetime | None:
        """When one armed entry fires next; None when it is not armed or never fires again."""
        entry = self._entries.get(tid)
        return entry.next_at if entry is not None else None

    async def run(self) -> None:
        """Fire what is due, sleep until the next fire or a change; until cancelled."""
        while True:
            await self.tick()
            await self._nap()

    async def tick(self) -> int:
        """One wake: dispatch every fire due at the wall clock's now; how many there were.

        Each due entry's fires are dispatched as soon as they are taken, and the loop is
        yielded to after each, so the first fires of a large burst are claimed while the
        later entries are still being computed (a cron step costs ≈ 50–80 µs).
        """
        self._wake.clear()
        await self.arm_pending()
        now = self._clock.wall()
        self.last_wake = now
        count = 0
        for entry in self._pop_due(now):  # a snapshot: `apply` may change entries meanwhile
            try:
                fires = take(entry, now)
            except Exception as exc:
                self._drop(entry.record.id, "take", exc)
                continue
            self._push(entry)
            for key, at, catchup in fires:
                count += 1
                request = FireRequest(trigger=entry.record, key=key, due_at=at, catchup=catchup)
                await self._dispatch(request)
            await asyncio.sleep(0)  # a yield, not a wait: let the fires just taken start
        return count

    async def _dispatch(self, request: FireRequest) -> None:
        self.dispatched += 1
        log.debug("due %s@%s", request.trigger.id, request.key)
        try:
            await self._dispatcher.fire(request)
        except Exception:
            log.exception("dispatch of %s@%s failed", named(request.trigger), request.key)

    def delay(self, now: datetime) -> float:
        """Seconds to sleep from `now`: until the earliest next fire, at most `max_sleep`."""
        if self._pending:
            return 0.0
        earliest = self._earliest()
        if earliest is None:
            return self._max_sleep
        return min(self._max_sleep, max(0.0, (earliest - now).total_seconds()))

    async def _nap(self) -> None:
        await sleep_or_wake(self._clock, self.delay(self._clock.wall()), self._wake)

    def status(self) -> dict[str, Any]:
        at = self._earliest()
        first = (self._heap[0][2].record.id, at) if at is not None else None
        return {
            "armed": len(self._entries),
            "pending": len(self._pending),
            "cron": sum(isinstance(e.record, CronTrigger) for e in self._entries.values()),
            "once": sum(isinstance(e.record, OnceTrigger) for e in self._entries.values()),
            "dispatched": self.dispatched,
            "failed": dict(self.failed),
            "lastWake": iso(self.last_wake) if self.last_wake else None,
            "next": {"trigger": first[0], "at": iso(first[1])} if first else None,
        }
