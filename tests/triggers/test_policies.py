"""The trigger policies as pure rules (triggers.policies), and their fields on records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from triggers import backfill, policies
from triggers.policies import ActiveWindow, Budget, QuietChat, Retry
from triggers.records import InvalidRecord, load, validate_input

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
slots = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2090, 1, 1), timezones=st.just(UTC)
)


# --- retry ----------------------------------------------------------------------------------


def test_retry_keys_name_their_attempt_and_their_fire():
    key = "2026-12-01T08:00:00Z"
    assert policies.retry_key(key, 2) == key + "#2"
    assert policies.retry_key(key + "#2", 3) == key + "#3"  # a retry of a retry: one mark
    assert policies.attempt_of(key) == 1
    assert policies.attempt_of(key + "#3") == 3
    assert policies.base_key(key + "#3") == key
    assert policies.base_key("msg_#x") == "msg_#x"  # a mark not followed by digits is no retry
    assert policies.attempt_of("#4") == 1  # nothing before the mark: a key of its own


def test_retry_backoff_doubles_and_is_capped():
    retry = Retry(attempts=5, backoff_seconds=10, max_backoff_seconds=30)
    delays = [policies.retry_delay(retry, k) for k in range(1, 6)]
    assert delays == [timedelta(seconds=s) for s in (10, 20, 30, 30)] + [None]


def test_no_retry_policy_means_one_attempt_which_is_the_last():
    assert policies.retry_delay(None, 1) is None
    assert policies.retry_delay(Retry(), 1) is None  # attempts default 1
    assert policies.last_attempt(None, "k")
    retry = Retry(attempts=3)
    assert not policies.last_attempt(retry, "k")
    assert not policies.last_attempt(retry, "k#2")
    assert policies.last_attempt(retry, "k#3")


@given(st.integers(1, 10), st.floats(0, 86_400), st.floats(0, 86_400), st.integers(1, 10))
def test_retry_delay_is_bounded_by_the_cap(attempts, backoff, cap, k):
    delay = policies.retry_delay(
        Retry(attempts=attempts, backoff_seconds=backoff, max_backoff_seconds=cap), k
    )
    if k >= attempts:
        assert delay is None
    else:
        assert delay is not None and timedelta(0) <= delay <= timedelta(seconds=cap)


# --- window, run count ------------------------------------------------------------------------


def test_window_holds_start_and_excludes_end():
    window = ActiveWindow(start_at=T0, end_at=T0 + timedelta(hours=1))
    assert not policies.in_window(window, T0 - timedelta(seconds=1))
    assert policies.in_window(window, T0)
    assert policies.in_window(window, T0 + timedelta(minutes=59))
    assert not policies.in_window(window, T0 + timedelta(hours=1))
    assert policies.in_window(None, T0)
    assert policies.in_window(ActiveWindow(end_at=T0), T0 - timedelta(days=999))


def test_a_window_that_ends_before_it_starts_is_refused():
    with pytest.raises(msgspec.ValidationError, match="endAt"):
        msgspec.convert(
            {"startAt": "2026-12-02T00:00:00Z", "endAt": "2026-12-01T00:00:00Z"}, ActiveWindow
        )


def test_runs_done_counts_ok_runs_only_when_max_runs_is_set():
    assert not policies.runs_done(None, 10**6)
    assert not policies.runs_done(3, 2)
    assert policies.runs_done(3, 3)


# --- jitter ------------------------------------------------------------------------------------


@given(st.text(min_size=1, max_size=40), slots, st.floats(0.001, 3600))
def test_jitter_is_in_range_and_stable(tid, slot, seconds):
    j = policies.jitter(tid, slot, seconds)
    assert timedelta(0) <= j < timedelta(seconds=seconds)
    assert j == policies.jitter(tid, slot, seconds)  # a pure function: every device agrees


def test_jitter_spreads_triggers_and_slots():
    spread = {policies.jitter(f"trg_{n}", T0, 60) for n in range(100)}
    assert len(spread) > 90  # 100 triggers do not fire at one second
    per_slot = {policies.jitter("trg_a", T0 + timedelta(minutes=n), 60) for n in range(100)}
    assert len(per_slot) > 90
    assert policies.jitter("trg_a", T0, 0) == timedelta(0)


# --- budget, quiet chat ---------------------------------------------------------------------------


def test_budget_counts_the_starts_within_its_period():
    budget = Budget(runs=3, per_seconds=60)
    starts = [T0, T0 + timedelta(seconds=10), T0 + timedelta(seconds=20)]
    assert policies.over_budget(budget, starts, T0 + timedelta(seconds=30))
    assert not policies.over_budget(budget, starts, T0 + timedelta(seconds=60))  # T0 left
    assert not policies.over_budget(budget, starts[:2], T0 + timedelta(seconds=30))
    assert not policies.over_budget(None, starts, T0)


def test_quiet_chat_holds_a_fire_while_a_person_writes():
    quiet = QuietChat(object_id="general", seconds=120)
    wrote = T0
    assert policies.chat_active(quiet, wrote, T0 + timedelta(seconds=119))
    assert not policies.chat_active(quiet, wrote, T0 + timedelta(seconds=120))
    assert not policies.chat_active(quiet, None, T0)
    assert not policies.chat_active(None, wrote, T0)


# --- the fields on records ------------------------------------------------------------------------

BASE = {"kind": "cron", "name": "n", "spec": {"expr": "* * * * *"}, "program": "p@v1"}


def test_every_policy_field_round_trips_through_a_record():
    given_ = {
        **BASE,
        "retry": {"attempts": 3, "backoffSeconds": 5},
        "pausedUntil": "2026-12-01T09:00:00Z",
        "window": {"startAt": "2026-12-01T00:00:00Z", "endAt": "2026-12-31T00:00:00Z"},
        "maxRuns": 5,
        "jitterSeconds": 30,
        "budget": {"runs": 3, "perSeconds": 60},
        "quietChat": {"objectId": "general", "seconds": 120},
    }
    validate_input(given_)  # user input takes every field
    stored = load({**given_, "id": "trg_1", "activeSince": "2026-12-01T08:00:00Z"})
    assert stored.retry == Retry(attempts=3, backoff_seconds=5)  # type: ignore[union-attr]
    assert stored.max_runs == 5 and stored.jitter_seconds == 30  # type: ignore[union-attr]
    assert stored.budget == Budget(runs=3, per_seconds=60)  # type: ignore[union-attr]
    assert stored.quiet_chat == QuietChat(object_id="general", seconds=120)  # type: ignore[union-attr]
    assert stored.paused_until == T0 + timedelta(hours=1)  # type: ignore[union-attr]
    assert stored.fires_from == T0 + timedelta(hours=1)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("field", "value", "path"),
    [
        ("retry", {"attempts": 11}, "$.retry.attempts"),
        ("retry", {"attempts": 0}, "$.retry.attempts"),
        ("retry", {"tries": 2}, "$.retry"),
        ("maxRuns", 0, "$.maxRuns"),
        ("jitterSeconds", 3601, "$.jitterSeconds"),
        ("jitterSeconds", -1, "$.jitterSeconds"),
        ("budget", {"runs": 0, "perSeconds": 60}, "$.budget.runs"),
        ("budget", {"runs": 1, "perSeconds": 0}, "$.budget.perSeconds"),
        ("quietChat", {"objectId": "", "seconds": 60}, "$.quietChat.objectId"),
        (
            "window",
            {"startAt": "2026-12-02T00:00:00Z", "endAt": "2026-12-01T00:00:00Z"},
            "$.window",
        ),
        ("pausedUntil", "tomorrow", "$.pausedUntil"),
    ],
)
def test_bad_policy_values_are_refused_naming_the_field(field, value, path):
    with pytest.raises(InvalidRecord) as caught:
        validate_input({**BASE, field: value})
    assert f"`{path}" in str(caught.value)


# --- backfill -------------------------------------------------------------------------------------


LATER = T0 + timedelta(days=30)  # `now` of a backfill: its ranges have passed


def _cron(**extra):
    raw = {**BASE, "id": "trg_b", "activeSince": "2026-12-01T00:00:00Z", **extra}
    return load({**raw, "spec": {"expr": "0 * * * *"}})


def test_backfill_runs_the_slots_of_the_range_that_never_fired():
    start, end = T0, T0 + timedelta(hours=9)
    fired = {"2026-12-01T10:00:00.000Z", "2026-12-01T12:00:00.000Z"}
    chosen = backfill.slots(_cron(), start, end, fired, now=LATER)
    assert len(chosen) == 8 and chosen[0] == T0 and chosen[-1] == end
    assert T0 + timedelta(hours=2) not in chosen


def test_backfill_keeps_to_the_window():
    window = {"startAt": "2026-12-01T09:00:00Z", "endAt": "2026-12-01T11:00:00Z"}
    chosen = backfill.slots(_cron(window=window), T0, T0 + timedelta(hours=5), set(), now=LATER)
    assert chosen == [T0 + timedelta(hours=1), T0 + timedelta(hours=2)]


@pytest.mark.parametrize(
    ("start", "end", "field"),
    [
        (T0, T0 + timedelta(hours=100), "to"),  # 101 slots
        (T0, T0 - timedelta(hours=1), "to"),  # ends before it starts
        (T0 - timedelta(days=1), T0, "from"),  # before activeSince
        (T0, LATER + timedelta(hours=1), "to"),  # reaches into what is still to come
    ],
)
def test_backfill_refuses_naming_the_field(start, end, field):
    with pytest.raises(backfill.BackfillRefused) as caught:
        backfill.slots(_cron(), start, end, set(), now=LATER)
    assert caught.value.field == field


def test_backfill_of_a_once_or_event_trigger_is_refused():
    once = load({**BASE, "kind": "once", "id": "trg_o", "spec": {"at": "2026-12-01T09:00:00Z"}})
    with pytest.raises(backfill.BackfillRefused, match="only a cron"):
        backfill.slots(once, T0, T0, set(), now=LATER)
