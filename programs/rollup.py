"""The per-trigger rollup: counts of runs by status and a bounded duration sketch.

Owns the `rollup` stamp on a trigger record (SPEC "Runs"): counts by status, consecutive
failures, the last run, p50/p95 durations from `Sketch` (a log-bucketed histogram, the
DDSketch scheme: within 2 % of the exact sample, at most 520 buckets; see
docs/architecture.md, "Module notes"), and chat-watch's conversation starts. Pure: `add`
and friends return a new rollup; no clock, no I/O.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any

import msgspec
from msgspec.structs import replace

from core.vocab import FAILED, RAN, RunReason, RunStatus
from core.wire import wire_builtins

ALPHA = 0.02
GAMMA = (1 + ALPHA) / (1 - ALPHA)
_LOG_GAMMA = math.log(GAMMA)
MAX_INDEX = math.ceil(math.log(1e9) / _LOG_GAMMA)  # 1e9 ms ≈ 11.6 days

MAX_STARTS = 1000  # `recentStarts` of a merge: a budget counts no more (triggers.policies)

# the rollup's counter of each run status
COUNTER: dict[str, str] = {
    RunStatus.OK: "ok",
    RunStatus.ERROR: "errors",
    RunStatus.TIMEOUT: "timeouts",
    RunStatus.CRASHED: "crashed",
    RunStatus.REJECTED: "rejected",
    RunStatus.SKIPPED: "skipped",
    RunStatus.CANCELLED: "cancelled",
}

Count = Annotated[int, msgspec.Meta(ge=0)]


class InvalidStatus(ValueError):
    """A run status the rollup does not know."""


class Sketch(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    buckets: dict[int, Count] = {}
    count: Count = 0
    min_ms: float = 0.0
    max_ms: float = 0.0
    sum_ms: float = 0.0


class Rollup(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    runs: Count = 0  # every run record: ok + errors + timeouts + crashed + rejected + skipped
    ok: Count = 0
    errors: Count = 0
    timeouts: Count = 0
    crashed: Count = 0
    rejected: Count = 0
    skipped: Count = 0
    cancelled: Count = 0  # stopped by a newer fire (`overlap: restart`)
    suppressed: Count = 0  # the skipped ones refused by an open breaker
    consecutive_failures: Count = 0
    last_run_at: Annotated[datetime, msgspec.Meta(tz=True)] | None = None
    last_status: str = ""
    starts: Count = 0  # chat-watch: conversation starts
    durations: Sketch = Sketch()
    recent_starts: tuple[Annotated[datetime, msgspec.Meta(tz=True)], ...] = ()
    """The newest run starts, as many as the record's `budget` counts (SPEC "Trigger policies")."""


EMPTY = Rollup()


def bucket_of(duration_ms: float) -> int:
    if duration_ms <= 1.0:
        return 0
    return min(math.ceil(math.log(duration_ms) / _LOG_GAMMA), MAX_INDEX)


def bucket_value(index: int) -> float:
    return 2 * GAMMA**index / (GAMMA + 1)


def record(sketch: Sketch, duration_ms: float) -> Sketch:
    """The sketch with one more duration."""
    value = float(duration_ms)
    if not math.isfinite(value):
        return sketch
    value = max(value, 0.0)
    index = bucket_of(value)
    buckets = {**sketch.buckets, index: sketch.buckets.get(index, 0) + 1}
    first = sketch.count == 0
    return Sketch(
        buckets=buckets,
        count=sketch.count + 1,
        min_ms=value if first else min(sketch.min_ms, value),
        max_ms=value if first else max(sketch.max_ms, value),
        sum_ms=sketch.sum_ms + value,
    )


def percentile(sketch: Sketch, q: float) -> float | None:
    """The nearest-rank `q` quantile (0 < q ≤ 1) within 2 %; None for an empty sketch."""
    if sketch.count == 0:
        return None
    rank = min(max(1, math.ceil(q * sketch.count)), sketch.count)
    seen = 0
    for index in sorted(sketch.buckets):
        seen += sketch.buckets[index]
        if seen >= rank and index < MAX_INDEX:
            return min(max(bucket_value(index), sketch.min_ms), sketch.max_ms)
    return sketch.max_ms


def merge_sketches(a: Sketch, b: Sketch) -> Sketch:
    if a.count == 0 or b.count == 0:
        return b if a.count == 0 else a
    buckets = dict(a.buckets)
    for index, n in b.buckets.items():
        buckets[index] = buckets.get(index, 0) + n
    return Sketch(
        buckets=buckets,
        count=a.count + b.count,
        min_ms=min(a.min_ms, b.min_ms),
        max_ms=max(a.max_ms, b.max_ms),
        sum_ms=a.sum_ms + b.sum_ms,
    )


def add(
    rollup: Rollup,
    status: object,
    duration_ms: float | None,
    at: datetime,
    *,
    reason: str = "",
    keep_starts: int = 0,
) -> Rollup:
    """The rollup with one more run record (`status` a `RunStatus` or its str value); a run
    that ran adds its start `at` to `recentStarts`, which keeps the newest `keep_starts`."""
    value = str(getattr(status, "value", status))
    field = COUNTER.get(value)
    if field is None:
        raise InvalidStatus(f"status {value!r} is not one of {', '.join(COUNTER)}")
    changes: dict[str, Any] = {"runs": rollup.runs + 1, field: getattr(rollup, field) + 1}
    if value == RunStatus.SKIPPED and reason == RunReason.BREAKER_OPEN:
        changes["suppressed"] = rollup.suppressed + 1
    if value in RAN:
        if value != RunStatus.CANCELLED:  # stopped, neither a success nor a failure
            failed = value in FAILED
            changes["consecutive_failures"] = rollup.consecutive_failures + 1 if failed else 0
        kept = sorted((*rollup.recent_starts, at))[-keep_starts:] if keep_starts > 0 else ()
        changes["recent_starts"] = tuple(kept)
        if duration_ms is not None:
            changes["durations"] = record(rollup.durations, duration_ms)
    return replace(rollup, **changes, **_last(rollup, at, value))


def conversation_started(rollup: Rollup, at: datetime, status: str = RunStatus.OK) -> Rollup:
    """chat-watch: one more conversation start (turns are not run records), ended `status`."""
    return replace(rollup, starts=rollup.starts + 1, **_last(rollup, at, status))


def _last(rollup: Rollup, at: datetime, status: str) -> dict[str, Any]:
    if rollup.last_run_at is not None and at < rollup.last_run_at:
        return {}  # an older record arriving late does not become the last run
    return {"last_run_at": at, "last_status": status}


def merge(a: Rollup, b: Rollup) -> Rollup:
    """Two rollups of one trigger as one; the later last run wins the `last*` fields."""
    counts = {f: getattr(a, f) + getattr(b, f) for f in _COUNTERS}
    later = b if _later(b, a) else a
    return Rollup(
        **counts,
        consecutive_failures=later.consecutive_failures,
        last_run_at=later.last_run_at,
        last_status=later.last_status,
        durations=merge_sketches(a.durations, b.durations),
        recent_starts=tuple(sorted({*a.recent_starts, *b.recent_starts}))[-MAX_STARTS:],
    )


_COUNTERS = ("runs", *COUNTER.values(), "suppressed", "starts")


def _later(x: Rollup, y: Rollup) -> bool:
    if x.last_run_at is None:
        return False
    return y.last_run_at is None or x.last_run_at >= y.last_run_at


def p50(rollup: Rollup) -> float | None:
    return percentile(rollup.durations, 0.50)


def p95(rollup: Rollup) -> float | None:
    return percentile(rollup.durations, 0.95)


def to_dict(rollup: Rollup) -> dict[str, Any]:
    """The `rollup` stamp; `p50Ms`/`p95Ms` are added for readers without this module."""
    raw: dict[str, Any] = wire_builtins(rollup)
    raw["p50Ms"], raw["p95Ms"] = _rounded(p50(rollup)), _rounded(p95(rollup))
    return raw


def from_dict(raw: object) -> Rollup:
    """The rollup a stamp holds; missing or garbled → an empty rollup (never raises)."""
    if not isinstance(raw, dict):
        return EMPTY
    try:
        return msgspec.convert(raw, Rollup, str_keys=True)
    except (msgspec.ValidationError, ValueError, TypeError):
        return EMPTY


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
