"""The one translation of how a fire ended into a run record and the trigger's stamps.

Owns two things (SPEC "Runs"): the run record body posted to `…/runs` (runId, triggerId,
program, peer, term, key, startedAt, finishedAt, durationMs, status, result, error,
stderrTail, lateMs, reason) and the status stamps posted to `…/triggers/{id}/status`
(lastStatus, lastStatusDetail, lastRunAt, breaker, rollup). A fire ends as an `Outcome`
of the executor, or as a non-run (`skipped`, `rejected`) or a failure before the program
ran (`error` with a reason such as `unknown_program`), both also written as an `Outcome`.

The trigger's `Book` (its breaker and rollup) is seeded from the record's stamps, so it
follows the trigger between devices, and moved on by `settle`. The stamps agree with the
health pass (`triggers.health`): a fired `once` is `done` "fired for <at>", an open
breaker is `breaker_open` "until <t>", so neither side rewrites the other's stamp.

chat-watch's turns are not runs: `turn_stamps` counts one more conversation start on
its rollup and stamps how the turn ended.

Pure: no I/O and no clock; every instant is passed in. It must not decide whether a fire
runs (that is `runtime.fire.firing`) nor know how a program is run.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec

from core.vocab import FAILED, NOT_RAN, RAN, HealthReason, RunReason, RunStatus, iso
from programs import breaker, rollup
from programs.breaker import BreakerState
from programs.outcome import Outcome
from programs.rollup import Rollup
from triggers import policies
from triggers.health import breaker_detail, done_detail, runs_done_detail, unknown_program_detail
from triggers.records import Loaded, OnceTrigger, Salvaged, Trigger

DETAIL_CHARS = 200


class RunIdentity(msgspec.Struct, frozen=True, kw_only=True):
    """Who, what and when of one fire, as its run record names them."""

    run_id: str
    trigger_id: str
    program: str
    peer: str
    term: int
    key: str
    started_at: datetime
    due_at: datetime | None = None  # None: nothing was due (a manual run)


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


def cancelled(duration_ms: float) -> Outcome:
    """A run stopped by a newer fire of its trigger (`overlap: restart`)."""
    return Outcome(
        status=RunStatus.CANCELLED, error="superseded by a newer fire", duration_ms=duration_ms
    )


def failed_before_run(error: str) -> Outcome:
    """A fire whose program could not be started (unknown program, no run token, …)."""
    return Outcome(status=RunStatus.ERROR, error=error)


def late_ms(fire: RunIdentity) -> float | None:
    if fire.due_at is None:
        return None
    return round((fire.started_at - fire.due_at).total_seconds() * 1000, 1)


def run_record(
    fire: RunIdentity, outcome: Outcome, *, finished_at: datetime, reason: str = ""
) -> dict[str, Any]:
    """The run record body for `…/runs`."""
    ran = outcome.status in RAN
    return {
        "runId": fire.run_id,
        "triggerId": fire.trigger_id,
        "program": fire.program,
        "peer": fire.peer,
        "term": fire.term,
        "key": fire.key,
        "startedAt": iso(fire.started_at),
        "finishedAt": iso(max(finished_at, fire.started_at)),
        "durationMs": round(max(outcome.duration_ms, 0.0), 1) if ran else 0.0,
        "status": outcome.status.value,
        "result": outcome.result,
        "error": outcome.error,
        "stderrTail": outcome.stderr_tail,
        "lateMs": late_ms(fire),
        "reason": reason,
        "attempt": policies.attempt_of(fire.key),
    }


def refused(body: dict[str, Any], detail: str) -> dict[str, Any]:
    """A run record (with its stamps) the space refused as `detail`, made storable: no
    result, an `error` saying why (SPEC: a run's record is always written)."""
    why = f"run record refused by the space: {detail}"
    error = f"{body.get('error')}\n{why}" if body.get("error") else why
    status = RunStatus.ERROR.value if body.get("status") == RunStatus.OK.value else body["status"]
    changed = {**body, "result": None, "error": error, "status": status}
    if isinstance(stamps := body.get("stamps"), dict):
        changed["stamps"] = {**stamps, "lastStatus": status, "lastStatusDetail": headline(why)}
    return changed


def settle(
    book: Book,
    record: Trigger,
    fire: RunIdentity,
    outcome: Outcome,
    *,
    finished_at: datetime,
    admitted: bool,
    reason: str = "",
) -> tuple[Book, dict[str, Any]]:
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
        book.rollup, outcome.status, duration, fire.started_at, reason=reason, keep_starts=keep
    )
    after = Book(breaker=state, rollup=roll)
    return after, stamps(after, record, fire, outcome, reason=reason, now=finished_at)


def stamps(
    book: Book, record: Trigger, fire: RunIdentity, outcome: Outcome, *, reason: str, now: datetime
) -> dict[str, Any]:
    status, detail = last_status(book, record, outcome, reason=reason, now=now)
    return {
        "lastStatus": status,
        "lastStatusDetail": detail,
        "lastRunAt": iso(fire.started_at),
        "breaker": breaker.to_dict(book.breaker),
        "rollup": rollup.to_dict(book.rollup),
    }


def last_status(
    book: Book, record: Trigger, outcome: Outcome, *, reason: str, now: datetime
) -> tuple[str, str]:
    """`lastStatus`/`lastStatusDetail`, worded as the health pass words them: `done` for a
    once whose run succeeded (a failed one shows its failure), `unknown_program` for a
    fire skipped because its program is not published, `breaker_open` while the breaker
    is open, else the run's status."""
    if isinstance(record, OnceTrigger) and outcome.status is RunStatus.OK:
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

_Aware = Annotated[datetime, msgspec.Meta(tz=True)]


def stamped_rollup(record: Loaded | None) -> Rollup:
    """The rollup a record's stamp holds (an undecodable record's too); empty when none."""
    if record is None:
        return rollup.EMPTY
    raw = record.raw.get("rollup") if isinstance(record, Salvaged) else record.rollup
    return rollup.from_dict(raw)


def turn_stamps(seed: Rollup, turn: dict[str, Any]) -> tuple[Rollup, dict[str, Any]]:
    """chat-watch's rollup after one more conversation start, and the stamps to write.

    Raises ValueError when the turn has no aware `startedAt`."""
    try:
        started = msgspec.convert(turn.get("startedAt"), _Aware)
    except msgspec.ValidationError as exc:
        raise ValueError(f"turn.startedAt: {exc}") from None
    ok = turn.get("outcome") == "ok"
    after = rollup.conversation_started(seed, started, "ok" if ok else "error")
    return after, {
        "lastStatus": "ok" if ok else "error",
        "lastStatusDetail": "" if ok else headline(str(turn.get("error") or "")),
        "lastRunAt": iso(after.last_run_at or started),
        "rollup": rollup.to_dict(after),
    }
