"""Cursors: where each armed cron or once entry stands, and which of its fires are due.

Owns the entry math of the ticker (SPEC "When triggers fire", "Active since"), as
functions of (entry, now) → fires, with no clock and no I/O: where a freshly armed
entry's cursor starts (`start_cursor`), a re-arm that never goes back (`arm`), the
slots a takeover bridges (`add_bridge`; a backfill asked again: `retake_backfill`),
the fires due at a wake (`take`), a restart after a sleep (`restart`). Slots at or
before an entry's cursor never fire; nothing fires before a record's `activeSince`,
outside its `window` or after its `maxRuns`; a jittered slot is due at slot + jitter
(triggers.policies). runtime.fire.ticker holds the entries, sleeps and dispatches; it
must not compute any of this itself.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

import msgspec

from runtime.fire.dispatch import named
from triggers import policies, schedule
from triggers.health import ok_runs
from triggers.records import Catchup, CronTrigger, FireKey, OnceTrigger

log = logging.getLogger(__name__)

EPSILON = timedelta(microseconds=1)

Timed = CronTrigger | OnceTrigger


class Entry(msgspec.Struct, gc=False):
    """One armed cron or once trigger and where it stands (untracked by the cycle collector:
    it holds a record, instants and a tuple, never itself; 100,000 of them would otherwise
    be walked at each full collection)."""

    record: Timed
    cursor: datetime  # slots at or before the cursor never fire (cron), but for a bridge
    settled: FireKey | None = None  # a once: the key it fired with (or missed)
    bridge: Sequence[datetime] = ()  # cron slots to fire at the next wake (no list per entry)
    next_at: datetime | None = None  # earliest instant this entry may fire; None: never
    backfilled: str = ""  # the id of the last backfill request taken into the bridge
    attempt: tuple[FireKey, datetime] | None = None  # a stamped retry this device runs

    def refresh(self) -> None:
        rec = self.record
        if isinstance(rec, OnceTrigger):
            due = self.settled != schedule.fire_key_once(rec.spec) and _may_fire(
                rec, rec.spec.at_utc
            )
            self.next_at = rec.spec.at_utc if due else None
        elif self.bridge:
            self.next_at = self.bridge[0]
        else:
            slot = _next_slot(rec, self.cursor)
            self.next_at = None if slot is None else slot + _jitter(rec, slot)
        if self.attempt is not None and (self.next_at is None or self.attempt[1] < self.next_at):
            self.next_at = self.attempt[1]


def _may_fire(record: Timed, at: datetime) -> bool:
    """Whether a fire for `at` may happen: not before `activeSince` (a snooze moves it ahead),
    in the window, runs left."""
    since = record.fires_from
    if since is not None and at < since:
        return False
    if record.max_runs is not None and policies.runs_done(record.max_runs, ok_runs(record)):
        return False
    return policies.in_window(record.window, at)


def _next_slot(record: CronTrigger, after: datetime) -> datetime | None:
    """The first slot after `after` its policies let fire; None when none will."""
    since, window = record.fires_from, record.window
    if since is not None and after < since:  # a snooze: from its end
        after = since - EPSILON
    if window is not None and window.start_at is not None and after < window.start_at:
        after = window.start_at - EPSILON
    slot = schedule.next_fire(record.spec, after)
    return slot if slot is not None and _may_fire(record, slot) else None


def _jitter(record: CronTrigger, slot: datetime) -> timedelta:
    seconds = record.jitter_seconds
    return policies.jitter(record.id, slot, seconds) if seconds else timedelta(0)


def start_cursor(record: Timed, now: datetime, up_since: datetime) -> datetime:
    """Where a freshly armed entry starts; slots at or before it never fire.

    Never before the record's `activeSince`. `none`: from the record's last write or
    this device's start, whichever is later, within the live tolerance: a slot that
    came between the write and the arming fires (the device was up), a restart
    replays nothing. `latest`: one tolerance back (`schedule.arm_cursor`).
    """
    if isinstance(record, OnceTrigger):
        return now
    since, spec = record.fires_from, record.spec
    if spec.catchup is Catchup.LATEST or since is None:
        cursor = schedule.arm_cursor(spec, now)
    else:  # max(write - EPSILON, up_since, now - tolerance), the subtraction made only if needed
        cursor = now - schedule.tolerance(spec)
        if up_since > cursor:
            cursor = up_since
        written = record.updated_at
        if written is None or written.tzinfo is None or written < since:
            written = since
        if written > cursor:
            cursor = written - EPSILON
    if since is not None and since > cursor:
        cursor = since - EPSILON  # a slot at `activeSince` itself may fire
    return cursor if cursor < now else now


def slots_between(record: CronTrigger, start: datetime, end: datetime) -> list[datetime]:
    """Every slot in `(start, end]` at or after the record's `activeSince`, oldest first.

    As many as the span holds: a bridge's start is never more than the bridge window
    back (runtime.election.takeover.BRIDGE_WINDOW, the one clamp), and a late wake's slots are
    within the trigger's tolerance (`schedule.due_slots`)."""
    since = record.fires_from
    if since is not None:
        start = max(start, since - EPSILON)
    slots: list[datetime] = []
    slot = schedule.next_fire(record.spec, start)
    while slot is not None and slot <= end:
        if _may_fire(record, slot):
            slots.append(slot)
        slot = schedule.next_fire(record.spec, slot)
    return slots


def arm(record: Timed, now: datetime, prev: Entry | None, up_since: datetime) -> Entry:
    """A new entry for `record`; `prev` is the entry it re-arms, if any."""
    entry = Entry(record, start_cursor(record, now, up_since))
    if prev is not None:
        entry.settled = prev.settled
        if isinstance(prev.record, CronTrigger) and prev.cursor <= now:
            entry.cursor = max(entry.cursor, prev.cursor)  # an edit never goes back
        if _same_slots(prev.record, record):  # a bridge not yet fired survives a repin back
            since = record.fires_from
            entry.bridge = tuple(s for s in prev.bridge if since is None or s >= since)
        entry.backfilled, entry.attempt = prev.backfilled, prev.attempt
    else:
        add_attempt(entry, entry.cursor)
    add_backfill(entry, now)
    entry.refresh()
    return entry


def _same_slots(prev: Timed, record: Timed) -> bool:
    return (
        isinstance(prev, CronTrigger)
        and isinstance(record, CronTrigger)
        and record.floating
        and prev.spec == record.spec
    )


BACKFILL_FRESH = timedelta(hours=1)
"""A backfill request older than this is not taken (a device starting long after it)."""


def add_backfill(entry: Entry, now: datetime) -> int:
    """Queue the slots of the record's backfill request, once per request; how many."""
    rec, asked = entry.record, entry.record.backfill
    if asked is None or asked.id == entry.backfilled or not isinstance(rec, CronTrigger):
        return 0
    entry.backfilled = asked.id
    if asked.requested_at is None or now - asked.requested_at > BACKFILL_FRESH:
        return 0
    slots = {s for s in map(_key_slot, asked.keys) if s is not None}
    added = len(slots - set(entry.bridge))
    entry.bridge = sorted(slots | set(entry.bridge))
    entry.refresh()
    return added


def retake_backfill(entry: Entry, now: datetime) -> int:
    """Queue the record's backfill request again (a takeover, a wake from sleep): its
    slots taken before may have been dropped unrun (the device was not acting, a sleep
    cleared the bridge); claims drop the ones that ran. How many are queued."""
    entry.backfilled = ""
    return add_backfill(entry, now)


def _key_slot(key: str) -> datetime | None:
    try:
        slot = datetime.fromisoformat(key)
    except ValueError:
        return None
    return slot if slot.tzinfo is not None else None


def add_attempt(entry: Entry, start: datetime) -> bool:
    """Take the record's stamped next attempt (a failed fire's retry) if it is due after
    `start` (the bridge rule: a retry that came due while no one could run it, never one
    from before); whether it was taken."""
    stamped = entry.record.next_attempt
    if stamped is None or stamped.due_at <= start or entry.attempt is not None:
        return False
    entry.attempt = (FireKey(stamped.key), stamped.due_at)
    entry.refresh()
    return True


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
    attempt, entry.attempt = entry.attempt, None
    if attempt is not None and attempt[1] > now:
        attempt, entry.attempt = None, attempt
    if isinstance(rec, OnceTrigger):
        fires = [(key, at, False) for key, at in _take_once(entry, rec, now)]
    else:
        bridged = [s for s in entry.bridge if _may_fire(rec, s)]
        fires = [(schedule.fire_key_cron(s), s, True) for s in bridged]
        entry.bridge = ()
        slots, entry.cursor = _due(rec, entry.cursor, now)
        slots = [s for s in slots if _may_fire(rec, s)]
        fires += [(schedule.fire_key_cron(s), s + _jitter(rec, s), s != slots[-1]) for s in slots]
    if attempt is not None:
        fires.insert(0, (attempt[0], attempt[1], True))
    entry.refresh()
    return fires


def _due(rec: CronTrigger, cursor: datetime, now: datetime) -> tuple[list[datetime], datetime]:
    """The slots due at `now` and where the cursor moves. A jittered slot is due at slot +
    its jitter, in slot order: the cursor stops at the last slot taken, never past one
    still waiting, and a tolerance late is counted from the jittered instant."""
    if not rec.jitter_seconds:
        return schedule.due_slots(rec.spec, cursor, now), max(cursor, now)
    low = max(cursor, now - schedule.tolerance(rec.spec) - timedelta(seconds=rec.jitter_seconds))
    slots: list[datetime] = []
    slot = schedule.next_fire(rec.spec, low)
    while slot is not None and slot <= now and slot + _jitter(rec, slot) <= now:
        slots.append(slot)
        slot = schedule.next_fire(rec.spec, slot)
    if slots and rec.spec.catchup is Catchup.LATEST:
        slots = slots[-1:]
    return slots, max(low, slots[-1]) if slots else low


def _take_once(entry: Entry, rec: OnceTrigger, now: datetime) -> list[tuple[FireKey, datetime]]:
    state = schedule.once_due(rec.spec, now, entry.settled)
    if state is schedule.OnceState.WAIT:
        return []
    key = schedule.fire_key_once(rec.spec)
    entry.settled = key
    if not _may_fire(rec, rec.spec.at_utc):  # outside its window, or its runs are done
        return []
    if state is schedule.OnceState.MISSED:  # never fires; the health pass stamps `missed`
        log.info("once %s: %s is past its grace, not fired", named(rec), key)
        return []
    return [(key, rec.spec.at_utc)] if state is schedule.OnceState.FIRE else []


def restart(entry: Entry, now: datetime, ahead: timedelta = timedelta(0)) -> None:
    """After a suspend or a clock jump: the cursor restarts from `now` (never a stale burst).

    A cursor up to `ahead` past `now` is where the ticker's look ahead took it, not a
    clock that went back: it stays, so nothing taken is taken again."""
    rec = entry.record
    entry.bridge = ()
    if isinstance(rec, CronTrigger):
        fresh = start_cursor(rec, now, now)
        entry.cursor = max(entry.cursor, fresh) if entry.cursor <= now + ahead else fresh
    retake_backfill(entry, now)  # a user's request is not a stale burst: it stays asked
    entry.refresh()
