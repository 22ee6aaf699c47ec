"""Lanes: each trigger's fires on this device, as admission sees them.

Owns, per trigger (SPEC "Runs": overlap, queue, breaker), its lane: the admission slots
(`programs.admission`), the claimed fires waiting in its queue, how many catch-up fires
are admitted and not yet finished, and its `Book` (breaker, rollup), seeded from the
record's stamps and re-seeded when the record shows runs this device did not make
(another device ran it meanwhile).

Bookkeeping only: no I/O, no tasks, and instants are passed in. runtime.fire.firing moves
the fires through it; what an ending stamps is runtime.fire.bodies'.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime

import msgspec

from core.vocab import Overlap
from core.wire import Stamps
from programs import admission, breaker
from programs.outcome import Outcome
from runtime.fire import bodies
from runtime.fire.bodies import Book, RunIdentity
from runtime.fire.dispatch import FireRequest
from triggers.records import Trigger, TriggerId


class ClaimedFire(msgspec.Struct, frozen=True, kw_only=True):
    """A fire this device claimed: the run id chosen before the claim, the run's token
    the claim answered (None if it asked for none) and when the answer came (monotonic)."""

    run_id: str
    token: str | None = None
    at: float = 0.0
    local: bool = False  # claimed in this device's ledger (the space away): no token


class Queued(msgspec.Struct, frozen=True, kw_only=True):
    """A claimed fire on its way through admission, under the term it was claimed at."""

    request: FireRequest
    term: int
    claimed: ClaimedFire
    retaken: bool = False  # claimed again at its slot after an `ahead_of_clock` refusal
    steps: tuple[bodies.Step, ...] = ()  # its way so far, for the run's `phases`


class Lane:
    """One trigger's fires on this device: admission slots, waiting fires, its book."""

    def __init__(self, record: Trigger) -> None:
        self.slots = admission.IDLE
        self.waiting: deque[Queued] = deque()
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


_ADMITTED = (admission.Ruling.START, admission.Ruling.QUEUED, admission.Ruling.RESTART)


class Lanes:
    """The lanes of the triggers this device has fires of; `size` runs at once in all."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._lanes: dict[TriggerId, Lane] = {}

    def get(self, tid: TriggerId) -> Lane | None:
        return self._lanes.get(tid)

    def admit(self, queued: Queued) -> tuple[admission.Decision, list[Queued]]:
        """Admission of a claimed fire: start, queue (kept in its lane), skip, reject or
        restart (kept alone in its lane); the waiting fires a restart superseded."""
        request = queued.request
        lane = self._lane(request.trigger)
        limit = request.trigger.limits.max_queue
        decision, lane.slots = admission.admit(lane.slots, policy(request, lane), limit, self._size)
        verdict, superseded = decision.verdict, []
        if request.catchup and verdict in _ADMITTED:
            lane.catchups += 1
        if verdict is admission.Ruling.RESTART:
            superseded, lane.waiting = list(lane.waiting), deque()
            lane.catchups -= sum(w.request.catchup for w in superseded)  # never finished
        if verdict in (admission.Ruling.QUEUED, admission.Ruling.RESTART):
            lane.waiting.append(queued)
        return decision, superseded

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

    def finished(self, tid: TriggerId, lane: Lane, catchup: bool) -> Queued | None:
        """An admitted fire of `lane` is done; the waiting fire that starts now, if any."""
        lane.catchups -= catchup
        if self._lanes.get(tid) is not lane or lane.slots.running <= 0:
            return None  # withdrawn meanwhile: its waiting fires went with `remove`
        start, lane.slots = admission.finished(lane.slots)
        return lane.waiting.popleft() if start and lane.waiting else None

    def remove(self, tid: TriggerId) -> list[Queued]:
        """Forget a trigger's lane; the fires that were waiting in it."""
        lane = self._lanes.pop(tid, None)
        return list(lane.waiting) if lane is not None else []

    def settle(
        self,
        record: Trigger,
        fire: RunIdentity,
        outcome: Outcome,
        why: str,
        *,
        now: datetime,
        admitted: bool,
        next_attempt: tuple[str, datetime] | None = None,
    ) -> Stamps | None:
        """Move the trigger's book on by this ending; the stamps to write (None when the
        lane is gone: withdrawn meanwhile, no longer this device's to stamp)."""
        lane = self._lanes.get(record.id)
        if lane is None:
            return None
        lane.book, stamps = bodies.settle(
            lane.book,
            record,
            fire,
            outcome,
            finished_at=now,
            reason=why,
            admitted=admitted,
            next_attempt=next_attempt,
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
