"""The health pass's pure part: what the records' own stamps say, and what is worth a write.

Owns reading the open breakers and last run statuses from the records' stamps (one
unreadable stamp costs that record alone, logged), the stamp a record shows now, when
the clock alone could turn a verdict over the same records (`turns_at`, at most
`FULL_PASS` away), and the rules for `nextFireAt` writes: equal to the second, not yet
near (`NEXT_FIRE_HORIZON`), or a due fire still awaiting its run. Functions of
(records, now): no I/O, no clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

from programs import breaker, rollup
from triggers import health
from triggers.records import Loaded, OnceTrigger, PeerId, Salvaged, Trigger, TriggerId

log = logging.getLogger("runtime.healthpass")

NEXT_FIRE_HORIZON = timedelta(hours=24)
FULL_PASS = timedelta(minutes=10)  # a settled device still judges every record this often
T = TypeVar("T")


def turns_at(
    records: Iterable[Loaded], armed: Mapping[TriggerId, datetime], inputs: health.HealthInputs
) -> datetime:
    """The first instant at which a pass over the same records could judge otherwise by the
    clock alone: a stamped `nextFireAt` coming due, a breaker closing, a `once` passing its
    `at` or its grace, an armed fire coming within the horizon; at most `FULL_PASS` away."""
    soon = [inputs.now + FULL_PASS, *inputs.breaker_until.values()]
    for record in records:
        if isinstance(record, Salvaged):
            continue
        if record.next_fire_at is not None:
            soon.append(record.next_fire_at)
        elif (want := armed.get(record.id)) is not None:
            soon.append(want - NEXT_FIRE_HORIZON)
        if isinstance(record, OnceTrigger):
            soon += [record.spec.at_utc, record.spec.at_utc + timedelta(
                seconds=record.spec.grace_seconds)]  # fmt: skip
    return min(soon)


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
