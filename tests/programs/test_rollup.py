import functools
import math
import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.vocab import RunStatus
from programs.rollup import (
    ALPHA,
    EMPTY,
    MAX_INDEX,
    InvalidStatus,
    Rollup,
    Sketch,
    add,
    conversation_started,
    from_dict,
    merge,
    merge_sketches,
    p50,
    p95,
    percentile,
    record,
    to_dict,
)

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
SEC = timedelta(seconds=1)


def build(*runs: tuple[str, float | None] | tuple[str, float | None, str]) -> Rollup:
    rollup = EMPTY
    for i, run in enumerate(runs):
        status, duration = run[0], run[1]
        reason = run[2] if len(run) > 2 else ""
        rollup = add(rollup, status, duration, T0 + i * SEC, reason=reason)
    return rollup


@pytest.mark.parametrize(
    ("runs", "expected"),
    [
        ([], {"runs": 0, "consecutive_failures": 0, "last_status": ""}),
        ([("ok", 10)], {"runs": 1, "ok": 1, "last_status": "ok"}),
        (
            [("error", 1), ("timeout", 60_000), ("crashed", 5)],
            {"runs": 3, "errors": 1, "timeouts": 1, "crashed": 1, "consecutive_failures": 3},
        ),
        ([("error", 1), ("error", 1), ("ok", 1)], {"consecutive_failures": 0, "ok": 1}),
        # not-run records count but neither break nor extend a failure streak
        (
            [("error", 1), ("skipped", None), ("rejected", None), ("error", 2)],
            {"runs": 4, "skipped": 1, "rejected": 1, "consecutive_failures": 2},
        ),
        (
            [("skipped", None, "overlap"), ("skipped", None, "breaker_open")],
            {"skipped": 2, "suppressed": 1, "last_status": "skipped"},
        ),
        ([("rejected", None, "queue_full")] * 3, {"rejected": 3, "runs": 3}),
    ],
)
def test_counts(runs: list, expected: dict) -> None:
    rollup = build(*runs)
    for field, value in expected.items():
        assert getattr(rollup, field) == value, field
    ran = rollup.ok + rollup.errors + rollup.timeouts + rollup.crashed
    assert rollup.runs == ran + rollup.rejected + rollup.skipped
    assert rollup.durations.count == sum(1 for r in runs if r[0] not in ("skipped", "rejected"))


def test_last_run_ignores_late_older_records() -> None:
    rollup = add(EMPTY, "ok", 5, T0 + 10 * SEC)
    rollup = add(rollup, "error", 5, T0)
    assert (rollup.last_run_at, rollup.last_status) == (T0 + 10 * SEC, "ok")
    assert rollup.errors == 1


def test_unknown_status_refused() -> None:
    with pytest.raises(InvalidStatus, match="'melted' is not one of ok, error"):
        add(EMPTY, "melted", 1, T0)


def test_accepts_enum_members() -> None:
    import enum

    class Status(str, enum.Enum):  # noqa: UP042 -- the value must be used, not str()
        TIMEOUT = "timeout"

    assert add(EMPTY, Status.TIMEOUT, 1, T0).timeouts == 1


def test_conversation_starts() -> None:
    rollup = conversation_started(conversation_started(EMPTY, T0), T0 + SEC)
    assert (rollup.starts, rollup.runs, rollup.last_run_at) == (2, 0, T0 + SEC)


def exact(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


@functools.cache
def distributions() -> dict[str, list[float]]:
    rng = random.Random(7)
    return {
        "uniform": [rng.uniform(1, 10_000) for _ in range(5000)],
        "lognormal": [rng.lognormvariate(5, 1.5) for _ in range(5000)],
        "exponential": [rng.expovariate(1 / 300) + 1 for _ in range(5000)],
        "bimodal": [rng.choice((rng.gauss(20, 2), rng.gauss(30_000, 500))) for _ in range(5000)],
        "constant": [1234.0] * 100,
        "one": [42.0],
        "two": [10.0, 1000.0],
        "sub_ms": [0.2, 0.4, 0.9],
    }


@functools.cache
def sketched(name: str) -> tuple[list[float], Sketch]:
    values = distributions()[name]
    sketch = Sketch()
    for v in values:
        sketch = record(sketch, v)
    return values, sketch


@pytest.mark.parametrize("name", list(distributions()))
@pytest.mark.parametrize("q", [0.01, 0.5, 0.9, 0.95, 0.99, 1.0])
def test_percentile_accuracy(name: str, q: float) -> None:
    values, sketch = sketched(name)
    truth = exact(values, q)
    got = percentile(sketch, q)
    assert got is not None
    if truth >= 1:
        assert abs(got - truth) <= ALPHA * truth + 1e-9, (got, truth)
    else:  # under 1 ms: clamped to the observed range
        assert min(values) <= got <= max(values)


def test_p50_p95_of_a_rollup() -> None:
    rollup = build(*[("ok", float(d)) for d in range(1, 101)])
    assert p50(rollup) == pytest.approx(50, rel=ALPHA)
    assert p95(rollup) == pytest.approx(95, rel=ALPHA)
    assert p50(EMPTY) is None


def test_sketch_is_bounded() -> None:
    sketch = Sketch()
    for exp in range(-3, 40):
        for mantissa in (1.0, 1.3, 1.7, 2.9, 5.5, 9.9):
            sketch = record(sketch, mantissa * 10.0**exp)
    assert len(sketch.buckets) <= MAX_INDEX + 1
    assert max(sketch.buckets) == MAX_INDEX
    assert percentile(sketch, 1.0) == sketch.max_ms


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_sketch_ignores_non_finite(bad: float) -> None:
    assert record(Sketch(), bad) == Sketch()


def test_negative_duration_counts_as_zero() -> None:
    sketch = record(Sketch(), -5)
    assert (sketch.count, sketch.min_ms, percentile(sketch, 0.5)) == (1, 0.0, 0.0)


def test_merge_equals_adding_everything() -> None:
    values = distributions()["lognormal"]
    whole, left, right = Sketch(), Sketch(), Sketch()
    for i, v in enumerate(values):
        whole = record(whole, v)
        if i % 3:
            left = record(left, v)
        else:
            right = record(right, v)
    merged = merge_sketches(left, right)
    assert merged.buckets == whole.buckets
    assert (merged.count, merged.min_ms, merged.max_ms) == (whole.count, whole.min_ms, whole.max_ms)
    assert merged.sum_ms == pytest.approx(whole.sum_ms)
    assert merge_sketches(Sketch(), left) is left


def test_merge_rollups() -> None:
    a = build(("ok", 10), ("error", 20))
    b = add(add(EMPTY, "ok", 30, T0 - SEC), "skipped", None, T0 + 5 * SEC, reason="breaker_open")
    m = merge(a, b)
    assert (m.runs, m.ok, m.errors, m.skipped, m.suppressed) == (4, 2, 1, 1, 1)
    assert (m.last_status, m.last_run_at) == ("skipped", T0 + 5 * SEC)
    assert m.consecutive_failures == b.consecutive_failures
    assert m.durations.count == 3
    assert merge(EMPTY, a) == a


def test_round_trips_through_a_dict() -> None:
    rollup = conversation_started(build(("ok", 12.5), ("error", 900), ("skipped", None)), T0)
    raw = to_dict(rollup)
    assert raw["consecutiveFailures"] == 1
    assert raw["lastRunAt"] == "2026-12-01T09:00:02.000Z"
    assert set(raw["durations"]["buckets"]) <= {str(i) for i in range(MAX_INDEX + 1)}
    assert raw["p50Ms"] == pytest.approx(12.5, rel=ALPHA)
    assert raw["p95Ms"] == pytest.approx(900, rel=ALPHA)
    assert from_dict(raw) == rollup


@pytest.mark.parametrize(
    "raw",
    [
        None,
        [],
        "rollup",
        {"runs": -1},
        {"runs": "many"},
        {"durations": {"buckets": {"x": 1}}},
        {"durations": {"buckets": {"1": -1}}},
        {"lastRunAt": "yesterday"},
    ],
)
def test_garbled_dict_decodes_empty(raw: object) -> None:
    assert from_dict(raw) == EMPTY


def test_unknown_fields_are_ignored() -> None:
    assert from_dict({"runs": 3, "addedLater": True}) == Rollup(runs=3)


def test_counts_every_run_status() -> None:
    rollup = EMPTY
    for status in RunStatus:
        rollup = add(rollup, status, 1.0, T0)
    assert rollup.runs == len(RunStatus)
    assert rollup.last_status in {s.value for s in RunStatus}


def test_a_cancelled_run_counts_apart_and_leaves_the_failure_streak():
    at = datetime(2026, 12, 1, tzinfo=UTC)
    failing = add(add(EMPTY, RunStatus.ERROR, 5.0, at), RunStatus.ERROR, 5.0, at)
    after = add(failing, RunStatus.CANCELLED, 5.0, at + timedelta(seconds=1))
    assert after.cancelled == 1 and after.runs == 3
    assert after.consecutive_failures == 2  # neither a success nor a failure


def test_recent_starts_keep_the_newest_for_a_budget():
    at = datetime(2026, 12, 1, tzinfo=UTC)
    roll = EMPTY
    for n in range(5):
        roll = add(roll, RunStatus.OK, 1.0, at + timedelta(seconds=n), keep_starts=3)
    roll = add(roll, RunStatus.SKIPPED, None, at + timedelta(seconds=9), keep_starts=3)
    assert roll.recent_starts == tuple(at + timedelta(seconds=n) for n in (2, 3, 4))
    assert add(roll, RunStatus.OK, 1.0, at).recent_starts == ()  # no budget: nothing kept
    merged = merge(roll, add(EMPTY, RunStatus.OK, 1.0, at + timedelta(seconds=7), keep_starts=3))
    assert merged.recent_starts[-1] == at + timedelta(seconds=7)


@given(st.lists(st.datetimes(timezones=st.just(UTC)), min_size=1, max_size=30), st.integers(0, 10))
def test_recent_starts_are_always_the_newest_a_budget_keeps(starts, keep):
    roll = EMPTY
    for at in starts:
        roll = add(roll, RunStatus.OK, 1.0, at, keep_starts=keep)
    kept = roll.recent_starts
    assert len(kept) == min(keep, len(starts))
    assert list(kept) == sorted(starts)[len(starts) - len(kept) :]
