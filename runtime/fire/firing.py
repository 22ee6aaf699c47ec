"""Firing: what happens to a fire once the ticker or a chat decided it, up to its record.

Owns `Firing`, the daemon's `Dispatcher` (SPEC "Who runs what", "Runs"): the floating gate
(and `maxRuns` done), the claim (runtime.fire.claims: fires handed over together, one
request; a refusal recorded, retaken at its slot or when the space is back), then one task
per claimed fire, one `Fire` (runtime.fire.claimed) from claim to record: chat-watch's to
`offer`, any other walked through wait for its slot (runtime.fire.ahead) → admit in its
lane (runtime.fire.lanes) → run (holds, breaker, runtime.fire.execute) → settle (the book,
its stamps with `nextFireAt`, a failed fire's retry: runtime.fire.attempts) → record
(runtime.fire.recorder). Drawn in docs/architecture.md. Never raises nor dies of a fire.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any

import msgspec

from core.aio import TaskSet
from core.vocab import FAILED, RunReason, RunStatus
from programs import admission
from runtime.client.api import ApiError
from runtime.client.retry import transient
from runtime.client.seat import Seat
from runtime.fire import bodies
from runtime.fire.ahead import Ahead
from runtime.fire.attempts import Retries, Running
from runtime.fire.claimed import CLAIM, WAKE, Fire
from runtime.fire.claims import CLAIM_MAX, claim, claimed_when_back
from runtime.fire.dispatch import Event, FireRequest, named
from runtime.fire.execute import TOKEN_FRESH_S, Execute, new_run_id
from runtime.fire.handover import HandOver
from runtime.fire.holds import Holds
from runtime.fire.lanes import Lane, Lanes
from runtime.fire.recorder import Recorder
from triggers import policies
from triggers.records import TriggerId
from triggers.registry import Diff

Offer = Callable[[Event], Coroutine[Any, Any, None]]  # chat-watch's intake of one fire
NextFireAt = Callable[[TriggerId], datetime | None]  # the armed entries' (`nextfires.Entries`)
NOT_ARMED: datetime | msgspec.UnsetType | None = msgspec.UNSET  # `nextFireAt` left as it is
log = logging.getLogger("baton.firing")


class FiringStatus(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    in_flight: int
    retrying: int  # failed fires waiting out their backoff
    triggers: dict[TriggerId, dict[str, int]]  # busy lanes: running and queued, per trigger
    counts: dict[str, int]


class Firing:
    """`await firing.fire(request)` takes a fire and returns at once; `close()` at the end."""

    def __init__(
        self,
        seat: Seat,
        *,
        execute: Execute,
        recorder: Recorder,
        term: Callable[[], int],
        may_fire_floating: Callable[[], bool],
        offer: Offer | None = None,
        handover: HandOver | None = None,
        next_fire: NextFireAt | None = None,
    ) -> None:
        self._seat, self._peer, self._clock = seat, seat.peer, seat.clock
        self._execute, self._recorder, self._next_fire = execute, recorder, next_fire
        self._term, self._may_fire_floating, self._offer_to_chat = term, may_fire_floating, offer
        self._lanes = Lanes(execute.size)
        self._ahead = Ahead(seat.clock)  # fires claimed ahead of their slot (runtime.fire.ahead)
        self._running = Running(seat.clock)  # runs in flight, for `restart`
        self._retries = Retries(seat.clock, self.fire)  # failed fires waiting for a next attempt
        self._holds = Holds(seat)
        self._tasks = TaskSet("fire")
        self._handover = handover  # the owner's ledger (pinned fires while the space is away)
        if handover is not None:
            handover.count, recorder.keep = lambda what: self.counts.update([what]), handover.keep
            handover.route = lambda fire: self._spawn(self._go(fire), fire.request)
        self._closed = False
        self.counts: Counter[str] = Counter()

    async def fire(self, *requests: FireRequest) -> None:
        """Take fires due together: claimed in one request (`CLAIM_MAX` at most), then each
        walked to its record in its own task."""
        now = self._clock.wall()  # the device reached these fires: the end of their wake
        taken = [request for request in requests if self._may_take(request)]
        for n in range(0, len(taken), CLAIM_MAX):
            chunk = taken[n : n + CLAIM_MAX]
            self._spawn(self._claim(chunk, now), chunk[0])

    def apply(self, diff: Diff) -> None:
        """Forget removed triggers; their waiting fires are recorded `skipped` withdrawn."""
        self._ahead.withdraw(diff.remove, RunReason.WITHDRAWN)
        self._retries.withdraw(list(diff.remove))
        for tid in diff.remove:
            self._lanes.remove(tid, RunReason.WITHDRAWN)

    @property
    def retries(self) -> Retries:
        return self._retries

    def slept(self) -> None:
        """The machine slept: fires claimed ahead of a slot it slept through never run."""
        self._ahead.withdraw_all(RunReason.SLEPT)

    def status(self) -> FiringStatus:  # in flight: a task per fire (claiming, waiting, running)
        tasks, retrying, busy = len(self._tasks), len(self._retries), self._lanes.status()
        return FiringStatus(
            in_flight=tasks, retrying=retrying, triggers=busy, counts=dict(self.counts)
        )

    async def settled(self) -> None:
        """Wait until every fire taken so far is recorded (tests, clean stops)."""
        await self._tasks.wait()

    async def close(self) -> None:
        """Cancel fires in flight and wait for them to unwind; later fires are dropped."""
        self._closed = True
        await self._retries.close()
        await self._tasks.close()
        if self._handover is not None:  # what it has not handed over waits in the ledger
            await self._handover.close()

    def _spawn(self, work: Coroutine[Any, Any, None], request: FireRequest) -> None:
        if self._closed:  # a fire unwinding from `close` starts nothing new
            work.close()
            return
        self._tasks.spawn(work, name=f"{named(request.trigger)}@{request.key}")

    # --- the gate and the claim ------------------------------------------------------------

    def _may_take(self, request: FireRequest) -> bool:
        record, why, count = request.trigger, "", ""
        if record.floating and not self._may_fire_floating():
            why, count = "not the active device", "dropped"
        elif record.max_runs and policies.runs_done(record.max_runs, self._lanes.ok(record)):
            why, count = "maxRuns done", "done"
        if why:
            log.info("fire %s@%s dropped: %s", named(record), request.key, why)
            self.counts[count] += 1
        return not why

    async def _claim(
        self, requests: list[FireRequest], woke: datetime, retaken: bool = False
    ) -> None:
        term = self._term()
        fires = [
            Fire(request=r, run_id=new_run_id(), term=term, peer=self._peer, retaken=retaken)
            for r in requests
        ]
        if self._handover is not None:
            fires = self._handover.sift(fires, woke)
        answers = await claim(self._seat, fires) if fires else []
        now = self._clock.wall()
        for fire, refusal in zip(fires, answers, strict=True):
            fire.steps += [(WAKE, woke), (CLAIM, now)]
            if refusal is None:
                self._spawn(self._go(fire), fire.request)
            else:
                self._spawn(self._refused(fire, refusal), fire.request)

    async def _refused(self, fire: Fire, exc: ApiError) -> None:
        """A claim the space refused: a stale term or news not here yet is recorded."""
        tid, key, term = named(fire.request.trigger), fire.key, fire.term
        self.counts[exc.code] += 1
        if exc.code == "already_claimed":
            log.debug("fire %s@%s already claimed", tid, key)
        elif exc.code == RunReason.STALE_TERM:
            log.warning("fire %s@%s refused: stale term %d", tid, key, term)
            await asyncio.shield(self._settle(fire, RunStatus.REJECTED, exc.code, stamp=False))
        elif exc.code in (RunReason.PAUSED, RunReason.BEFORE_ACTIVE):  # news not here yet
            log.info("fire %s@%s refused: %s", tid, key, exc.code)
            await asyncio.shield(self._settle(fire, RunStatus.SKIPPED, exc.code, stamp=False))
        elif exc.code == RunReason.AHEAD_OF_CLOCK and not fire.retaken:
            log.warning("fire %s@%s refused: this device's clock is ahead; at its slot", tid, key)
            # claimed again when the slot comes by the space's clock (the refusal's answer
            # set the offset), once; withdrawn meanwhile, it is not taken
            if not await self._ahead.until_due(fire.request) and self._may_take(fire.request):
                await self._claim([fire.request], self._clock.wall(), retaken=True)
        elif transient(exc) and not fire.request.trigger.floating:
            log.warning("fire %s@%s: the space is away; claimed when it is back", tid, key)
            await self._claim_when_back(fire)
        else:
            log.warning("fire %s@%s not claimed: %s", tid, key, exc)

    async def _claim_when_back(self, fire: Fire) -> None:
        """A pinned fire (only this device may claim it) whose claim found the space away:
        claimed in the ledger and run now, or (no ledger) claimed again until the space
        answers; it runs late with its true lateness, never twice."""
        if self._handover is not None:
            return self._handover.take(fire)
        answer = await claimed_when_back(self._seat, fire)
        fire.retaken = True
        if answer is True:
            await self._go(fire)
        elif isinstance(answer, ApiError):
            await self._refused(fire, answer)

    # --- one claimed fire, one task: wait → admit → run → settle → record ------------------

    async def _go(self, fire: Fire) -> None:
        request = fire.request
        if not request.for_chat_watch:
            return await self._walk(fire)
        if self._offer_to_chat is None or request.event is None:
            log.warning("fire %s@%s: no chat-watch to take it", named(request.trigger), fire.key)
            return
        await self._offer_to_chat(request.event)

    async def _walk(self, fire: Fire) -> None:
        """Every ending is recorded; stamped unless the trigger is not, or no longer, this
        device's (withdrawn, slept through). The lane's next fire starts as this one ends."""
        request, tid = fire.request, fire.request.trigger.id
        status, why, stamp, lane = RunStatus.SKIPPED, "", True, None
        if request.event is None and request.due_at > self._clock.wall():  # claimed ahead
            try:
                why = await self._ahead.until_due(request)
            except asyncio.CancelledError:  # the device stops first: recorded, not run
                run = bodies.shut_down(fire, self._clock.wall())
                self._recorder.enqueue(request.trigger, run, None)
                self.counts[RunStatus.REJECTED.value] += 1
                raise
            if not why:
                fire.steps.append((WAKE, self._clock.wall()))
            stamp = not why
        if not why:
            decision, turn = self._lanes.admit(fire)
            verdict = decision.verdict
            if verdict is admission.Ruling.RESTART:  # it starts when the running one ended
                self._running.supersede(tid)
            if verdict in (admission.Ruling.SKIPPED, admission.Ruling.REJECTED):
                status, why = RunStatus(verdict.value), decision.reason
            elif turn is not None and (why := await turn):  # superseded or withdrawn meanwhile
                stamp = why != RunReason.WITHDRAWN
            elif (lane := self._lanes.get(tid)) is None:  # withdrawn before it started
                why, stamp = RunReason.WITHDRAWN, False
        try:
            if lane is not None:
                why = await self._run(fire, lane)
            written = self._settle(fire, status, why, stamp=stamp)
        finally:  # the next waiting fire starts, in its own task, whatever became of this one
            if lane is not None:
                self._lanes.finished(lane, request.catchup)
        await asyncio.shield(written)

    async def _run(self, fire: Fire, lane: Lane) -> str:
        """Run an admitted fire's program, unless its program, holds or breaker say no: why."""
        record = fire.request.trigger
        program = await self._execute.load(record.program)
        if isinstance(program, tuple) and program[1] == RunReason.UNKNOWN_PROGRAM:
            return RunReason.UNKNOWN_PROGRAM
        if held := await self._holds.reason(record, lane.book, self._clock.wall()):
            return held
        if not self._lanes.breaker_admits(lane, self._clock.wall()):
            return RunReason.BREAKER_OPEN
        log.debug("fire %s@%s → %s", named(record), fire.key, record.program)
        fire.decided(self._clock.wall())  # until its main() is entered
        token = fire.token_for(self._clock.monotonic(), TOKEN_FRESH_S)
        run = self._execute.run(fire, program, fire.args, fire.limits, token)
        outcome, fire.reason = await self._running.run(record.id, run)
        fire.entered(outcome)
        fire.admitted = True
        said = f"{outcome.duration_ms:.0f} ms" + (f": {fire.reason}" if fire.reason else "")
        log.info("fire %s@%s ← %s %s", named(record), fire.key, outcome.status.value, said)
        return ""

    def _settle(
        self, fire: Fire, status: RunStatus, why: str, *, stamp: bool = True
    ) -> asyncio.Future[None]:
        """The ending settled now: the book moved (the breaker sees it before the next fire
        starts), a failed fire's retry scheduled, its run queued for the next write (written
        even past close) with its stamps, unless `stamp` is False."""
        request, now = fire.request, self._clock.wall()
        if fire.outcome is None:  # it did not run (`status`, `why`): decided now
            log.info("fire %s@%s ← %s: %s", named(request.trigger), fire.key, status.value, why)
            fire.decided(now)
            fire.outcome, fire.reason = bodies.not_run(status, why), why
        self.counts[fire.outcome.status.value] += 1
        again = None
        if fire.admitted and fire.outcome.status in FAILED and not self._closed:
            again = policies.next_attempt(request.trigger.retry, request.key, now)
        stamps = None
        if stamp:
            next_fire, at = self._next_fire, NOT_ARMED
            if next_fire is not None and request.trigger.kind != "event":
                at = next_fire(request.trigger.id)
            stamps = self._lanes.settle(fire, now=now, next_attempt=again, next_fire_at=at)
        run = bodies.run_record(fire, fire.outcome, finished_at=now, reason=fire.reason)
        written = self._recorder.enqueue(request.trigger, run, stamps)
        if again is not None:
            self._retries.schedule(request, *again)
        return written
