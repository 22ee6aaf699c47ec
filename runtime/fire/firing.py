"""Firing: what happens to a fire once the ticker or a chat decided it, up to its run.

Owns `Firing`, the daemon's `Dispatcher` (SPEC "Who runs what", "Runs"): the order of the
steps — the floating gate (and `maxRuns` done), the claim (runtime.fire.claims, fires handed
over together claimed in one request; `ahead_of_clock` claimed again at its slot),
chat-watch's fires to `offer`, the wait for a slot claimed ahead, admission in its lane
(runtime.fire.lanes; `restart` supersedes the running run), the program, the holds
(runtime.fire.holds: budget, quiet chat), the breaker, the run (runtime.fire.execute), its
record (runtime.fire.recorder) and a failed fire's retry (runtime.fire.attempts). The steps
and their endings are drawn in docs/architecture.md. Never raises nor dies of a fire.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any

import msgspec

from core.aio import TaskSet
from core.vocab import FAILED, RunReason, RunStatus
from core.wire import RunIn
from programs import admission
from programs.loader import LoadedProgram
from programs.outcome import Outcome
from runtime.client.api import ApiError
from runtime.client.retry import transient
from runtime.client.seat import Seat
from runtime.fire import bodies
from runtime.fire.ahead import Ahead
from runtime.fire.attempts import Retries, Running, carrying
from runtime.fire.bodies import RunIdentity
from runtime.fire.claims import CLAIM_MAX, claim, claimed_when_back
from runtime.fire.dispatch import Event, FireRequest, named
from runtime.fire.execute import TOKEN_FRESH_S, Ending, Execute, new_run_id, work_of
from runtime.fire.handover import HandOver
from runtime.fire.holds import Holds
from runtime.fire.lanes import ClaimedFire, Lanes, Queued
from runtime.fire.recorder import Recorder
from triggers import policies
from triggers.health import ok_runs
from triggers.records import Trigger, TriggerId
from triggers.registry import Diff

Offer = Callable[[Event], Coroutine[Any, Any, None]]  # chat-watch's intake of one fire

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
    ) -> None:
        self._seat = seat
        self._client, self._space, self._peer, self._clock = seat
        self._execute, self._recorder = execute, recorder
        self._term, self._may_fire_floating, self._offer_to_chat = term, may_fire_floating, offer
        self._lanes = Lanes(execute.size)
        self._ahead = Ahead(seat.clock)  # fires claimed ahead of their slot (runtime.fire.ahead)
        self._running = Running(seat.clock)  # runs in flight, for `restart`
        self._retries = Retries(seat.clock, self.fire)  # failed fires waiting for a next attempt
        self._holds = Holds(seat)
        self._tasks = TaskSet("fire")
        self._handover = handover  # the owner's ledger (pinned fires while the space is away)
        if handover is not None:
            handover.route, handover.count, recorder.keep = self._route, self._count, handover.keep
        self._closed = False
        self.counts: dict[str, int] = {}

    # --- the Dispatcher side ------------------------------------------------------------

    async def fire(self, *requests: FireRequest) -> None:
        """Take fires due together: claimed in one request (`CLAIM_MAX` at most), then each
        run and recorded in its own task."""
        now = self._clock.wall()  # the device reached these fires: the end of their wake
        taken = [request for request in requests if self._may_take(request)]
        for n in range(0, len(taken), CLAIM_MAX):
            chunk = taken[n : n + CLAIM_MAX]
            self._spawn(self._take(chunk, now), chunk[0])

    def apply(self, diff: Diff) -> None:
        """Forget removed triggers; their waiting fires are recorded `skipped` withdrawn."""
        self._ahead.withdraw(diff.remove, RunReason.WITHDRAWN)
        self._retries.withdraw(list(diff.remove))
        for tid in diff.remove:
            for queued in self._lanes.remove(tid):
                self._spawn(self._withdrawn(queued), queued.request)

    @property
    def retries(self) -> Retries:
        return self._retries

    def slept(self) -> None:
        """The machine slept: fires claimed ahead of a slot it slept through never run."""
        self._ahead.withdraw_all(RunReason.SLEPT)

    def status(self) -> FiringStatus:
        busy = self._lanes.status()  # in flight: the tasks (a run and the fires queued after it)
        return FiringStatus(
            in_flight=len(self._tasks),
            retrying=len(self._retries),
            triggers=busy,
            counts=dict(self.counts),
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

    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    # --- claim, then route ---------------------------------------------------------------

    def _may_take(self, request: FireRequest) -> bool:
        record = request.trigger
        if not record.floating or self._may_fire_floating():
            if record.max_runs is None or not policies.runs_done(record.max_runs, self._ok(record)):
                return True
            log.info("fire %s@%s dropped: maxRuns done", named(record), request.key)
            self._count("done")
            return False
        log.info("fire %s@%s dropped: not the active device", named(record), request.key)
        self._count("dropped")
        return False

    def _ok(self, record: Trigger) -> int:
        """Runs of `record` that ended ok: this device's count, or the record's if newer."""
        lane = self._lanes.get(record.id)
        return max(ok_runs(record), lane.book.rollup.ok if lane is not None else 0)

    async def _take(
        self, requests: list[FireRequest], woke: datetime, retaken: bool = False
    ) -> None:
        term = self._term()
        waiting = [
            Queued(request=r, term=term, claimed=ClaimedFire(run_id=new_run_id()), retaken=retaken)
            for r in requests
        ]
        if self._handover is not None:
            waiting = self._handover.sift(waiting, woke)
        answers = await claim(self._seat, waiting) if waiting else []
        now = self._clock.wall()
        for queued, answer in zip(waiting, answers, strict=True):
            queued = _step(queued, (bodies.WAKE, woke), (bodies.CLAIM, now))
            answer = answer if isinstance(answer, ApiError) else _step(answer, *queued.steps)
            self._route(queued, answer)

    def _route(self, queued: Queued, answer: Queued | ApiError) -> None:
        """Where a claimed fire goes next (or a refused one)."""
        if isinstance(answer, ApiError):
            self._spawn(self._refused(queued, answer), queued.request)
        elif queued.request.for_chat_watch:
            self._spawn(self._offer(queued.request), queued.request)
        elif queued.request.event is None and queued.request.due_at > self._clock.wall():
            # ahead of its slot (runtime.fire.ahead); a message is due once the space took it
            self._spawn(self._at_slot(answer), queued.request)
        else:
            self._admit(answer)

    async def _refused(self, queued: Queued, exc: ApiError) -> None:
        """A claim the space refused: a stale term or news not here yet is recorded."""
        tid, key, term = named(queued.request.trigger), queued.request.key, queued.term
        self._count(exc.code)
        if exc.code == "already_claimed":
            log.debug("fire %s@%s already claimed", tid, key)
        elif exc.code == RunReason.STALE_TERM:
            log.warning("fire %s@%s refused: stale term %d", tid, key, term)
            await self._unstamped(queued, RunStatus.REJECTED, RunReason.STALE_TERM)
        elif exc.code in (RunReason.PAUSED, RunReason.BEFORE_ACTIVE):  # news not here yet
            log.info("fire %s@%s refused: %s", tid, key, exc.code)
            await self._unstamped(queued, RunStatus.SKIPPED, exc.code)
        elif exc.code == RunReason.AHEAD_OF_CLOCK and not queued.retaken:
            log.warning("fire %s@%s refused: this device's clock is ahead; at its slot", tid, key)
            await self._take_at_slot(queued)
        elif transient(exc) and not queued.request.trigger.floating:
            log.warning("fire %s@%s: the space is away; claimed when it is back", tid, key)
            await self._claim_when_back(queued)
        else:
            log.warning("fire %s@%s not claimed: %s", tid, key, exc)

    async def _claim_when_back(self, queued: Queued) -> None:
        """A pinned fire (only this device may claim it) whose claim found the space away:
        claimed in the ledger and run now, or (no ledger) claimed again until the space
        answers; claimed, it runs late with its true lateness, never twice."""
        if self._handover is not None:
            self._handover.take(queued)
        elif (answer := await claimed_when_back(self._seat, queued)) is not None:
            self._route(msgspec.structs.replace(queued, retaken=True), answer)

    async def _take_at_slot(self, queued: Queued) -> None:
        """Claim again when the slot comes by the space's clock (the refusal's answer set the
        offset), once; withdrawn meanwhile, it is not taken."""
        if await self._ahead.until_due(queued.request):
            return
        if self._may_take(queued.request):
            await self._take([queued.request], self._clock.wall(), retaken=True)

    async def _offer(self, request: FireRequest) -> None:
        if self._offer_to_chat is None or request.event is None:
            log.warning("fire %s@%s: no chat-watch to take it", named(request.trigger), request.key)
            return
        await self._offer_to_chat(request.event)

    async def _at_slot(self, queued: Queued) -> None:
        """Admit a fire claimed ahead when its slot comes, unless withdrawn meanwhile: then,
        or when the device stops first, it is recorded, not run."""
        try:
            why = await self._ahead.until_due(queued.request)
        except asyncio.CancelledError:
            run = self._unstamped_run(queued, RunStatus.REJECTED, RunReason.SHUTDOWN)
            self._recorder.enqueue(queued.request.trigger, run, None)
            raise
        if why:
            log.info(
                "fire %s@%s withdrawn: %s", named(queued.request.trigger), queued.request.key, why
            )
            await self._unstamped(queued, RunStatus.SKIPPED, why)
        else:
            self._admit(_step(queued, (bodies.WAKE, self._clock.wall())))

    # --- admission, breaker, run ----------------------------------------------------------

    def _admit(self, queued: Queued) -> None:
        decision, superseded = self._lanes.admit(queued)
        match decision.verdict:
            case admission.Ruling.START:
                self._spawn(self._run_admitted(queued), queued.request)
            case admission.Ruling.RESTART:  # this one starts when the running one has ended
                for waiting in superseded:
                    skip = self._not_run(waiting, RunStatus.SKIPPED, decision.reason)
                    self._spawn(skip, waiting.request)
                self._running.supersede(queued.request.trigger.id)
            case admission.Ruling.SKIPPED:
                self._spawn(
                    self._not_run(queued, RunStatus.SKIPPED, decision.reason), queued.request
                )
            case admission.Ruling.REJECTED:
                self._spawn(
                    self._not_run(queued, RunStatus.REJECTED, decision.reason), queued.request
                )

    async def _run_admitted(self, queued: Queued) -> None:
        """Run an admitted fire, then each waiting fire its end starts, in this task."""
        after: Queued | None = queued
        while after is not None:
            after = await self._run_one(after)

    async def _run_one(self, queued: Queued) -> Queued | None:
        """Run one admitted fire; the waiting fire of its lane that starts now, if any."""
        request = queued.request
        lane = self._lanes.get(request.trigger.id)
        if lane is None:
            await self._withdrawn(queued)
            return None
        try:
            program = await self._execute.load(request.trigger.program)
            if isinstance(program, tuple) and program[1] == RunReason.UNKNOWN_PROGRAM:
                await self._not_run(queued, RunStatus.SKIPPED, RunReason.UNKNOWN_PROGRAM)
            elif held := await self._holds.reason(request.trigger, lane.book, self._clock.wall()):
                await self._not_run(queued, RunStatus.SKIPPED, held)
            elif self._lanes.breaker_admits(lane, self._clock.wall()):
                await self._run(queued, program)
            else:
                await self._not_run(queued, RunStatus.SKIPPED, RunReason.BREAKER_OPEN)
        except BaseException:  # the next waiting fire still starts, in its own task
            after = self._lanes.finished(request.trigger.id, lane, request.catchup)
            if after is not None:
                self._spawn(self._run_admitted(after), after.request)
            raise
        return self._lanes.finished(request.trigger.id, lane, request.catchup)

    async def _run(self, queued: Queued, program: LoadedProgram | Ending) -> None:
        request, record = queued.request, queued.request.trigger
        fire = self._fire_of(queued)
        log.debug("fire %s@%s → %s", named(record), request.key, record.program)
        token = self._fresh_token(queued.claimed)
        run = self._execute.run(fire, program, work_of(request), token)
        outcome, reason = await self._running.run(record.id, run)
        fire = bodies.entered(fire, queued.steps, outcome)
        log.info(
            "fire %s@%s ← %s %.0f ms%s",
            named(record),
            request.key,
            outcome.status.value,
            outcome.duration_ms,
            f": {reason}" if reason else "",
        )
        self._finish(request, fire, outcome, reason, admitted=True)

    def _fresh_token(self, claimed: ClaimedFire) -> str | None:
        """The claim's token, if the run starts soon enough for it to outlive the run."""
        if claimed.local:  # claimed in the ledger: the space is away, no token to be had
            return ""
        return claimed.token if self._clock.monotonic() - claimed.at <= TOKEN_FRESH_S else None

    # --- recording -------------------------------------------------------------------------

    async def _not_run(self, queued: Queued, status: RunStatus, why: str) -> None:
        request, fire = queued.request, self._fire_of(queued)
        log.info("fire %s@%s ← %s: %s", named(request.trigger), request.key, status.value, why)
        self._finish(request, fire, bodies.not_run(status, why), why, admitted=False)

    async def _withdrawn(self, queued: Queued) -> None:
        await self._unstamped(queued, RunStatus.SKIPPED, RunReason.WITHDRAWN)

    async def _unstamped(self, queued: Queued, status: RunStatus, why: str) -> None:
        """A non-run of a trigger this device does not (or no longer) hold: no stamps."""
        run = self._unstamped_run(queued, status, why)
        await self._recorder.ended(queued.request.trigger, run, None)

    def _unstamped_run(self, queued: Queued, status: RunStatus, why: str) -> RunIn:
        fire = self._fire_of(queued)
        self._count(status.value)
        return bodies.run_record(
            fire, bodies.not_run(status, why), finished_at=fire.started_at, reason=why
        )

    def _finish(
        self, request: FireRequest, fire: RunIdentity, outcome: Outcome, why: str, *, admitted: bool
    ) -> None:
        """Settle the book now (the breaker sees this outcome before the next fire starts),
        then record the run and its stamps in the background, so the trigger's lane is
        free for its next fire while the space is written."""
        self._count(outcome.status.value)
        now = self._clock.wall()
        run = bodies.run_record(fire, outcome, finished_at=now, reason=why)
        again = None
        if admitted and outcome.status in FAILED and not self._closed:
            again = policies.next_attempt(request.trigger.retry, request.key, now)
        stamps = self._lanes.settle(
            request.trigger, fire, outcome, why, now=now, admitted=admitted, next_attempt=again
        )
        if again is not None and request.event is not None and stamps is not None:
            stamps = carrying(stamps, request.event)  # a takeover runs the retry with it
        written = self._recorder.enqueue(request.trigger, run, stamps)  # written even past close
        self._spawn(_settled(written), request)
        if again is not None:
            self._retries.schedule(request, *again)

    def _fire_of(self, queued: Queued) -> RunIdentity:
        """The fire as decided now: a non-run's whole identity, a run's until it ran."""
        request = queued.request
        fire = RunIdentity(
            run_id=queued.claimed.run_id,
            trigger_id=request.trigger.id,
            program=request.trigger.program,
            peer=self._peer,
            term=queued.term,
            key=request.key,
            started_at=self._clock.wall(),
            due_at=request.due_at,
        )
        return bodies.decided(fire, queued.steps, fire.started_at)


def _step(queued: Queued, *steps: bodies.Step) -> Queued:
    return msgspec.structs.replace(queued, steps=(*queued.steps, *steps))


async def _settled(written: asyncio.Future[None]) -> None:
    await asyncio.shield(written)
