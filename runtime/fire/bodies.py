"""The one translation of how a fire ended into a run record and the trigger's stamps.

Owns the run record posted to `…/runs` and the status stamps (SPEC "Runs"), from an
`Outcome` or a non-run; the trigger's `Book` (breaker, rollup) seeded from its stamps and
moved on by `settle`; chat-watch's `turn_stamps`. Its stamps agree with `triggers.health`,
so neither side rewrites the other's. Pure: no I/O, no clock. Must not decide whether a
fire runs (runtime.fire.firing) nor know how a program is run.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import msgspec
from msgspec.structs import replace

from core.vocab import (
    FAILED,
    MANUAL_PREFIX,
    NOT_RAN,
    RAN,
    HealthReason,
    RunReason,
    RunStatus,
    TurnOutcome,
)
from core.wire import NextAttempt, Phases, RunIn, Stamps, TurnIn
from programs import breaker, rollup
from programs.breaker import BreakerState
from programs.outcome import Outcome
from programs.rollup import Rollup
from runtime.fire.claimed import QUEUE, Fire, Step, entered_at, phases
from triggers import policies
from triggers.health import breaker_detail, done_detail, runs_done_detail, unknown_program_detail
from triggers.records import Loaded, OnceTrigger, Salvaged, Trigger

DETAIL_CHARS = 200


class RunIdentity(msgspec.Struct, frozen=True, kw_only=True):
    """Who, what and when of a run no fire claimed (a run by hand, runtime.fire.manual), as
    its run record names them; a claimed fire is its own (`Fire`)."""

    run_id: str
    trigger_id: str
    program: str
    peer: str
    term: int
    key: str
    started_at: datetime  # main() entered (`entered`); a fire that did not run: when decided
    due_at: datetime | None = None  # None: nothing was due (a manual run)
    phases: Phases | None = None  # where `started_at − due_at` went (`phases`)


Identity = RunIdentity | Fire
"""What a run record names of its fire: a claimed `Fire`, or a run by hand's identity."""


def decided(fire: RunIdentity, steps: Sequence[Step], now: datetime) -> RunIdentity:
    """`fire` as decided at `now` after `steps` (`Fire.decided`, for a run by hand)."""
    return replace(fire, started_at=now, phases=phases(fire.due_at, (*steps, (QUEUE, now))))


def entered(fire: RunIdentity, steps: Sequence[Step], outcome: Outcome) -> RunIdentity:
    """`fire` as its run went (`Fire.entered`, for a run by hand)."""
    at = entered_at(fire.due_at, steps, outcome)
    return fire if at is None else replace(fire, started_at=at[0], phases=at[1])


def started(fire: Identity, otherwise: datetime) -> datetime:
    """When the fire's record says it started (`otherwise` if it was never decided)."""
    return fire.started_at if fire.started_at is not None else otherwise


class Book(msgspec.Struct, frozen=True, kw_only=True):
    """What the stamps of one trigger carry between runs: its breaker and its rollup."""

    breaker: BreakerState = breaker.CLOSED
    rollup: Rollup = rollup.EMPTY


def book_of(record: Trigger) -> Book:
    """The book a record's stamps hold; garbled or missing stamps start afresh."""
    return Book(breaker=breaker.from_dict(record.breaker), rollup=rollup.from_dict(record.rollup))


def not_run(status: RunStatus, reason: str) -> Outcome:
    """A fire that never ran its program: `skipped` or `rejected`."""
    if status not in NOT_RAN:
        raise ValueError(f"status: a fire that did not run is skipped or rejected, got {status}")
    return Outcome(status=status)


def shut_down(fire: Fire, now: datetime) -> RunIn:
    """The record of a fire claimed ahead whose slot the device did not live to see."""
    fire.decided(now)
    why = RunReason.SHUTDOWN
    return run_record(fire, not_run(RunStatus.REJECTED, why), finished_at=now, reason=why)


def cancelled(duration_ms: float) -> Outcome:
    """A run stopped by a newer fire of its trigger (`overlap: restart`)."""
    return Outcome(
        status=RunStatus.CANCELLED, error="superseded by a newer fire", duration_ms=duration_ms
    )


def failed_before_run(error: str) -> Outcome:
    """A fire whose program could not be started (unknown program, no run token, …)."""
    return Outcome(status=RunStatus.ERROR, error=error)


def late_ms(fire: Identity) -> float | None:
    if fire.due_at is None or fire.started_at is None:
        return None
    return round((fire.started_at - fire.due_at).total_seconds() * 1000, 1)


def run_record(
    fire: Identity, outcome: Outcome, *, finished_at: datetime, reason: str = ""
) -> RunIn:
    """The run record body for `…/runs`."""
    ran, started_at = outcome.status in RAN, started(fire, finished_at)
    return RunIn(
        runId=fire.run_id,
        triggerId=fire.trigger_id,
        program=fire.program,
        peer=fire.peer,
        term=fire.term,
        key=fire.key,
        dueAt=fire.due_at,
        startedAt=started_at,
        finishedAt=max(finished_at, started_at),
        durationMs=round(max(outcome.duration_ms, 0.0), 1) if ran else 0.0,
        status=outcome.status,
        result=outcome.result,
        error=outcome.error,
        stderrTail=outcome.stderr_tail,
        lateMs=late_ms(fire),
        phases=fire.phases,
        reason=reason,
        attempt=policies.attempt_of(fire.key),
    )


def refused(run: RunIn, detail: str) -> RunIn:
    """A run record (with its stamps) the space refused as `detail`, made storable: no
    result, an `error` saying why (SPEC: a run's record is always written)."""
    why = f"run record refused by the space: {detail}"
    error = f"{run.error}\n{why}" if run.error else why
    status = RunStatus.ERROR if run.status is RunStatus.OK else run.status
    stamps = run.stamps
    if stamps is not None:
        stamps = replace(stamps, lastStatus=status.value, lastStatusDetail=headline(why))
    return replace(run, result=None, error=error, status=status, stamps=stamps)


def settle(
    book: Book,
    record: Trigger,
    fire: Identity,
    outcome: Outcome,
    *,
    finished_at: datetime,
    admitted: bool,
    reason: str = "",
    next_attempt: tuple[str, datetime] | None = None,
    next_fire_at: datetime | msgspec.UnsetType | None = msgspec.UNSET,
) -> tuple[Book, Stamps]:
    """The book after this fire and the stamps to write on its trigger.

    The breaker moves only on fires that passed its admission (`admitted`): a fire
    refused by it, or skipped before it, was never its to judge. An admitted fire that
    did not run (the executor closed under it) hands a trial on to the next fire. A
    failed attempt that will be retried is not the breaker's either: only the last counts.
    """
    state = book.breaker
    retried = outcome.status in FAILED and not policies.last_attempt(record.retry, fire.key)
    if admitted and not retried:
        state = breaker.on_status(state, outcome.status, finished_at)
    duration = outcome.duration_ms if outcome.status in RAN else None
    keep = record.budget.runs if record.budget is not None else 0
    roll = rollup.add(
        book.rollup,
        outcome.status,
        duration,
        started(fire, finished_at),
        reason=reason,
        keep_starts=keep,
    )
    after = Book(breaker=state, rollup=roll)
    stamped = stamps(after, record, fire, outcome, reason=reason, now=finished_at)
    attempt = _attempt(record, fire, next_attempt)
    return after, replace(stamped, nextAttempt=attempt, nextFireAt=next_fire_at)


def _attempt(
    record: Trigger, fire: Identity, next_attempt: tuple[str, datetime] | None
) -> NextAttempt | msgspec.UnsetType | None:
    """The `nextAttempt` stamp: the one scheduled now, cleared when this fire ended the
    chain the stamped one belongs to, else left as it is."""
    if next_attempt is not None:  # an event fire's carries its message: a takeover runs it
        event = fire.request.event if isinstance(fire, Fire) else None
        return NextAttempt(key=next_attempt[0], dueAt=next_attempt[1], event=event)
    stamped, base = record.next_attempt, policies.base_key(fire.key)
    if policies.attempt_of(fire.key) > 1 or (stamped and policies.base_key(stamped.key) == base):
        return None  # a retry ended its chain (the record it came with may predate the stamp)
    return msgspec.UNSET


def stamps(
    book: Book, record: Trigger, fire: Identity, outcome: Outcome, *, reason: str, now: datetime
) -> Stamps:
    status, detail = last_status(book, record, fire, outcome, reason=reason, now=now)
    return Stamps(
        lastStatus=status,
        lastStatusDetail=detail,
        lastRunAt=started(fire, now),
        breaker=breaker.to_dict(book.breaker),
        rollup=rollup.to_dict(book.rollup),
    )


def last_status(
    book: Book,
    record: Trigger,
    fire: Identity,
    outcome: Outcome,
    *,
    reason: str,
    now: datetime,
) -> tuple[str, str]:
    """`lastStatus`/`lastStatusDetail`, worded as the health pass words them: `done` for a
    once whose run succeeded (a failed one shows its failure; a run by hand, `manual:`, is
    not its `at`), `unknown_program` for a
    fire skipped because its program is not published, `breaker_open` while the breaker
    is open, else the run's status."""
    manual = fire.key.startswith(MANUAL_PREFIX)
    if isinstance(record, OnceTrigger) and outcome.status is RunStatus.OK and not manual:
        return HealthReason.DONE.value, done_detail(record.spec.at_utc)
    if record.max_runs is not None and policies.runs_done(record.max_runs, book.rollup.ok):
        return HealthReason.DONE.value, runs_done_detail(record.max_runs)
    if outcome.status is RunStatus.SKIPPED and reason == RunReason.UNKNOWN_PROGRAM:
        return HealthReason.UNKNOWN_PROGRAM.value, unknown_program_detail(record.program)
    until = breaker.until(book.breaker)
    if until is not None and until > now:
        return HealthReason.BREAKER_OPEN.value, breaker_detail(until)
    return outcome.status.value, reason or headline(outcome.error)


def headline(error: str) -> str:
    """One line of an error for a stamp: a traceback's last line, else the first line."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    return line if len(line) <= DETAIL_CHARS else line[: DETAIL_CHARS - 1] + "…"


# --- chat-watch: a turn is a conversation start, not a run ---------------------------


def stamped_rollup(record: Loaded | None) -> Rollup:
    """The rollup a record's stamp holds (an undecodable record's too); empty when none."""
    if record is None:
        return rollup.EMPTY
    raw = record.raw.get("rollup") if isinstance(record, Salvaged) else record.rollup
    return rollup.from_dict(raw)


def turn_stamps(seed: Rollup, turn: TurnIn) -> tuple[Rollup, Stamps]:
    """chat-watch's rollup after one more conversation start, and the stamps to write."""
    ok = turn.outcome is TurnOutcome.OK
    after = rollup.conversation_started(seed, turn.startedAt, "ok" if ok else "error")
    return after, Stamps(
        lastStatus="ok" if ok else "error",
        lastStatusDetail="" if ok else headline(turn.error),
        lastRunAt=after.last_run_at or turn.startedAt,
        rollup=rollup.to_dict(after),
    )
