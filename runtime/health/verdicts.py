"""The health pass's pure part: what the records' own stamps say, and what is worth a write.

Owns reading the open breakers and last run statuses from the records' stamps (one
unreadable stamp costs that record alone, logged), the stamp a record shows now, when
the clock alone could turn what a pass decides for a record (`turn`), and the rules
for `nextFireAt` writes: equal to the second, not yet near (`NEXT_FIRE_HORIZON`), or a
due fire still awaiting its run. Functions of (records, now): no I/O, no clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from programs import breaker, rollup
from triggers import health
from triggers.records import Loaded, OnceTrigger, PeerId, Salvaged, Trigger, TriggerId

log = logging.getLogger("runtime.health.stamper")

NEXT_FIRE_HORIZON = timedelta(hours=24)
HORIZON_STEP = timedelta(hours=1)  # fires coming within the horizon are looked at hourly
EPSILON = timedelta(microseconds=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
T = TypeVar("T")


def turn(record: Loaded, want: datetime | None, inputs: health.HealthInputs) -> datetime | None:
    """The first instant after `inputs.now` at which a pass could decide otherwise for
    `record` by the clock alone, given its armed next fire `want`: its stamped `nextFireAt`
    coming due (then overdue), its breaker closing, a `once` passing its grace, or `want`
    coming within the horizon (to the hour: written up to an hour after it comes within).
    None when only a change of the record or of the pass's inputs could change anything."""
    if isinstance(record, Salvaged):
        return None
    soon: list[datetime | None] = [inputs.breaker_until.get(record.id)]
    if (due := record.next_fire_at) is not None:
        soon += [due, _after(due, inputs.overdue_margin)]  # `awaits_run`, then `overdue`
    elif want is not None:
        soon.append(_ceil(want - NEXT_FIRE_HORIZON, HORIZON_STEP))  # `not_near` turns
    if isinstance(record, OnceTrigger):  # `missed`
        soon.append(_after(record.spec.at_utc, timedelta(seconds=record.spec.grace_seconds)))
    later = [t for t in soon if t is not None and t > inputs.now]
    return min(later) if later else None


def _after(t: datetime, span: timedelta) -> datetime | None:
    """The first instant strictly after `t + span` (a verdict that asks `now - t > span`)."""
    try:
        return t + span + EPSILON
    except OverflowError:  # near year 9999: never
        return None


def _ceil(t: datetime, step: timedelta) -> datetime:
    """`t` rounded up to a multiple of `step` since the epoch (instants share a turn)."""
    rest = (t - EPOCH) % step
    try:
        return t + (step - rest) if rest else t
    except OverflowError:
        return t


def peer_or_none(peer: str | None) -> PeerId | None:
    return PeerId(peer) if peer else None


def shown(record: Loaded | None) -> tuple[str, str]:
    """The stamp the record shows now (stamps keep `rev`, so the stamp itself is the version)."""
    return ("", "") if record is None else health.current_stamp(record)


def open_breakers(records: Iterable[Loaded]) -> dict[TriggerId, datetime]:
    return _read(records, "breaker", lambda s: breaker.until(breaker.from_dict(s)))


def last_statuses(records: Iterable[Loaded]) -> dict[TriggerId, str]:
    return _read(records, "rollup", lambda s: rollup.from_dict(s).last_status or None)


def _read(
    records: Iterable[Loaded], stamp: str, read: Callable[[dict[str, Any]], T | None]
) -> dict[TriggerId, T]:
    """What `read` finds in each record's `stamp` (`breaker`, `rollup`), where it finds
    something; an unreadable stamp (written by hand) costs that record alone, logged."""
    found: dict[TriggerId, T] = {}
    for record in records:
        written = None if isinstance(record, Salvaged) else getattr(record, stamp)
        if not written:
            continue
        try:
            value = read(written)
        except Exception as exc:
            log.warning("health %s: %s stamp unreadable: %r", record.id, stamp, exc)
            continue
        if value is not None:
            found[record.id] = value
    return found


def awaits_run(record: Trigger, now: datetime) -> bool:
    """The stamped `nextFireAt` is due and no run came since: it stays until one does."""
    due = record.next_fire_at
    if due is None or due > now:
        return False
    return record.last_run_at is None or record.last_run_at < due


def not_near(record: Trigger, want: datetime | None, now: datetime) -> bool:
    """A first stamp for a fire beyond the horizon: not worth a write yet."""
    return record.next_fire_at is None and want is not None and want - now > NEXT_FIRE_HORIZON


def same_instant(a: datetime | None, b: datetime | None) -> bool:
    """Equal to the second: stamps travel as RFC 3339 and may lose a fraction."""
    if a is None or b is None:
        return a is b
    return int(a.timestamp()) == int(b.timestamp())
