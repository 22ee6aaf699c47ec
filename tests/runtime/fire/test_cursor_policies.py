"""The policies in the entry math (runtime.fire.cursors): window, run count, jitter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from runtime.fire.cursors import Entry, add_attempt, add_bridge, arm, restart, retake_backfill, take
from triggers import policies, schedule
from triggers.records import CronTrigger, OnceTrigger, load

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


def record(expr: str = "* * * * *", kind: str = "cron", **fields: Any) -> CronTrigger:
    spec = {"expr": expr} if kind == "cron" else {"at": (T0 + 5 * MIN).isoformat()}
    raw = {"id": "trg_p", "kind": kind, "program": "p@v1", "spec": spec}
    loaded = load({**raw, "activeSince": "2026-12-01T08:00:00Z", **fields})
    assert isinstance(loaded, CronTrigger | OnceTrigger), loaded
    return loaded  # type: ignore[return-value]


def walk(entry: Entry, until: datetime, step: timedelta = timedelta(seconds=1)) -> list[Any]:
    """Every fire taken by waking each `step` until `until`."""
    fires: list[Any] = []
    now = T0
    while now <= until:
        fires += take(entry, now)
        now += step
    return fires


def test_no_slot_outside_the_window_fires_and_the_entry_ends_with_it():
    window = {"startAt": "2026-12-01T09:03:00Z", "endAt": "2026-12-01T09:06:00Z"}
    entry = arm(record(window=window), T0, None, T0)
    assert entry.next_at == T0 + 3 * MIN  # not 09:01: the window opens at 09:03
    fires = walk(entry, T0 + 10 * MIN)
    assert [due for _, due, _ in fires] == [T0 + 3 * MIN, T0 + 4 * MIN, T0 + 5 * MIN]
    assert entry.next_at is None  # the window has closed: never again


def test_a_bridge_keeps_to_the_window():
    window = {"endAt": "2026-12-01T09:02:00Z"}
    entry = arm(record(window=window), T0 + 5 * MIN, None, T0 + 5 * MIN)
    assert add_bridge(entry, T0 - timedelta(seconds=1)) == 2  # 09:00, 09:01; not 09:02 …
    assert [due for _, due, _ in take(entry, T0 + 5 * MIN)] == [T0, T0 + MIN]


def test_a_trigger_that_ran_its_max_runs_is_not_armed_to_fire():
    done = record(maxRuns=3, rollup={"ok": 3, "runs": 5})
    assert arm(done, T0, None, T0).next_at is None
    assert take(arm(done, T0, None, T0), T0 + 5 * MIN) == []
    left = record(maxRuns=3, rollup={"ok": 2, "runs": 5})
    assert arm(left, T0, None, T0).next_at == T0 + MIN


def test_a_once_outside_its_window_never_fires():
    entry = arm(record(kind="once", window={"endAt": "2026-12-01T09:04:00Z"}), T0, None, T0)
    assert entry.next_at is None
    assert walk(entry, T0 + 10 * MIN, MIN) == []


def test_a_jittered_slot_fires_at_its_jitter_keyed_by_its_slot():
    rec = record(jitterSeconds=30)
    entry = arm(rec, T0, None, T0)
    slot = T0 + MIN
    due = slot + policies.jitter(rec.id, slot, 30)
    assert entry.next_at == due
    assert take(entry, due - timedelta(milliseconds=1)) == []  # the slot passed, its jitter not
    assert take(entry, due) == [(schedule.fire_key_cron(slot), due, False)]
    fires = walk(entry, T0 + 30 * MIN)
    slots = [T0 + n * MIN for n in range(2, 30)]
    assert [k for k, _, _ in fires] == [schedule.fire_key_cron(s) for s in slots]  # each once
    assert all(
        timedelta(0) <= d - s < timedelta(seconds=30)
        for (_, d, _), s in zip(fires, slots, strict=True)
    )


def test_a_late_wake_loses_no_jittered_slot_within_its_tolerance():
    rec = record(jitterSeconds=50)
    entry = arm(rec, T0, None, T0)
    fires = take(entry, T0 + MIN + timedelta(seconds=75))  # 25 s past the latest jitter
    assert fires[0][0] == schedule.fire_key_cron(T0 + MIN)  # counted from its jittered instant


def test_a_backfill_request_is_queued_once_and_an_old_one_not_at_all():
    asked = {"id": "bf_1", "keys": ["2026-12-01T08:30:00Z", "2026-12-01T08:40:00Z"]}
    fresh = record(backfill={**asked, "requestedAt": "2026-12-01T08:59:00Z"})
    entry = arm(fresh, T0, None, T0)
    fires = take(entry, T0)
    assert [(k, catchup) for k, _, catchup in fires] == [
        ("2026-12-01T08:30:00.000Z", True),
        ("2026-12-01T08:40:00.000Z", True),
    ]
    again = arm(fresh, T0 + MIN, entry, T0)  # re-armed with the same request: not again
    assert take(again, T0 + MIN) == [(schedule.fire_key_cron(T0 + MIN), T0 + MIN, False)]
    old = record(backfill={**asked, "id": "bf_2", "requestedAt": "2026-12-01T07:00:00Z"})
    assert take(arm(old, T0, None, T0), T0) == []  # a device starting hours later


def test_a_backfill_is_asked_again_at_a_takeover_and_after_a_sleep():
    """Slots taken while the device could not act were dropped unrun, a sleep clears the
    bridge: the request is queued again (claims drop the slots that ran)."""
    asked = {"id": "bf_1", "keys": ["2026-12-01T08:30:00Z"], "requestedAt": "2026-12-01T08:59:00Z"}
    entry = arm(record(backfill=asked), T0, None, T0)
    assert [k for k, _, _ in take(entry, T0)] == ["2026-12-01T08:30:00.000Z"]
    assert retake_backfill(entry, T0 + MIN) == 1  # the takeover's bridge
    assert entry.next_at == datetime(2026, 12, 1, 8, 30, tzinfo=UTC)
    restart(entry, T0 + 2 * MIN)  # a sleep: the bridge goes, the user's request stays
    assert [k for k, _, c in take(entry, T0 + 2 * MIN) if c] == ["2026-12-01T08:30:00.000Z"]
    late = T0 + 2 * timedelta(hours=1)
    assert retake_backfill(entry, late) == 0  # older than an hour: not taken again


def test_a_stamped_retry_due_after_the_bridge_start_is_run_and_one_from_before_is_not():
    stamped = {"key": "2026-12-01T08:59:00Z#2", "dueAt": "2026-12-01T09:00:30Z"}
    rec = record(nextAttempt=stamped)
    entry = arm(rec, T0, None, T0)  # armed at 09:00: the retry is due after it
    assert entry.next_at == T0 + timedelta(seconds=30)
    assert take(entry, T0 + timedelta(seconds=30)) == [
        ("2026-12-01T08:59:00Z#2", T0 + timedelta(seconds=30), True)
    ]
    assert entry.attempt is None and entry.next_at == T0 + MIN  # taken once
    late = arm(rec, T0 + MIN, None, T0 + MIN)  # armed after it came due: not this device's
    assert not add_attempt(late, T0 + MIN) and late.attempt is None
    bridged = arm(rec, T0 + MIN, None, T0 + MIN)
    assert add_attempt(bridged, T0)  # a takeover whose bridge starts before it came due
    assert take(bridged, T0 + MIN)[0] == (
        "2026-12-01T08:59:00Z#2",
        T0 + timedelta(seconds=30),
        True,
    )
