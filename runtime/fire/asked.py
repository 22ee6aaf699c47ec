"""Runs asked by hand (`baton triggers run`): the fires this device owes the asks it holds.

Owns turning a record's `runAsked` (written by space.run_asks) into one fire with its key
`manual:<requestedAt>`, due at the ask, a catch-up fire (it queues behind a running run,
never skipped for overlap), for the records this device is responsible for as the
reconciler's diffs arm them: a pinned one on its owner, a floating one on the lease's
holder (a takeover's resync arms them again). Each key is handed over once per armed
record; an ask older than `FRESH` (a device back long after it) or of a paused record is
not taken. Whether it runs is the claim's: a second device or a restart that hands the same
key over is refused `already_claimed`. Pure of I/O and clocks: `now` is passed in.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from runtime.fire.dispatch import FireRequest, named
from triggers.records import FireKey, Trigger, TriggerId
from triggers.registry import Diff

log = logging.getLogger(__name__)

FRESH = timedelta(minutes=10)
"""An ask older than this is not taken: `triggers run` waits ≈ 30 s for it, not an hour."""


class RunAsks:
    """The manual fires due from each diff: `take(diff, now)`."""

    def __init__(self, fresh: timedelta = FRESH) -> None:
        self._fresh = fresh
        self._taken: dict[TriggerId, str] = {}  # the last key handed over, per trigger

    def take(self, diff: Diff, now: datetime) -> list[FireRequest]:
        """The fires of the asks `diff` brings that were not handed over yet."""
        for tid in diff.remove:
            self._taken.pop(tid, None)
        fires = []
        for armed in (*diff.add, *diff.rearm, *diff.update):
            fire = self._fire(armed.record, now)
            if fire is not None:
                fires.append(fire)
        return fires

    def _fire(self, record: Trigger, now: datetime) -> FireRequest | None:
        asked = record.run_asked
        if asked is None or not record.enabled or self._taken.get(record.id) == asked.key:
            return None  # a paused record's claim is refused `paused`: a run record for nothing
        self._taken[record.id] = asked.key
        if now - asked.requested_at > self._fresh:
            return None
        log.info("run asked of %s: firing %s", named(record), asked.key)
        key = FireKey(asked.key)
        return FireRequest(trigger=record, key=key, due_at=asked.requested_at, catchup=True)
