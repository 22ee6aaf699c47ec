"""When a trigger fires: slots, catch-up, grace and fire keys, as functions of (spec, now).

Owns the pure API the ticker calls (SPEC "When triggers fire", "Fire claims"): `next_fire`,
`latest_at_or_before`, `arm_cursor`, `due`, `due_slots`, `once_due`, the `fire_key_*` of a
claim, `upcoming` (`baton next`) and a record's `upcoming_of` (`triggers show`, the
dashboard). Cron instant math (the DST rule) lives in cron.py. Must not read the clock or
do I/O.
"""

from __future__ import annotations

import enum
import functools
from datetime import datetime, timedelta

import msgspec

from core.vocab import canonical_key, key_instant
from triggers import cron
from triggers.bounds import CRON_LATEST_GRACE, LIVE_SLACK
from triggers.policies import in_window
from triggers.records import Catchup, CronSpec, CronTrigger, FireKey, OnceSpec, OnceTrigger, Trigger

MIN_TOLERANCE = 1.0
"""No tolerance is below this: a tick never lands exactly on the slot's second."""


class OnceState(enum.StrEnum):
    WAIT = "wait"
    FIRE = "fire"
    MISSED = "missed"
    DONE = "done"


class DstNote(enum.StrEnum):
    SHIFTED = "shifted"  # a fixed-time job moved out of the spring gap
    MERGED = "merged"  # a fixed-time job in the repeated autumn hour: second occurrence dropped


LEGEND = {
    DstNote.SHIFTED: "its wall time fell in the spring gap; it fires once at the gap's end",
    DstNote.MERGED: "its wall time occurs twice; it fires at the first occurrence only",
}


class Fire(msgspec.Struct, frozen=True, kw_only=True):
    at: datetime  # UTC
    local: datetime  # the same instant in the spec's zone
    dst: DstNote | None = None


# --- slots ---------------------------------------------------------------------------


def next_fire(spec: CronSpec | OnceSpec, after: datetime) -> datetime | None:
    """The first fire strictly after `after`, aware UTC; None if there is none."""
    if isinstance(spec, OnceSpec):
        return spec.at_utc if spec.at_utc > after else None
    return _cron_next(spec.expr, spec.tz, after)


@functools.lru_cache(maxsize=1024)
def _cron_next(expr: str, tz: str, after: datetime) -> datetime | None:
    """One slot search per (expression, zone, instant): entries armed together (runtime.fire.ticker
    arms them sorted by expression and zone) share their cursor and so their next slot."""
    return cron.next_slot(cron.rule(expr, tz), after)


def latest_at_or_before(spec: CronSpec, t: datetime) -> datetime | None:
    """The last slot at or before `t`, aware UTC; None if there is none."""
    return cron.latest_slot(cron.rule_of(spec), t)


def tolerance(spec: CronSpec) -> timedelta:
    """How late a cron slot may be fired.

    `latest`: `graceSeconds`, default 3600. `none`: 30 s of live slack, lowered to
    `graceSeconds` when that is smaller. Never below one second.
    """
    if spec.grace_seconds is None:
        return _LATEST if spec.catchup is Catchup.LATEST else _LIVE
    if spec.catchup is Catchup.LATEST:
        grace = spec.grace_seconds
    else:
        grace = min(LIVE_SLACK, spec.grace_seconds)
    return timedelta(seconds=max(MIN_TOLERANCE, grace))


_LIVE, _LATEST = timedelta(seconds=LIVE_SLACK), timedelta(seconds=CRON_LATEST_GRACE)


def arm_cursor(spec: CronSpec, now: datetime) -> datetime:
    """Where a freshly armed (started, resumed, edited) trigger's cursor starts.

    Slots at or before the cursor never fire: `none` arms at `now` (live-only);
    `latest` arms one tolerance back, so a slot missed while nobody ran it may fire.
    """
    if spec.catchup is Catchup.LATEST:
        return now - tolerance(spec)
    return now


def due(spec: CronSpec, cursor: datetime, now: datetime) -> datetime | None:
    """The one slot to fire now: the latest in (cursor, now], if within tolerance.

    At most one slot, whatever the gap between `cursor` and `now`; older slots in
    that stretch are dropped, never queued. The caller moves its cursor to `now`.
    """
    slot = latest_at_or_before(spec, now)
    if slot is None or slot <= cursor or now - slot > tolerance(spec):
        return None
    return slot


def due_slots(spec: CronSpec, cursor: datetime, now: datetime) -> list[datetime]:
    """The slots to fire at a wake at `now`, oldest first.

    `none`: every slot in (cursor, now] within the tolerance: a wake that comes late
    (a stalled loop, a stopped process; not a sleep, whose caller restarts the cursor)
    loses no slot the device was up for. `latest`: the newest only (`due`), as after
    downtime: missed slots are coalesced into one.
    """
    if spec.catchup is Catchup.LATEST:
        slot = due(spec, cursor, now)
        return [] if slot is None else [slot]
    slots: list[datetime] = []
    slot = next_fire(spec, max(cursor, now - tolerance(spec)))
    while slot is not None and slot <= now:
        slots.append(slot)
        slot = next_fire(spec, slot)
    return slots


def once_due(spec: OnceSpec, now: datetime, fired_key: FireKey | None) -> OnceState:
    """The state of a `once` trigger at `now`; `fired_key` is the key it last fired with
    (an older build's form of it too)."""
    if fired_key is not None and canonical_key(fired_key) == fire_key_once(spec):
        return OnceState.DONE
    at = spec.at_utc
    if now < at:
        return OnceState.WAIT
    if now - at <= timedelta(seconds=spec.grace_seconds):
        return OnceState.FIRE
    return OnceState.MISSED


# --- fire keys -----------------------------------------------------------------------


def fire_key_cron(slot: datetime) -> FireKey:
    return FireKey(key_instant(slot))


def fire_key_once(spec: OnceSpec) -> FireKey:
    return FireKey(key_instant(spec.at_utc))


def fire_key_event(message_id: str) -> FireKey:
    return FireKey(message_id)


# --- preview -------------------------------------------------------------------------


def dst_note(spec: CronSpec, slot: datetime) -> DstNote | None:
    """What the DST rule did to this slot of a fixed-time job, if anything."""
    r = cron.rule_of(spec)
    if r.wildcard:
        return None
    if cron.gap_hit(r, slot):
        return DstNote.SHIFTED
    if cron.repeated(r.tz, slot):
        return DstNote.MERGED
    return None


def upcoming(spec: CronSpec | OnceSpec, start: datetime, count: int) -> list[Fire]:
    """The first `count` fires at or after `start`."""
    fires: list[Fire] = []
    t: datetime | None = start - timedelta(microseconds=1)
    while len(fires) < count and t is not None:
        t = next_fire(spec, t)
        if t is not None:
            fires.append(_fire(spec, t))
    return fires


def upcoming_of(record: Trigger, now: datetime, count: int) -> list[Fire]:
    """The next `count` fires of a record from `now` (`triggers show`, `GET …/next`): none for
    an event trigger or a paused one; from the end of a snooze; only inside its window."""
    if not record.enabled or not isinstance(record, CronTrigger | OnceTrigger):
        return []
    since = record.fires_from  # a snooze moves it
    start = since if since is not None and since > now else now
    return [f for f in upcoming(record.spec, start, count) if in_window(record.window, f.at)]


def _fire(spec: CronSpec | OnceSpec, at: datetime) -> Fire:
    if isinstance(spec, OnceSpec):
        local = spec.at if isinstance(spec.at, datetime) else at
        return Fire(at=at, local=local)
    tz = cron.rule_of(spec).tz
    return Fire(at=at, local=at.astimezone(tz), dst=dst_note(spec, at))
