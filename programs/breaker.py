"""The circuit breaker of one trigger, as a pure state machine.

Owns the breaker's states (closed → open after 3 failures, 5 min doubling to ≤ 1 h →
half_open trial → closed or open again), what counts as a failure (`error`, `timeout`,
`crashed`) and its wire form, the record's `breaker` stamp, so a device that takes a trigger
over resumes where the last left it. The choices SPEC leaves open are in
docs/architecture.md, "Module notes". Pure: every function takes `now`, no I/O.
"""

from __future__ import annotations

import enum
from datetime import datetime, timedelta
from typing import Annotated, Any

import msgspec

from core.vocab import FAILED, NOT_RAN, RunStatus
from core.wire import wire_builtins


class Phase(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class BreakerPolicy(msgspec.Struct, frozen=True, kw_only=True):
    threshold: int = 3
    base: timedelta = timedelta(minutes=5)
    cap: timedelta = timedelta(hours=1)
    trial_timeout: timedelta = timedelta(minutes=15)


DEFAULT_POLICY = BreakerPolicy()
Count = Annotated[int, msgspec.Meta(ge=0)]
Instant = Annotated[datetime, msgspec.Meta(tz=True)]


class BreakerState(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    phase: Phase = Phase.CLOSED
    failures: Count = 0  # consecutive failures
    trips: Count = 0  # trips since the breaker last closed; sets the open period
    opened_at: Instant | None = None
    open_until: Instant | None = None
    trial_started_at: Instant | None = None
    suppressed: Count = 0  # fires refused since the last trip

    def __post_init__(self) -> None:
        if self.phase is not Phase.CLOSED and self.open_until is None:
            raise ValueError(f"a {self.phase} breaker needs openUntil")
        if self.phase is Phase.HALF_OPEN and self.trial_started_at is None:
            raise ValueError("a half_open breaker needs trialStartedAt")


CLOSED = BreakerState()


def is_failure(status: object) -> bool:
    """Whether a run status counts against the breaker (`RunStatus` or its str value)."""
    return _value(status) in FAILED


def open_period(trips: int, policy: BreakerPolicy = DEFAULT_POLICY) -> timedelta:
    """How long the `trips`-th consecutive trip keeps the breaker open."""
    doublings = min(max(trips - 1, 0), 32)
    return min(policy.base * (1 << doublings), policy.cap)


def on_outcome(
    state: BreakerState, failed: bool, now: datetime, policy: BreakerPolicy = DEFAULT_POLICY
) -> BreakerState:
    """The state after a run finished, `failed` or not."""
    if not failed:
        return CLOSED if state.phase is not Phase.OPEN else state
    failures = state.failures + 1
    if state.phase is Phase.HALF_OPEN:
        return _trip(state, failures, now, policy)
    if state.phase is Phase.CLOSED and failures >= policy.threshold:
        return _trip(state, failures, now, policy)
    return msgspec.structs.replace(state, failures=failures)


def on_status(
    state: BreakerState, status: object, now: datetime, policy: BreakerPolicy = DEFAULT_POLICY
) -> BreakerState:
    """The state after a run record with `status`: a not-run status (or a run cancelled by a
    newer fire, neither success nor failure) leaves it as it was, except that a trial which
    did not finish passes the trial on to the next fire."""
    if _value(status) in NOT_RAN or _value(status) == RunStatus.CANCELLED:
        if state.phase is Phase.HALF_OPEN:
            return msgspec.structs.replace(state, phase=Phase.OPEN, trial_started_at=None)
        return state
    return on_outcome(state, is_failure(status), now, policy)


def admit(
    state: BreakerState, now: datetime, policy: BreakerPolicy = DEFAULT_POLICY
) -> tuple[bool, BreakerState]:
    """Whether a fire may run now; the first fire after the open period is the trial."""
    match state.phase:
        case Phase.CLOSED:
            return True, state
        case Phase.OPEN if state.open_until is not None and now >= state.open_until:
            return True, _trial(state, now)
        case Phase.HALF_OPEN if _trial_stale(state, now, policy):
            return True, _trial(state, now)
    return False, msgspec.structs.replace(state, suppressed=state.suppressed + 1)


def until(state: BreakerState) -> datetime | None:
    """When an open breaker lets its trial through; None when not open."""
    return state.open_until if state.phase is Phase.OPEN else None


def to_dict(state: BreakerState) -> dict[str, Any]:
    """The `breaker` stamp for the trigger record."""
    stamp: dict[str, Any] = wire_builtins(state)
    return stamp


def from_dict(raw: object) -> BreakerState:
    """The state a `breaker` stamp holds; missing or garbled → a fresh closed breaker."""
    if not isinstance(raw, dict):
        return CLOSED
    try:
        return msgspec.convert(raw, BreakerState)
    except (msgspec.ValidationError, ValueError, TypeError):
        return CLOSED


def _trip(state: BreakerState, failures: int, now: datetime, policy: BreakerPolicy) -> BreakerState:
    trips = state.trips + 1
    return BreakerState(
        phase=Phase.OPEN,
        failures=failures,
        trips=trips,
        opened_at=now,
        open_until=now + open_period(trips, policy),
    )


def _trial(state: BreakerState, now: datetime) -> BreakerState:
    return msgspec.structs.replace(state, phase=Phase.HALF_OPEN, trial_started_at=now)


def _trial_stale(state: BreakerState, now: datetime, policy: BreakerPolicy) -> bool:
    started = state.trial_started_at
    return started is not None and now - started >= policy.trial_timeout


def _value(status: object) -> object:
    return getattr(status, "value", status)
