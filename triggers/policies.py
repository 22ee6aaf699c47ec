"""Trigger policies: retry, window, run count, jitter, budget and quiet chat, as pure rules.

Owns the shapes of a record's optional policy fields (SPEC "Trigger policies") and the
decisions made from them, each a function of the record's values and an instant passed
in: a retry's key and due instant, whether an instant is inside the window, a slot's
jitter, whether a budget or a quiet chat holds a fire back. Snooze is `pausedUntil`,
kept by the space as the record's `activeSince` (space.trigger_store). No clock, no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Annotated

import msgspec

from core.vocab import key_instant

RETRY_MARK = "#"
"""A retry's key is its fire's key, this mark and the attempt: `2026-12-01T08:00:00Z#2`."""
MAX_ATTEMPTS = 10
MAX_JITTER = 3600.0
MAX_BUDGET_RUNS = 1000
"""A budget counts at most this many runs (the rollup keeps that many start instants)."""

Instant = Annotated[datetime, msgspec.Meta(tz=True)]
Attempts = Annotated[int, msgspec.Meta(ge=1, le=MAX_ATTEMPTS)]
Backoff = Annotated[float, msgspec.Meta(ge=0, le=86_400)]
JitterSeconds = Annotated[float, msgspec.Meta(ge=0, le=MAX_JITTER)]
MaxRuns = Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]
BudgetRuns = Annotated[int, msgspec.Meta(ge=1, le=MAX_BUDGET_RUNS)]
Period = Annotated[float, msgspec.Meta(gt=0, le=31 * 86_400)]
QuietSeconds = Annotated[float, msgspec.Meta(gt=0, le=86_400)]
ChatId = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class _Policy(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    pass


class Retry(_Policy, frozen=True, kw_only=True):
    attempts: Attempts = 1  # 1: no retry
    backoff_seconds: Backoff = 10.0
    max_backoff_seconds: Backoff = 600.0


class ActiveWindow(_Policy, frozen=True, kw_only=True):
    start_at: Instant | None = None
    end_at: Instant | None = None

    def __post_init__(self) -> None:
        if self.start_at and self.end_at and self.end_at <= self.start_at:
            raise ValueError("`endAt` must be after `startAt`")


class Budget(_Policy, frozen=True, kw_only=True):
    runs: BudgetRuns
    per_seconds: Period


class QuietChat(_Policy, frozen=True, kw_only=True):
    object_id: ChatId
    seconds: QuietSeconds


# Strict twins for user input: unknown fields refused.
class RetryInput(Retry, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class ActiveWindowInput(ActiveWindow, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class BudgetInput(Budget, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class QuietChatInput(QuietChat, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


# --- retry ----------------------------------------------------------------------------


def retry_key(key: str, attempt: int) -> str:
    """The key of attempt `attempt` (2 or more) of the fire keyed `key`."""
    return f"{base_key(key)}{RETRY_MARK}{attempt}"


def base_key(key: str) -> str:
    """The key of the fire a retry retries (the key itself for a first attempt)."""
    head, mark, tail = key.rpartition(RETRY_MARK)
    return head if mark and tail.isdigit() else key


def attempt_of(key: str) -> int:
    """Which attempt a key is: 1 for a fire's own key, k for `<key>#k`."""
    head, mark, tail = key.rpartition(RETRY_MARK)
    return int(tail) if mark and head and tail.isdigit() else 1


def retry_delay(retry: Retry | None, attempt: int) -> timedelta | None:
    """How long after attempt `attempt` failed the next one is due; None: no attempt is left.

    `backoffSeconds·2^(attempt−1)`, capped at `maxBackoffSeconds`."""
    if retry is None or attempt >= retry.attempts:
        return None
    seconds = min(retry.backoff_seconds * 2 ** (attempt - 1), retry.max_backoff_seconds)
    return timedelta(seconds=seconds)


def next_attempt(retry: Retry | None, key: str, failed_at: datetime) -> tuple[str, datetime] | None:
    """The key and due instant of the attempt after a failed run of `key`; None: no more."""
    attempt = attempt_of(key)
    delay = retry_delay(retry, attempt)
    return None if delay is None else (retry_key(key, attempt + 1), failed_at + delay)


def last_attempt(retry: Retry | None, key: str) -> bool:
    """Whether a run of `key` is its fire's last attempt: only that one counts for the breaker."""
    return retry is None or attempt_of(key) >= retry.attempts


# --- window, run count, jitter ----------------------------------------------------------


def in_window(window: ActiveWindow | None, at: datetime) -> bool:
    """Whether a fire for instant `at` is inside the window (`startAt` ≤ at < `endAt`)."""
    if window is None:
        return True
    if window.start_at is not None and at < window.start_at:
        return False
    return window.end_at is None or at < window.end_at


def runs_done(max_runs: int | None, ok_runs: int) -> bool:
    """Whether a trigger with `maxRuns` has run it out (runs that ended `ok`)."""
    return max_runs is not None and ok_runs >= max_runs


def jitter(trigger_id: str, slot: datetime, seconds: float) -> timedelta:
    """The delay of one cron slot in `[0, seconds)`, whole milliseconds, from a hash of the
    trigger's id and the slot: the same on every device and across restarts."""
    if seconds <= 0:
        return timedelta(0)
    digest = hashlib.blake2b(f"{trigger_id}\n{key_instant(slot)}".encode(), digest_size=8)
    fraction = int.from_bytes(digest.digest(), "big") / 2**64
    return timedelta(milliseconds=int(fraction * seconds * 1000))


# --- budget, quiet chat ---------------------------------------------------------------------


def over_budget(budget: Budget | None, starts: Sequence[datetime], now: datetime) -> bool:
    """Whether one more run at `now` would exceed the budget: `runs` already started within
    the `perSeconds` before `now`."""
    if budget is None:
        return False
    since = now - timedelta(seconds=budget.per_seconds)
    return sum(1 for at in starts if since < at <= now) >= budget.runs


def chat_active(quiet: QuietChat | None, person_wrote_at: datetime | None, now: datetime) -> bool:
    """Whether a person wrote in the quiet chat within its `seconds` before `now`."""
    if quiet is None or person_wrote_at is None:
        return False
    return now - person_wrote_at < timedelta(seconds=quiet.seconds)
