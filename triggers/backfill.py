"""Backfill: which slots of a range a user's `triggers backfill` runs, or why it refuses.

Owns the rule of SPEC "Trigger policies" (backfill is a user's act only): the cron slots
of `[from, to]` inside the record's window that never fired, at most `MAX_SLOTS`, none
before the record's `activeSince` and none still to come (a backfill runs what passed).
Pure: the fired keys, the range and `now` are passed in.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta

from core.vocab import iso
from triggers import policies, schedule
from triggers.records import CronTrigger, Trigger

MAX_SLOTS = 100


class BackfillRefused(ValueError):
    """A backfill that may not run; `field` names what is wrong."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"`{field}`: {reason}")
        self.field, self.reason = field, reason


def slots(
    record: Trigger, start: datetime, end: datetime, fired: Collection[str], *, now: datetime
) -> list[datetime]:
    """The slots of `[start, end]` to run, oldest first; `fired`: the keys that already ran."""
    if not isinstance(record, CronTrigger):
        raise BackfillRefused(
            "kind", f"only a cron trigger has slots to backfill, not {record.kind}"
        )
    if end < start:
        raise BackfillRefused("to", f"{iso(end)} is before `from` {iso(start)}")
    if end > now:
        raise BackfillRefused("to", f"{iso(end)} is still to come (now {iso(now)})")
    since = record.fires_from
    if since is not None and start < since:
        raise BackfillRefused("from", f"{iso(start)} reaches before `activeSince` {iso(since)}")
    found: list[datetime] = []
    slot = schedule.next_fire(record.spec, start - timedelta(microseconds=1))
    while slot is not None and slot <= end:
        if policies.in_window(record.window, slot):
            found.append(slot)
        if len(found) > MAX_SLOTS:
            raise BackfillRefused("to", f"the range holds more than {MAX_SLOTS} slots")
        slot = schedule.next_fire(record.spec, slot)
    return [s for s in found if schedule.fire_key_cron(s) not in fired]
