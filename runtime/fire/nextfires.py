"""The ticker's entries and heap: every armed entry's next fire, earliest first.

Owns the armed entries' table (`Entries`, the ticker's to write) and the order in which
they come due (SPEC "Sleep and clocks": the sleep is read off the top). An entry is
pushed under its `next_at` whenever that moves; the older items of it go stale and are
skipped when they surface, and the heap is rebuilt when stale items outnumber the
entries, so a device at rest with 100,000 entries costs nothing per entry.
No clock, no I/O: `now` is passed in.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from datetime import datetime

from runtime.fire.cursors import Entry
from triggers.records import TriggerId


class Entries(dict[TriggerId, Entry]):
    """The armed entries, by trigger: written by the ticker alone, read by what stamps a
    trigger's `nextFireAt` (a fire's stamps, the health pass), so neither asks the ticker."""

    def next_fire(self, tid: TriggerId) -> datetime | None:
        """When one armed entry fires next; None when it is not armed or never fires again."""
        entry = self.get(tid)
        return entry.next_at if entry is not None else None


class FireHeap:
    """The heap over `entries` (the ticker's dict of armed entries, read, never written)."""

    def __init__(self, entries: Mapping[TriggerId, Entry]) -> None:
        self._entries = entries
        self._heap: list[tuple[datetime, TriggerId]] = []  # (next_at, id): two shared refs

    def __len__(self) -> int:
        """Items held, stale ones included."""
        return len(self._heap)

    def push(self, entry: Entry) -> None:
        """File `entry` under its `next_at`; an older item of it goes stale in the heap."""
        if entry.next_at is None:
            return
        heapq.heappush(self._heap, (entry.next_at, entry.record.id))
        if len(self._heap) > 2 * len(self._entries) + 1024:
            self.rebuild()

    def rebuild(self) -> None:
        self._heap = [(e.next_at, tid) for tid, e in self._entries.items() if e.next_at is not None]
        heapq.heapify(self._heap)

    def _current(self, item: tuple[datetime, TriggerId]) -> bool:
        entry = self._entries.get(item[1])
        return entry is not None and entry.next_at == item[0]

    def earliest(self) -> datetime | None:
        """The earliest `next_at` of any entry; stale items on top are dropped."""
        heap = self._heap
        while heap and not self._current(heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def first(self) -> tuple[TriggerId, datetime] | None:
        """The entry that fires first, and when."""
        at = self.earliest()
        return (self._heap[0][1], at) if at is not None else None

    def count_until(self, at: datetime, limit: int) -> int:
        """How many entries fire by `at` (at most `limit` are counted): the heap's items
        up to `at` only are looked at."""
        heap, count, todo = self._heap, 0, [0]
        while todo and count < limit:
            i = todo.pop()
            if i < len(heap) and heap[i][0] <= at:
                count += self._current(heap[i])
                todo += (2 * i + 1, 2 * i + 2)
        return count

    def pop_due(self, now: datetime) -> list[Entry]:
        """Every entry due at `now`, earliest first, each once; taken off the heap."""
        due: list[Entry] = []
        while (at := self.earliest()) is not None and at <= now:
            entry = self._entries[heapq.heappop(self._heap)[1]]
            if not due or due[-1] is not entry:  # an entry pushed twice at the same instant
                due.append(entry)
        return due
