"""When the health pass must look again at a record by the clock alone: ids by instant.

Owns the instants at which a verdict or a `nextFireAt` write could turn with no change to
the record (a stamped fire coming due or overdue, a breaker closing, a `once` passing its
grace, an armed fire coming within the horizon; `runtime.health.verdicts.turn` computes them).
Instants are grouped by the whole second after them, each group a list of ids under one
heap item, so 100,000 records whose turns share an instant cost one heap item and a list
slot each. An id judged again before its instant leaves a stale mention, which costs one
needless look when it comes; `held` counts mentions so the owner can start afresh when
they pile up. No clock, no I/O: `now` is passed in.
"""

from __future__ import annotations

import heapq
from datetime import datetime, timedelta

from triggers.records import TriggerId

_SECOND = timedelta(seconds=1)


def ceil_second(at: datetime) -> datetime:
    """`at`, or the next whole second after it (so a turn is never looked at early)."""
    if not at.microsecond:
        return at
    try:
        return at.replace(microsecond=0) + _SECOND
    except OverflowError:
        return at.replace(microsecond=0)


class Rechecks:
    """Record ids under the instant (to the second) at which to look at them again."""

    __slots__ = ("_heap", "_ids", "held")

    def __init__(self) -> None:
        self._heap: list[datetime] = []
        self._ids: dict[datetime, list[TriggerId]] = {}
        self.held = 0  # mentions held, stale ones included

    def push(self, at: datetime, tid: TriggerId) -> None:
        at = ceil_second(at)
        ids = self._ids.get(at)
        if ids is None:
            ids = self._ids[at] = []
            heapq.heappush(self._heap, at)
        ids.append(tid)
        self.held += 1

    def earliest(self) -> datetime | None:
        return self._heap[0] if self._heap else None

    def pop_due(self, now: datetime) -> set[TriggerId]:
        """Every id whose instant is at or before `now`, taken off."""
        due: set[TriggerId] = set()
        while self._heap and self._heap[0] <= now:
            ids = self._ids.pop(heapq.heappop(self._heap))
            due.update(ids)
            self.held -= len(ids)
        return due

    def clear(self) -> None:
        self._heap, self._ids, self.held = [], {}, 0
