"""The fire pipeline: what happens to a fire once the ticker or a chat decided it.

Owns `Firing`, the `Dispatcher` of the daemon (SPEC "Who runs what", "Runs"):

    floating and not allowed now → dropped (logged)
    claim (triggerId, key, term, peer, run) ── already_claimed / not_owner → nothing
                                             └─ stale_term → a `rejected` run
    chat-watch (by its reserved id) → the ChatWatch (no run record: its turns are logged)
    admission (overlap policy) ── skip → `skipped` overlap; full queue → `rejected` queue_full
    program (ProgramCache) ── not published → `skipped` unknown_program (the breaker
                              never sees it, and the next fire after publishing runs)
    breaker ── open → `skipped` breaker_open
    the run's token (answered with the claim) → executor → run record (ends it) → stamps

The run id is chosen before the claim, and the claim asks the space for the run's
token in the same request, so a fire costs no request of its own for a token; every
record of the fire (run or not) carries that run id, so posting it ends the token. A
fire that waited in its queue longer than `TOKEN_FRESH_S` mints a fresh token instead
(`POST …/tokens/run`), so its token still outlives the run's timeout.

Per trigger it keeps the admission slots, the fires waiting in its queue and its
`Book` (breaker, rollup), seeded from the record's stamps and re-seeded when the
record shows runs this device did not make (another device ran it meanwhile).
The translation of an ending into a run record and stamps is `runtime.outcomes`;
this module only sequences the steps and talks to the space. It never raises into
its caller and never dies of a fire: each fire is its own task, and an unexpected
failure is logged with the trigger id and key.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec

from programs import admission, breaker
from programs.context import RunContext
from programs.executor import Executor, ExecutorClosed
from programs.job import Job
from programs.loader import InvalidProgram, LoadedProgram, ProgramCache, UnknownProgram
from programs.outcome import Outcome, RunStatus
from programs.refs import InvalidRef
from runtime import outcomes
from runtime.chatwatch import ChatWatch
from runtime.client import ApiError, SpaceClient
from runtime.clock import Clock
from runtime.dispatch import FireRequest, named
from runtime.outcomes import Book, Fire
from triggers.records import RESERVED_CHAT_WATCH, Overlap, Trigger, TriggerId
from triggers.registry import Diff

log = logging.getLogger("baton.firing")

TOKEN_MARGIN_S = 30.0  # a run token outlives the run's timeout by this much at most
TOKEN_FRESH_S = TOKEN_MARGIN_S / 2  # a claim's token is used by a run starting this soon
WRITE_TRIES = 3


class _Slot:
    """One trigger's fires on this device: admission slots, waiting fires, its book."""

    def __init__(self, record: Trigger) -> None:
        self.slots = admission.IDLE
        self.waiting: deque[tuple[FireRequest, int, Claimed]] = deque()
        self.book = outcomes.book_of(record)
        self.runs_seen = self.book.rollup.runs
        self.latest: dict[str, Any] | None = None  # stamps not yet written
        self.writing = asyncio.Lock()
        self.catchups = 0  # catch-up fires admitted and not yet finished


def _policy(request: FireRequest, slot: _Slot) -> Overlap:
    """The overlap policy for this fire.

    Catch-up fires (slots bridged on a takeover) queue: each is a slot that would
    otherwise be lost. A live fire that meets only catch-up fires queues behind
    them too, rather than being skipped for a backlog that is not its overlap.
    """
    if request.catchup or slot.catchups > 0:
        return Overlap.QUEUE
    return request.trigger.effective_overlap


def new_run_id() -> str:
    return "run_" + secrets.token_hex(8)


class Claimed(msgspec.Struct, frozen=True, kw_only=True):
    """A fire this device claimed: the run id chosen before the claim, the run's token
    the claim answered (None if it asked for none) and when the answer came (monotonic)."""

    run_id: str
    token: str | None = None
    at: float = 0.0


class Firing:
    """`await firing.fire(request)` takes a fire and returns at once; `close()` at the end."""

    def __init__(
        self,
        client: SpaceClient,
        space: str,
        peer: str,
        *,
        url: str,
        executor: Executor,
        programs: ProgramCache,
        clock: Clock,
        term: Callable[[], int],
        may_fire_floating: Callable[[], bool],
        chatwatch: ChatWatch | None = None,
        next_fire: Callable[[TriggerId], datetime | None] | None = None,
    ) -> None:
        self._client, self._space, self._peer, self._url = client, space, peer, url
        self._executor, self._programs, self._clock = executor, programs, clock
        self._term, self._may_fire_floating, self._chatwatch = term, may_fire_floating, chatwatch
        self._next_fire = next_fire
        self._slots: dict[TriggerId, _Slot] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.counts: dict[str, int] = {}

    # --- the Dispatcher side ------------------------------------------------------------

    async def fire(self, request: FireRequest) -> None:
        """Take a fire: it is claimed, run and recorded in its own task."""
        self._spawn(self._take(request), request)

    def apply(self, diff: Diff) -> None:
        """Forget removed triggers; their waiting fires are recorded `skipped` withdrawn."""
        for tid in diff.remove:
            slot = self._slots.pop(tid, None)
            if slot is None:
                continue
            while slot.waiting:
                request, term, claimed = slot.waiting.popleft()
                self._spawn(self._withdrawn(request, term, claimed.run_id), request)

    def status(self) -> dict[str, Any]:
        busy = {
            tid: {"running": s.slots.running, "queued": len(s.waiting)}
            for tid, s in sorted(self._slots.items())
            if s.slots.running or s.waiting
        }
        return {"inFlight": len(self._tasks), "triggers": busy, "counts": dict(self.counts)}

    async def settled(self) -> None:
        """Wait until every fire taken so far is recorded (tests, clean stops)."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def close(self) -> None:
        """Cancel fires in flight and wait for them to unwind."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, work: Any, request: FireRequest) -> None:
        task = asyncio.ensure_future(self._guarded(work, request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _guarded(self, work: Any, request: FireRequest) -> None:
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("fire %s@%s failed unexpectedly", named(request.trigger), request.key)

    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    # --- claim, then route ---------------------------------------------------------------

    async def _take(self, request: FireRequest) -> None:
        record = request.trigger
        if record.floating and not self._may_fire_floating():
            log.info("fire %s@%s dropped: not the active device", named(record), request.key)
            self._count("dropped")
            return
        term = self._term()
        watch = record.id == RESERVED_CHAT_WATCH  # by its reserved id, whatever it says
        claimed = await self._claim(request, term, run=not watch)
        if claimed is None:
            return
        if watch:
            await self._offer(request)
            return
        self._admit(request, term, claimed)

    async def _claim(self, request: FireRequest, term: int, *, run: bool) -> Claimed | None:
        """Claim the fire (with `run`, asking for its run's token too); None if refused. A
        transient failure is retried, so a space restart loses nothing.

        The claim carries an id of its own: if an earlier try went through and its answer
        was lost, the space answers the retry as claimed (with a token); any other claim of
        the key (this device's own earlier fire of it included) is `already_claimed`."""
        run_id = new_run_id()
        body: dict[str, Any] = {"triggerId": request.trigger.id, "key": request.key,
                                "term": term, "peer": self._peer,
                                "claimId": "clm_" + secrets.token_hex(8)}  # fmt: skip
        if run:
            ttl = request.trigger.limits.timeout_seconds + TOKEN_MARGIN_S
            body["run"] = {"runId": run_id, "ttlSeconds": ttl}
        for attempt in range(WRITE_TRIES):
            try:
                answer = await self._client.fires_claim(self._space, body)
                token = answer.get("token") if isinstance(answer, dict) else None
                return Claimed(run_id=run_id, token=token if isinstance(token, str) else None,
                               at=self._clock.monotonic())  # fmt: skip
            except ApiError as exc:
                if _transient(exc) and attempt < WRITE_TRIES - 1:
                    await self._clock.sleep(0.5 * 2**attempt)
                    continue
                await self._refused(request, term, exc)
                return None
        raise AssertionError("unreachable: the last try returns or refuses")

    async def _refused(self, request: FireRequest, term: int, exc: ApiError) -> None:
        tid, key = named(request.trigger), request.key
        self._count(exc.code)
        if exc.code == "already_claimed":
            log.debug("fire %s@%s already claimed", tid, key)
        elif exc.code == outcomes.STALE_TERM:
            log.warning("fire %s@%s refused: stale term %d", tid, key, term)
            await self._unstamped(request, term, RunStatus.rejected, outcomes.STALE_TERM)
        elif exc.code in (outcomes.PAUSED, outcomes.BEFORE_ACTIVE):  # news not here yet
            log.info("fire %s@%s refused: %s", tid, key, exc.code)
            await self._unstamped(request, term, RunStatus.skipped, exc.code)
        else:
            log.warning("fire %s@%s not claimed: %s", tid, key, exc)

    async def _offer(self, request: FireRequest) -> None:
        if self._chatwatch is None or request.event is None:
            log.warning("fire %s@%s: no chat-watch to take it", named(request.trigger), request.key)
            return
        await self._chatwatch.offer(request.event)

    # --- admission, breaker, run ----------------------------------------------------------

    def _slot(self, record: Trigger) -> _Slot:
        slot = self._slots.get(record.id)
        if slot is None:
            slot = self._slots[record.id] = _Slot(record)
            return slot
        stamped = record.rollup.get("runs") if record.rollup else None
        if isinstance(stamped, int) and stamped > slot.runs_seen:  # another device ran it
            slot.book = outcomes.book_of(record)
            slot.runs_seen = slot.book.rollup.runs
        return slot

    def _admit(self, request: FireRequest, term: int, claimed: Claimed) -> None:
        record = request.trigger
        slot = self._slot(record)
        policy, max_queue = _policy(request, slot), record.limits.max_queue
        decision, slot.slots = admission.admit(slot.slots, policy, max_queue, self._executor.size)
        if request.catchup and decision.verdict in (
            admission.Verdict.START,
            admission.Verdict.QUEUED,
        ):
            slot.catchups += 1
        match decision.verdict:
            case admission.Verdict.START:
                self._spawn(self._run_admitted(request, term, claimed), request)
            case admission.Verdict.QUEUED:
                slot.waiting.append((request, term, claimed))
            case admission.Verdict.SKIPPED:
                self._spawn(self._not_run(request, term, RunStatus.skipped, decision.reason,
                                          claimed.run_id), request)  # fmt: skip
            case admission.Verdict.REJECTED:
                self._spawn(self._not_run(request, term, RunStatus.rejected, decision.reason,
                                          claimed.run_id), request)  # fmt: skip

    async def _run_admitted(self, request: FireRequest, term: int, claimed: Claimed) -> None:
        slot = self._slots.get(request.trigger.id)
        if slot is None:
            await self._withdrawn(request, term, claimed.run_id)
            return
        try:
            program = await self._load(request.trigger.program)
            if isinstance(program, tuple) and program[1] == outcomes.UNKNOWN_PROGRAM:
                await self._not_run(request, term, RunStatus.skipped, outcomes.UNKNOWN_PROGRAM,
                                    claimed.run_id)  # fmt: skip
                return
            admitted, slot.book = self._breaker_admit(slot.book)
            if admitted:
                await self._run(request, term, program, claimed)
            else:
                await self._not_run(request, term, RunStatus.skipped, outcomes.BREAKER_OPEN,
                                    claimed.run_id)  # fmt: skip
        finally:
            slot.catchups -= request.catchup
            self._next(request.trigger.id, slot)

    def _breaker_admit(self, book: Book) -> tuple[bool, Book]:
        admitted, state = breaker.admit(book.breaker, self._clock.wall())
        return admitted, Book(breaker=state, rollup=book.rollup)

    def _next(self, tid: TriggerId, slot: _Slot) -> None:
        if self._slots.get(tid) is not slot or slot.slots.running <= 0:
            return  # withdrawn meanwhile: its waiting fires are recorded by apply()
        start, slot.slots = admission.finished(slot.slots)
        if start and slot.waiting:
            request, term, claimed = slot.waiting.popleft()
            self._spawn(self._run_admitted(request, term, claimed), request)

    async def _run(
        self,
        request: FireRequest,
        term: int,
        program: LoadedProgram | tuple[Outcome, str],
        claimed: Claimed,
    ) -> None:
        record = request.trigger
        fire = self._fire_of(request, term, claimed.run_id)
        log.info("fire %s@%s → %s", named(record), request.key, record.program)
        token = self._fresh_token(claimed)
        outcome, reason = await self._execute(record, fire, request.event, program, token)
        log.info("fire %s@%s ← %s %.0f ms%s", named(record), request.key, outcome.status.value,
                 outcome.duration_ms, f": {reason}" if reason else "")  # fmt: skip
        await self._finish(request, fire, outcome, reason, admitted=True)

    async def _execute(
        self,
        record: Trigger,
        fire: Fire,
        event: dict[str, Any] | None,
        program: LoadedProgram | tuple[Outcome, str],
        token: str | Outcome | None,
    ) -> tuple[Outcome, str]:
        if not isinstance(program, LoadedProgram):
            return program
        if token is None:  # waited too long since the claim (or the space gave none)
            token = await self._run_token(fire, record.limits.timeout_seconds)
        if isinstance(token, Outcome):
            return token, outcomes.RUN_TOKEN
        args = dict(record.args) if event is None else {**record.args, "event": event}
        job = Job(source=program.source, ref=record.program, args=args,
                  context=self._context(fire, token), timeout_seconds=record.limits.timeout_seconds,
                  memory_mb=record.limits.memory_mb)  # fmt: skip
        return await run_job(self._executor, job)

    async def _load(self, ref: str) -> LoadedProgram | tuple[Outcome, str]:
        try:
            return await self._programs.get(ref)
        except (UnknownProgram, InvalidRef) as exc:
            return outcomes.failed_before_run(str(exc)), outcomes.UNKNOWN_PROGRAM
        except InvalidProgram as exc:
            return outcomes.failed_before_run(str(exc)), outcomes.INVALID_PROGRAM
        except ApiError as exc:
            return outcomes.failed_before_run(f"program {ref}: {exc}"), exc.code

    def _fresh_token(self, claimed: Claimed) -> str | None:
        """The claim's token, if the run starts soon enough for it to outlive the run."""
        if claimed.token is None or self._clock.monotonic() - claimed.at > TOKEN_FRESH_S:
            return None
        return claimed.token

    async def _run_token(self, fire: Fire, timeout_s: float) -> str | Outcome:
        return await run_token(self._client, self._space, fire, timeout_s, self._clock)

    def _context(self, fire: Fire, token: str) -> RunContext:
        return RunContext(run_id=fire.run_id, trigger_id=fire.trigger_id, program=fire.program,
                          peer=self._peer, space=self._space, url=self._url, token=token,
                          term=fire.term, key=fire.key)  # fmt: skip

    # --- recording -------------------------------------------------------------------------

    async def _not_run(
        self, request: FireRequest, term: int, status: RunStatus, why: str, run_id: str
    ) -> None:
        fire = self._fire_of(request, term, run_id)
        log.info("fire %s@%s ← %s: %s", named(request.trigger), request.key, status.value, why)
        await self._finish(request, fire, outcomes.not_run(status, why), why, admitted=False)

    async def _withdrawn(self, request: FireRequest, term: int, run_id: str) -> None:
        await self._unstamped(request, term, RunStatus.skipped, outcomes.WITHDRAWN, run_id)

    async def _unstamped(
        self, request: FireRequest, term: int, status: RunStatus, why: str, run_id: str = ""
    ) -> None:
        """A non-run of a trigger this device does not (or no longer) hold: no stamps."""
        fire = self._fire_of(request, term, run_id or new_run_id())
        self._count(status.value)
        ending = outcomes.not_run(status, why)
        await self._post_run(outcomes.run_record(fire, ending, finished_at=fire.started_at,
                                                 reason=why))  # fmt: skip

    async def _finish(
        self, request: FireRequest, fire: Fire, outcome: Outcome, why: str, *, admitted: bool
    ) -> None:
        """Settle the book now (the breaker sees this outcome before the next fire starts),
        then record the run and its stamps in the background, so the trigger's slot is
        free for its next fire while the space is written."""
        self._count(outcome.status.value)
        now = self._clock.wall()
        run = outcomes.run_record(fire, outcome, finished_at=now, reason=why)
        slot = self._slots.get(request.trigger.id)
        if slot is not None:  # else withdrawn meanwhile: it is no longer ours to stamp
            slot.book, slot.latest = outcomes.settle(
                slot.book,
                request.trigger,
                fire,
                outcome,
                finished_at=now,
                reason=why,
                admitted=admitted,
            )
            if self._next_fire is not None and request.trigger.kind != "event":
                upcoming = self._next_fire(request.trigger.id)  # stamped with the run
                slot.latest["nextFireAt"] = outcomes.iso(upcoming) if upcoming else None
            slot.runs_seen = slot.book.rollup.runs
        self._spawn(self._record(request.trigger.id, run, slot), request)

    async def _record(self, tid: TriggerId, run: dict[str, Any], slot: _Slot | None) -> None:
        await self._post_run(run)
        if slot is not None:
            await self._write_stamps(tid, slot)

    async def _write_stamps(self, tid: TriggerId, slot: _Slot) -> None:
        """Stamps of one trigger are written in order; a newer set replaces a waiting one."""
        async with slot.writing:
            stamps, slot.latest = slot.latest, None
            if stamps is not None:
                await self._write("stamps", tid, self._client.trigger_status, self._space, tid,
                                  stamps)  # fmt: skip

    async def _post_run(self, record: dict[str, Any]) -> None:
        await self._write("run", record["triggerId"], self._client.run_create, self._space, record)

    async def _write(self, what: str, tid: str, call: Callable[..., Any], *args: Any) -> None:
        for attempt in range(WRITE_TRIES):
            try:
                await call(*args)
                return
            except ApiError as exc:
                if not _transient(exc) or attempt == WRITE_TRIES - 1:
                    log.warning("fire %s: %s not written: %s", tid, what, exc)
                    return
            await self._clock.sleep(0.5 * 2**attempt)

    def _fire_of(self, request: FireRequest, term: int, run_id: str) -> Fire:
        record = request.trigger
        return Fire(run_id=run_id, trigger_id=record.id, program=record.program, peer=self._peer,
                    term=term, key=request.key, started_at=self._clock.wall(),
                    due_at=request.due_at)  # fmt: skip


async def run_token(
    client: SpaceClient, space: str, fire: Fire, timeout_s: float, clock: Clock
) -> str | Outcome:
    """A token for this run, living as long as it may; transient refusals are retried.
    What cannot be had is an ending (`error`, no run token), never an exception."""
    body = {"triggerId": fire.trigger_id, "runId": fire.run_id, "key": fire.key,
            "ttlSeconds": timeout_s + TOKEN_MARGIN_S}  # fmt: skip
    for attempt in range(WRITE_TRIES):
        try:
            return (await client.token_run(space, body))["token"]
        except ApiError as exc:
            error = exc
            if not _transient(exc) or attempt == WRITE_TRIES - 1:
                break
        await clock.sleep(0.5 * 2**attempt)
    return outcomes.failed_before_run(f"no run token: {error}")


async def run_job(executor: Executor, job: Job) -> tuple[Outcome, str]:
    """Run `job`; what the executor refuses is an ending too, never an exception."""
    try:
        return await executor.run(job), ""
    except ExecutorClosed:
        return outcomes.not_run(RunStatus.rejected, outcomes.SHUTDOWN), outcomes.SHUTDOWN
    except ValueError as exc:  # args that cannot be sent to a worker
        return outcomes.failed_before_run(str(exc)), "invalid_args"


def _transient(exc: ApiError) -> bool:
    return exc.status == 0 or exc.status >= 500
