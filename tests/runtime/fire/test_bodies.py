"""The translation of a fire's ending into a run record and stamps, as tables."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from msgspec.structs import replace

from core.vocab import RunReason, RunStatus
from core.wire import to_wire
from programs import breaker, rollup
from programs.outcome import Outcome
from runtime.fire import bodies
from runtime.fire.bodies import Book, RunIdentity
from triggers.records import Salvaged, Trigger, load

T0 = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)
STARTED = T0 + timedelta(seconds=1.25)
FINISHED = STARTED + timedelta(milliseconds=40)
FIRE = RunIdentity(
    run_id="run_1",
    trigger_id="trg_a",
    program="triage@v1",
    peer="laptop",
    term=3,
    key="2026-12-01T09:00:00Z",
    started_at=STARTED,
    due_at=T0,
)
CRON = {"id": "trg_a", "kind": "cron", "spec": {"expr": "0 9 * * *"}, "program": "triage@v1"}
ONCE = {
    "id": "trg_a",
    "kind": "once",
    "spec": {"at": "2026-12-01T10:00:00+01:00"},
    "program": "triage@v1",
}


def record(raw: dict[str, Any]) -> Trigger:
    loaded = load(raw)
    assert not isinstance(loaded, Salvaged), loaded
    return loaded


TRACEBACK = 'Traceback (most recent call last):\n  File "triage@v1", line 3\nValueError: boom'


@pytest.mark.parametrize(
    ("outcome", "reason", "expect"),
    [
        (
            Outcome(status=RunStatus.OK, result={"ok": True}, duration_ms=40.04),
            "",
            {"status": "ok", "result": {"ok": True}, "durationMs": 40.0, "error": ""},
        ),
        (
            Outcome(status=RunStatus.ERROR, error=TRACEBACK, stderr_tail="oops\n", duration_ms=7),
            "",
            {"status": "error", "error": TRACEBACK, "stderrTail": "oops\n", "durationMs": 7},
        ),
        (
            Outcome(status=RunStatus.TIMEOUT, error="timed out after 60 s", duration_ms=60000),
            "",
            {"status": "timeout", "durationMs": 60000},
        ),
        (
            bodies.not_run(RunStatus.SKIPPED, "overlap"),
            "overlap",
            {"status": "skipped", "reason": "overlap", "durationMs": 0.0},
        ),
        (
            bodies.not_run(RunStatus.REJECTED, "queue_full"),
            "queue_full",
            {"status": "rejected", "reason": "queue_full", "result": None},
        ),
        (
            bodies.failed_before_run("program ghost@v1 is not published"),
            "unknown_program",
            {"status": "error", "reason": "unknown_program"},
        ),
    ],
)
def test_run_record(outcome: Outcome, reason: str, expect: dict[str, Any]) -> None:
    body = to_wire(bodies.run_record(FIRE, outcome, finished_at=FINISHED, reason=reason))
    assert body.keys() == {
        "runId",
        "triggerId",
        "program",
        "peer",
        "term",
        "key",
        "dueAt",
        "startedAt",
        "finishedAt",
        "durationMs",
        "status",
        "result",
        "error",
        "stderrTail",
        "lateMs",
        "phases",
        "reason",
        "stamps",  # null: the recorder adds the trigger's
        "attempt",
    }
    assert body.items() >= expect.items()
    assert body["attempt"] == 1  # a fire's own key: its first attempt
    assert (body["runId"], body["triggerId"], body["peer"], body["term"]) == (
        "run_1",
        "trg_a",
        "laptop",
        3,
    )
    assert body["startedAt"] == "2026-12-01T09:00:01.250Z"
    assert body["finishedAt"] == "2026-12-01T09:00:01.290Z"
    assert body["lateMs"] == 1250.0


@pytest.mark.parametrize(
    ("due_at", "late"),
    [(T0, 1250.0), (STARTED, 0.0), (STARTED + timedelta(seconds=1), -1000.0), (None, None)],
)
def test_late_ms_is_started_minus_due(due_at: datetime | None, late: float | None) -> None:
    fire = replace(FIRE, due_at=due_at)
    assert bodies.late_ms(fire) == late


def ms(n: float) -> timedelta:
    return timedelta(milliseconds=n)


@pytest.mark.parametrize(
    ("steps", "expect"),
    [
        # taken 3 ms after the slot, claimed in 4, waited 5, its process took 6 to main()
        (
            [("wakeMs", T0 + ms(3)), ("claimMs", T0 + ms(7)), ("queueMs", T0 + ms(12))],
            {"wakeMs": 3.0, "claimMs": 4.0, "queueMs": 5.0, "spawnMs": 0.0},
        ),
        # claimed ahead: taken and claimed before the slot, woke 2 ms after it
        (
            [
                ("wakeMs", T0 - ms(50)),
                ("claimMs", T0 - ms(40)),
                ("wakeMs", T0 + ms(2)),
                ("queueMs", T0 + ms(3)),
                ("spawnMs", T0 + ms(9)),
            ],
            {"wakeMs": 2.0, "claimMs": 0.0, "queueMs": 1.0, "spawnMs": 6.0},
        ),
        # a claim that straddles the slot counts only its part after it
        (
            [("wakeMs", T0 - ms(5)), ("claimMs", T0 + ms(8))],
            {"wakeMs": 0.0, "claimMs": 8.0, "queueMs": 0.0, "spawnMs": 0.0},
        ),
    ],
)
def test_phases_split_the_lateness_after_the_slot(
    steps: list[bodies.Step], expect: dict[str, float]
) -> None:
    phases = bodies.phases(T0, steps)
    assert phases is not None and to_wire(phases) == expect
    late = max(0.0, (steps[-1][1] - T0) / ms(1))
    assert sum(expect.values()) == pytest.approx(late)


def test_phases_are_none_when_nothing_was_due() -> None:
    assert bodies.phases(None, [("wakeMs", T0)]) is None


def test_a_run_starts_when_main_was_entered_and_its_phases_sum_to_its_lateness() -> None:
    handed, entered = T0 + ms(10), T0 + ms(17.5)
    outcome = Outcome(status=RunStatus.OK, handed_at=handed, entered_at=entered)
    steps: list[bodies.Step] = [("wakeMs", T0 + ms(1)), ("claimMs", T0 + ms(4))]
    fire = bodies.entered(bodies.decided(FIRE, steps, T0 + ms(6)), steps, outcome)
    body = to_wire(bodies.run_record(fire, outcome, finished_at=FINISHED))
    assert body["startedAt"] == "2026-12-01T09:00:00.017Z" and body["lateMs"] == 17.5
    assert body["dueAt"] == "2026-12-01T09:00:00.000Z"
    assert body["phases"] == {"wakeMs": 1.0, "claimMs": 3.0, "queueMs": 6.0, "spawnMs": 7.5}


def test_a_fire_that_did_not_run_started_when_that_was_decided() -> None:
    steps: list[bodies.Step] = [("wakeMs", T0 + ms(1)), ("claimMs", T0 + ms(4))]
    fire = bodies.decided(FIRE, steps, T0 + ms(9))
    skipped = bodies.not_run(RunStatus.SKIPPED, "overlap")
    fire = bodies.entered(fire, steps, skipped)  # never entered: the decision stands
    body = to_wire(bodies.run_record(fire, skipped, finished_at=fire.started_at))
    assert (body["startedAt"], body["lateMs"]) == ("2026-12-01T09:00:00.009Z", 9.0)
    assert body["phases"] == {"wakeMs": 1.0, "claimMs": 3.0, "queueMs": 5.0, "spawnMs": 0.0}


def failing(n: int) -> Book:
    book = Book()
    for _ in range(n):
        book, _ = bodies.settle(
            book,
            record(CRON),
            FIRE,
            Outcome(status=RunStatus.ERROR, error="x"),
            finished_at=FINISHED,
            admitted=True,
        )
    return book


@pytest.mark.parametrize(
    ("raw", "book", "outcome", "reason", "status", "detail"),
    [
        (CRON, Book(), Outcome(status=RunStatus.OK), "", "ok", ""),
        (
            CRON,
            Book(),
            Outcome(status=RunStatus.ERROR, error=TRACEBACK),
            "",
            "error",
            "ValueError: boom",
        ),
        (
            CRON,
            Book(),
            Outcome(status=RunStatus.CRASHED, error="worker killed by SIGKILL\nmore"),
            "",
            "crashed",
            "worker killed by SIGKILL",
        ),
        (
            CRON,
            Book(),
            bodies.not_run(RunStatus.SKIPPED, "overlap"),
            "overlap",
            "skipped",
            "overlap",
        ),
        (
            CRON,
            Book(),
            bodies.failed_before_run("gone"),
            "unknown_program",
            "error",
            "unknown_program",
        ),
        (
            CRON,
            failing(2),
            Outcome(status=RunStatus.ERROR, error="x"),
            "",
            "breaker_open",
            "until 2026-12-01T09:05:01.290Z",
        ),
        (
            ONCE,
            Book(),
            Outcome(status=RunStatus.OK),
            "",
            "done",
            "fired for 2026-12-01T09:00:00.000Z",
        ),
        (
            ONCE,
            Book(),
            Outcome(status=RunStatus.ERROR, error="x"),
            "",
            "error",
            "x",
        ),  # a once whose only run failed shows that failure
        (
            CRON,
            Book(),
            bodies.not_run(RunStatus.SKIPPED, "unknown_program"),
            "unknown_program",
            "unknown_program",
            "program 'triage@v1' is not published",
        ),
    ],
)
def test_last_status_stamps(
    raw: dict, book: Book, outcome: Outcome, reason: str, status: str, detail: str
) -> None:
    ran = outcome.status not in (RunStatus.SKIPPED, RunStatus.REJECTED)
    _, stamps = bodies.settle(
        book, record(raw), FIRE, outcome, finished_at=FINISHED, reason=reason, admitted=ran
    )
    assert (to_wire(stamps)["lastStatus"], to_wire(stamps)["lastStatusDetail"]) == (status, detail)
    assert to_wire(stamps)["lastRunAt"] == "2026-12-01T09:00:01.250Z"


def test_a_once_run_by_hand_is_not_its_at_done() -> None:
    manual = replace(FIRE, key="manual:2026-12-01T09:00:00.000Z")
    ok = Outcome(status=RunStatus.OK)
    _, stamps = bodies.settle(
        Book(), record(ONCE), manual, ok, finished_at=FINISHED, reason="", admitted=True
    )
    assert to_wire(stamps)["lastStatus"] == "ok"


def test_settle_counts_the_run_in_the_rollup_and_moves_the_breaker() -> None:
    book, stamps = bodies.settle(
        failing(2),
        record(CRON),
        FIRE,
        Outcome(status=RunStatus.TIMEOUT, duration_ms=60000),
        finished_at=FINISHED,
        admitted=True,
    )
    assert book.breaker.phase is breaker.Phase.OPEN
    assert (book.rollup.runs, book.rollup.errors, book.rollup.timeouts) == (3, 2, 1)
    assert book.rollup.consecutive_failures == 3
    assert to_wire(stamps)["breaker"] == breaker.to_dict(book.breaker)
    assert to_wire(stamps)["rollup"] == rollup.to_dict(book.rollup)
    assert to_wire(stamps)["rollup"]["p95Ms"] is not None


def test_a_fire_refused_by_the_breaker_is_suppressed_not_a_failure() -> None:
    opened = failing(3)
    admitted, state = breaker.admit(opened.breaker, FINISHED)
    assert not admitted
    book, _ = bodies.settle(
        Book(breaker=state, rollup=opened.rollup),
        record(CRON),
        FIRE,
        bodies.not_run(RunStatus.SKIPPED, RunReason.BREAKER_OPEN),
        finished_at=FINISHED,
        reason=RunReason.BREAKER_OPEN,
        admitted=False,
    )
    assert (book.rollup.skipped, book.rollup.suppressed) == (1, 1)
    assert book.rollup.consecutive_failures == 3
    assert book.breaker == state  # counted by admit, not moved again


def test_a_skip_while_a_trial_runs_leaves_the_trial_alone() -> None:
    opened = failing(3).breaker
    _, trial = breaker.admit(opened, opened.open_until or FINISHED)
    book, _ = bodies.settle(
        Book(breaker=trial),
        record(CRON),
        FIRE,
        bodies.not_run(RunStatus.SKIPPED, RunReason.OVERLAP),
        finished_at=FINISHED,
        reason=RunReason.OVERLAP,
        admitted=False,
    )
    assert book.breaker.phase is breaker.Phase.HALF_OPEN


def test_a_trial_the_executor_never_ran_hands_the_trial_on() -> None:
    opened = failing(3).breaker
    _, trial = breaker.admit(opened, opened.open_until or FINISHED)
    book, _ = bodies.settle(
        Book(breaker=trial),
        record(CRON),
        FIRE,
        bodies.not_run(RunStatus.REJECTED, RunReason.SHUTDOWN),
        finished_at=FINISHED,
        reason=RunReason.SHUTDOWN,
        admitted=True,
    )
    assert book.breaker.phase is breaker.Phase.OPEN  # the next fire is the trial


@pytest.mark.parametrize(
    ("stamps", "phase", "runs"),
    [
        ({}, breaker.Phase.CLOSED, 0),
        (
            {
                "breaker": {
                    "phase": "open",
                    "failures": 3,
                    "trips": 1,
                    "openUntil": "2026-12-01T09:05:00Z",
                },
                "rollup": {"runs": 7, "errors": 3},
            },
            breaker.Phase.OPEN,
            7,
        ),
        ({"breaker": {"phase": "bogus"}, "rollup": {"runs": -1}}, breaker.Phase.CLOSED, 0),
    ],
)
def test_the_book_is_seeded_from_the_record_stamps(stamps: dict, phase: str, runs: int) -> None:
    book = bodies.book_of(record({**CRON, **stamps}))
    assert (book.breaker.phase, book.rollup.runs) == (phase, runs)


def test_not_run_refuses_a_status_that_ran() -> None:
    with pytest.raises(ValueError, match=r"^status:"):
        bodies.not_run(RunStatus.OK, "overlap")


@pytest.mark.parametrize(
    ("error", "line"),
    [
        ("", ""),
        (TRACEBACK, "ValueError: boom"),
        ("memory limit 512 MB reached\nTraceback ...\nMemoryError", "memory limit 512 MB reached"),
        ("x" * 300, "x" * 199 + "…"),
    ],
)
def test_headline(error: str, line: str) -> None:
    assert bodies.headline(error) == line
