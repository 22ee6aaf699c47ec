from datetime import UTC, datetime, timedelta

import pytest
from msgspec.structs import replace

from core.vocab import RunStatus
from programs.breaker import (
    CLOSED,
    BreakerPolicy,
    BreakerState,
    Phase,
    admit,
    from_dict,
    is_failure,
    on_outcome,
    on_status,
    open_period,
    to_dict,
    until,
)

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


def opened(trips: int = 1, failures: int = 3, at: datetime = T0) -> BreakerState:
    return BreakerState(
        phase=Phase.OPEN,
        failures=failures,
        trips=trips,
        opened_at=at,
        open_until=at + open_period(trips),
    )


def trial(trips: int = 1, started: datetime = T0 + 5 * MIN) -> BreakerState:
    return BreakerState(
        phase=Phase.HALF_OPEN,
        failures=3,
        trips=trips,
        opened_at=T0,
        open_until=T0 + open_period(trips),
        trial_started_at=started,
    )


@pytest.mark.parametrize(
    ("status", "failed"),
    [
        ("ok", False),
        ("error", True),
        ("timeout", True),
        ("crashed", True),
        ("rejected", False),
        ("skipped", False),
    ],
)
def test_is_failure(status: str, failed: bool) -> None:
    assert is_failure(status) is failed


def test_is_failure_accepts_enum_members() -> None:
    import enum

    class Status(str, enum.Enum):  # noqa: UP042 -- str() differs from StrEnum; value must be used
        ERROR = "error"
        OK = "ok"

    assert is_failure(Status.ERROR)
    assert not is_failure(Status.OK)


@pytest.mark.parametrize(
    ("trips", "minutes"),
    [(0, 5), (1, 5), (2, 10), (3, 20), (4, 40), (5, 60), (6, 60), (50, 60), (10_000, 60)],
)
def test_open_period_doubles_to_cap(trips: int, minutes: int) -> None:
    assert open_period(trips) == timedelta(minutes=minutes)


@pytest.mark.parametrize(
    ("before", "failed", "after"),
    [
        # closed: counts consecutive failures, a success resets them
        (CLOSED, True, BreakerState(failures=1)),
        (BreakerState(failures=1), True, BreakerState(failures=2)),
        (BreakerState(failures=2), True, opened(trips=1, failures=3)),
        (BreakerState(failures=2), False, CLOSED),
        (CLOSED, False, CLOSED),
        # open: a late outcome counts but neither closes nor extends
        (opened(), True, replace(opened(), failures=4)),
        (opened(), False, opened()),
        # half-open: the trial decides
        (trial(trips=1), False, CLOSED),
        (trial(trips=3), False, CLOSED),
        (trial(trips=1), True, opened(trips=2, failures=4, at=T0)),
        (trial(trips=5), True, opened(trips=6, failures=4, at=T0)),
    ],
)
def test_on_outcome(before: BreakerState, failed: bool, after: BreakerState) -> None:
    assert on_outcome(before, failed, T0) == after


@pytest.mark.parametrize(
    ("state", "now", "allowed", "after"),
    [
        (CLOSED, T0, True, CLOSED),
        (BreakerState(failures=2), T0, True, BreakerState(failures=2)),
        # open, period not over: refused and counted
        (opened(), T0, False, replace(opened(), suppressed=1)),
        (opened(), T0 + 5 * MIN - timedelta(microseconds=1), False, None),
        # the first fire at/after the period is the trial
        (opened(), T0 + 5 * MIN, True, trial(started=T0 + 5 * MIN)),
        (opened(), T0 + 60 * MIN, True, trial(started=T0 + 60 * MIN)),
        # a trial in flight refuses the others
        (trial(), T0 + 6 * MIN, False, replace(trial(), suppressed=1)),
        # a trial that never reported stops blocking after trial_timeout
        (trial(), T0 + 19 * MIN, False, None),
        (trial(), T0 + 20 * MIN, True, trial(started=T0 + 20 * MIN)),
    ],
)
def test_admit(
    state: BreakerState, now: datetime, allowed: bool, after: BreakerState | None
) -> None:
    got_allowed, got = admit(state, now)
    assert got_allowed is allowed
    if after is not None:
        assert got == after
    if not allowed:
        assert got.suppressed == state.suppressed + 1


@pytest.mark.parametrize(
    ("state", "status", "after"),
    [
        (BreakerState(failures=2), "skipped", BreakerState(failures=2)),
        (BreakerState(failures=2), "rejected", BreakerState(failures=2)),
        (BreakerState(failures=2), "timeout", opened(trips=1, failures=3)),
        (BreakerState(failures=2), "ok", CLOSED),
        (opened(), "skipped", opened()),
        # a trial that did not run hands the trial on to the next fire
        (
            trial(),
            "skipped",
            replace(trial(), phase=Phase.OPEN, trial_started_at=None),
        ),
        (trial(), "crashed", opened(trips=2, failures=4)),
    ],
)
def test_on_status(state: BreakerState, status: str, after: BreakerState) -> None:
    assert on_status(state, status, T0) == after


def test_skipped_trial_passes_to_next_fire() -> None:
    state = on_status(trial(), "rejected", T0 + 5 * MIN)
    allowed, state = admit(state, T0 + 5 * MIN + timedelta(seconds=1))
    assert allowed
    assert state.phase is Phase.HALF_OPEN


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (CLOSED, None),
        (BreakerState(failures=2), None),
        (opened(trips=3), T0 + 20 * MIN),
        (trial(), None),
    ],
)
def test_until(state: BreakerState, expected: datetime | None) -> None:
    assert until(state) == expected


def test_a_whole_story_doubles_then_resets() -> None:
    """Trip, fail three trials (5 → 10 → 20 → 40 min), then a trial succeeds."""
    state, now = CLOSED, T0
    for _ in range(3):
        assert admit(state, now)[0]
        state = on_outcome(state, True, now)
    for expected in (5, 10, 20, 40):
        assert until(state) == now + expected * MIN
        assert not admit(state, now + (expected - 1) * MIN)[0]
        now += expected * MIN
        allowed, state = admit(state, now)
        assert allowed
        if expected < 40:
            state = on_outcome(state, True, now)
    state = on_outcome(state, False, now)
    assert state == CLOSED
    for _ in range(3):
        state = on_outcome(state, True, now)
    assert until(state) == now + 5 * MIN


def test_policy_is_configurable() -> None:
    policy = BreakerPolicy(threshold=1, base=timedelta(seconds=10), cap=timedelta(seconds=25))
    state = on_outcome(CLOSED, True, T0, policy)
    assert until(state) == T0 + timedelta(seconds=10)
    for _ in range(3):
        _, state = admit(state, until(state) or T0, policy)
        state = on_outcome(state, True, T0, policy)
    assert until(state) == T0 + timedelta(seconds=25)


@pytest.mark.parametrize("state", [CLOSED, BreakerState(failures=2), opened(trips=4), trial()])
def test_round_trips_through_a_dict(state: BreakerState) -> None:
    raw = to_dict(state)
    assert isinstance(raw["phase"], str)
    assert from_dict(raw) == state


def test_wire_form_is_camel_case() -> None:
    raw = to_dict(opened())
    assert raw["phase"] == "open"
    assert raw["openUntil"] == "2026-12-01T09:05:00.000Z"
    assert "trialStartedAt" in raw


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "open",
        [],
        {"phase": "melted"},
        {"phase": "open"},  # open without openUntil
        {"phase": "half_open", "openUntil": "2026-12-01T09:05:00.000Z"},
        {"failures": -1},
        {"failures": "three"},
        {"openUntil": "not a time"},
        {"openUntil": "2026-12-01T09:05:00"},  # naive
    ],
)
def test_garbled_dict_decodes_closed(raw: object) -> None:
    assert from_dict(raw) == CLOSED


def test_unknown_fields_are_ignored() -> None:
    raw = {**to_dict(opened()), "addedLater": 1}
    assert from_dict(raw) == opened()


def test_agrees_with_run_statuses() -> None:
    result = pytest.importorskip("programs.outcome")
    for status in RunStatus:
        assert is_failure(status) is result.Outcome(status=status).failed, status


def test_a_cancelled_run_leaves_the_breaker_as_it_was():
    now = datetime(2026, 12, 1, tzinfo=UTC)
    state = CLOSED
    for _ in range(2):
        state = on_status(state, "error", now)
    assert on_status(state, "cancelled", now) == state
