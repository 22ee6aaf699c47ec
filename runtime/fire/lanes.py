"""Lanes: each trigger's fires on this device, as admission sees them.

Owns, per trigger (SPEC "Runs": overlap, queue, breaker), its lane: the admission slots
(`programs.admission`), the claimed fires waiting in its queue with their turns, how
many catch-up fires are admitted and not yet finished, and its `Book` (breaker, rollup),
seeded from the record's stamps and re-seeded when the record shows runs this device did
not make (another device ran it meanwhile).

Bookkeeping only: no I/O, no tasks (each fire's own task, runtime.fire.firing, awaits its
turn), and instants are passed in; what an ending stamps is runtime.fire.bodies'.
"""

from __future__ import annotations

import asyncio
from collections import deque
from datetime import datetime

import msgspec

from core.vocab import Overlap, RunReason
from core.wire import Stamps
from programs import admission, breaker
from runtime.fire import bodies
from runtime.fire.bodies import Book
from runtime.fire.claimed import Fire
from runtime.fire.dispatch import FireRequest
from triggers.health import ok_runs
from triggers.records import Trigger, TriggerId

Turn = asyncio.Future[str]
"""A waiting fire's turn: "" when it starts, else why it never will (superseded, withdrawn)."""


class Lane:
    """One trigger's fires on this device: admission slots, waiting fires, its book."""

    def __init__(self, record: Trigger) -> None:
        self.tid = record.id
        self.slots = admission.IDLE
        self.waiting: deque[tuple[Fire, Turn]] = deque()
        self.book = bodies.book_of(record)
        self.runs_seen = self.book.rollup.runs
        self.catchups = 0  # catch-up fires admitted and not yet finished


def policy(request: FireRequest, lane: Lane) -> Overlap:
    """The overlap policy for this fire.

    Catch-up fires (slots bridged on a takeover) queue: each is a slot that would
    otherwise be lost. A live fire that meets only catch-up fires queues behind
    them too, rather than being skipped for a backlog that is not its overlap;
    under `restart` it supersedes them, as it would any older fire.
    """
    mode = request.trigger.effective_overlap
    if request.catchup or (lane.catchups > 0 and mode is not Overlap.RESTART):
        return Overlap.QUEUE
    return mode


NextAt = tuple[str, datetime] | None  # a failed fire's next attempt: its key, when due
_ADMITTED = (admission.Ruling.START, admission.Ruling.QUEUED, admission.Ruling.RESTART)


class Lanes:
    """The lanes of the triggers this device has fires of; `size` runs at once in all."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._lanes: dict[TriggerId, Lane] = {}

    def get(self, tid: TriggerId) -> Lane | None:
        return self._lanes.get(tid)

    def ok(self, record: Trigger) -> int:
        """Runs of `record` that ended ok: this device's count, or the record's if newer."""
        lane = self._lanes.get(record.id)
        return max(ok_runs(record), lane.book.rollup.ok if lane is not None else 0)

    def admit(self, fire: Fire) -> tuple[admission.Decision, Turn | None]:
        """Admission of a claimed fire: start, queue (kept in its lane, its `Turn` to wait
        for), skip, reject or restart (kept alone in its lane, to wait for the running run
        to end); the waiting fires a restart supersedes are told so through their turns."""
        request = fire.request
        lane = self._lane(request.trigger)
        limit = request.trigger.limits.max_queue
        decision, lane.slots = admission.admit(lane.slots, policy(request, lane), limit, self._size)
        verdict, turn = decision.verdict, None
        if request.catchup and verdict in _ADMITTED:
            lane.catchups += 1
        if verdict is admission.Ruling.RESTART:
            superseded, lane.waiting = lane.waiting, deque()
            for waiting, its_turn in superseded:
                lane.catchups -= waiting.request.catchup  # never finished
                its_turn.set_result(decision.reason or RunReason.SUPERSEDED)
        if verdict in (admission.Ruling.QUEUED, admission.Ruling.RESTART):
            turn = asyncio.get_running_loop().create_future()
            lane.waiting.append((fire, turn))
        return decision, turn

    def _lane(self, record: Trigger) -> Lane:
        lane = self._lanes.get(record.id)
        if lane is None:
            lane = self._lanes[record.id] = Lane(record)
            return lane
        stamped = record.rollup.get("runs") if record.rollup else None
        if isinstance(stamped, int) and stamped > lane.runs_seen:  # another device ran it
            lane.book = bodies.book_of(record)
            lane.runs_seen = lane.book.rollup.runs
        return lane

    def breaker_admits(self, lane: Lane, now: datetime) -> bool:
        """Whether the lane's breaker lets a run start now (a trial, when half open)."""
        admitted, state = breaker.admit(lane.book.breaker, now)
        lane.book = Book(breaker=state, rollup=lane.book.rollup)
        return admitted

    def finished(self, lane: Lane, catchup: bool) -> None:
        """An admitted fire of `lane` is done: the waiting fire whose turn it is starts."""
        lane.catchups -= catchup
        if self._lanes.get(lane.tid) is not lane or lane.slots.running <= 0:
            return  # withdrawn meanwhile: its waiting fires went with `remove`
        start, lane.slots = admission.finished(lane.slots)
        if start and lane.waiting:
            _, turn = lane.waiting.popleft()
            if not turn.done():
                turn.set_result("")

    def remove(self, tid: TriggerId, why: str) -> None:
        """Forget a trigger's lane; the fires waiting in it are told `why`."""
        lane = self._lanes.pop(tid, None)
        for _, turn in lane.waiting if lane is not None else ():
            if not turn.done():
                turn.set_result(why)

    def settle(
        self,
        fire: Fire,
        *,
        now: datetime,
        next_attempt: NextAt,
        next_fire_at: datetime | msgspec.UnsetType | None = msgspec.UNSET,
    ) -> Stamps | None:
        """Move the trigger's book on by this fire's ending; the stamps to write (None when
        the lane is gone: withdrawn meanwhile, no longer this device's to stamp)."""
        record, outcome = fire.request.trigger, fire.outcome
        lane = self._lanes.get(record.id)
        if lane is None or outcome is None:
            return None
        lane.book, stamps = bodies.settle(
            lane.book,
            record,
            fire,
            outcome,
            finished_at=now,
            reason=fire.reason,
            admitted=fire.admitted,
            next_attempt=next_attempt,
            next_fire_at=next_fire_at,
        )
        lane.runs_seen = lane.book.rollup.runs
        return stamps

    def status(self) -> dict[TriggerId, dict[str, int]]:
        """The busy lanes: runs in flight and fires waiting, per trigger."""
        return {
            tid: {"running": lane.slots.running, "queued": len(lane.waiting)}
            for tid, lane in sorted(self._lanes.items())
            if lane.slots.running or lane.waiting
        }
