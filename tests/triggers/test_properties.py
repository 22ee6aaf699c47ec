"""Properties of record decoding, bounds and schedule math, over generated input (hypothesis).

- decoding never raises: a stored record loads or is salvaged; user input is accepted
  or refused with `InvalidRecord`, whatever the values;
- an accepted record's schedule can be computed: its fire times exist or are None,
  never an exception, and cron fire times strictly increase;
- the bounds hold: every accepted `once` lies in 1970 … 9999 UTC with a grace of at
  most 7 days, every accepted `args` integer fits in 64 bits.

Example counts are bounded (see `settings` below) so the suite stays fast on 2 cores.
"""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triggers import schedule
from triggers.bounds import AT_MAX, AT_MIN, INT64_MAX, INT64_MIN, MAX_GRACE_SECONDS, check_args
from triggers.records import CronTrigger, InvalidRecord, OnceTrigger, Salvaged, load, validate_input

BOUNDED = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "Pacific/Chatham",
    "America/Sao_Paulo",
    "Africa/Casablanca",
]

# --- generators ------------------------------------------------------------------------

anything = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def field(n: int, low: int, high: int) -> st.SearchStrategy[str]:
    """One cron field: `*`, `*/k`, `a`, `a-b`, `a,b`, `a-b/k`."""
    value = st.integers(min_value=low, max_value=high)
    return st.one_of(
        st.just("*"),
        st.integers(min_value=1, max_value=max(1, high)).map(lambda k: f"*/{k}"),
        value.map(str),
        st.tuples(value, value).map(lambda ab: f"{min(ab)}-{max(ab)}"),
        st.tuples(value, value).map(lambda ab: f"{ab[0]},{ab[1]}"),
        st.tuples(value, value, st.integers(1, 9)).map(
            lambda t: f"{min(t[:2])}-{max(t[:2])}/{t[2]}"
        ),
    )


cron_exprs = st.tuples(
    field(0, 0, 59), field(1, 0, 23), field(2, 1, 31), field(3, 1, 12), field(4, 0, 6)
).map(" ".join)
instants = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)
graces = st.one_of(st.none(), st.floats(min_value=-10, max_value=1e9), st.integers(-5, 10**7))
ats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e20, max_value=1e20),
    st.integers(min_value=-(2**66), max_value=2**66),
    st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
    ).flatmap(
        lambda d: st.integers(-14 * 60, 14 * 60).map(
            lambda m: d.replace(tzinfo=None).isoformat() + _offset(m)
        )
    ),
    st.text(max_size=30),
)


def _offset(minutes: int) -> str:
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _spec(kind: str, draw: Any) -> dict[str, Any]:
    if kind == "cron":
        spec = {"expr": draw(cron_exprs), "tz": draw(st.sampled_from(ZONES))}
        if draw(st.booleans()):
            spec["catchup"] = draw(st.sampled_from(["none", "latest", "all"]))
    elif kind == "once":
        spec = {"at": draw(ats)}
    else:
        spec = {"dataset": draw(st.sampled_from(["chat_messages", "x"])), "objectId": "c"}
    grace = draw(graces)
    if grace is not None and kind != "event":
        spec["graceSeconds"] = grace
    return spec


@st.composite
def records(draw: Any) -> dict[str, Any]:
    """Record-shaped dicts: the right fields with values from anywhere, now and then garbage."""
    kind = draw(st.sampled_from(["cron", "once", "event", "webhook"]))
    record: dict[str, Any] = {"kind": kind, "program": draw(st.sampled_from(["p@v1", "Bad", ""]))}
    record["spec"] = _spec(kind, draw) if draw(st.integers(0, 9)) else draw(anything)
    if draw(st.booleans()):
        record["args"] = draw(st.dictionaries(st.text(max_size=5), anything, max_size=3))
    if draw(st.integers(0, 4)) == 0:
        record[draw(st.sampled_from(["enabled", "owner", "limits", "name"]))] = draw(anything)
    return record


# --- properties --------------------------------------------------------------------------


@BOUNDED
@given(records())
def test_decoding_never_raises(raw: dict[str, Any]) -> None:
    loaded = load({**raw, "id": "trg_p"})
    assert isinstance(loaded, CronTrigger | OnceTrigger | Salvaged) or loaded.kind == "event"
    try:
        validate_input(raw)
    except InvalidRecord as exc:
        assert str(exc)  # a refusal always says why


@BOUNDED
@given(records(), instants)
def test_every_accepted_record_can_be_scheduled(raw: dict[str, Any], now: datetime) -> None:
    loaded = load({**raw, "id": "trg_p"})
    if isinstance(loaded, CronTrigger):
        spec = loaded.spec
        schedule.tolerance(spec)
        cursor = schedule.arm_cursor(spec, now)
        schedule.due(spec, cursor, now + timedelta(minutes=5))
        schedule.next_fire(spec, now)
        schedule.upcoming(spec, now, 3)
    elif isinstance(loaded, OnceTrigger):
        at = loaded.spec.at_utc
        assert AT_MIN <= at <= AT_MAX
        assert 0 <= loaded.spec.grace_seconds <= MAX_GRACE_SECONDS
        for t in (now, at, AT_MAX):
            schedule.once_due(loaded.spec, t, None)
        schedule.fire_key_once(loaded.spec)
        schedule.upcoming(loaded.spec, now, 2)


@BOUNDED
@given(cron_exprs, st.sampled_from(ZONES), instants)
def test_cron_fire_times_strictly_increase(expr: str, tz: str, start: datetime) -> None:
    loaded = load({"id": "t", "kind": "cron", "program": "p@v1", "spec": {"expr": expr, "tz": tz}})
    if isinstance(loaded, Salvaged):
        assert "never matches" in loaded.error or "expr" in loaded.error
        return
    fires = [f.at for f in schedule.upcoming(loaded.spec, start, 6)]
    assert fires, f"{expr} in {tz} has no fire after {start}"
    assert all(a < b for a, b in itertools.pairwise(fires)), fires
    assert fires[0] >= start
    latest = schedule.latest_at_or_before(loaded.spec, fires[-1])
    assert latest == fires[-1]


@BOUNDED
@given(st.dictionaries(st.text(max_size=4), anything, max_size=4))
def test_args_are_accepted_exactly_when_every_integer_fits_64_bits(args: dict[str, Any]) -> None:
    def numbers(node: Any) -> list[Any]:
        if isinstance(node, dict):
            return [i for v in node.values() for i in numbers(v)]
        if isinstance(node, list):
            return [i for v in node for i in numbers(v)]
        return [node] if type(node) in (int, float) else []

    found = numbers(args)
    fits = all(INT64_MIN <= i <= INT64_MAX for i in found if type(i) is int)
    fits = fits and all(math.isfinite(f) for f in found if type(f) is float)
    try:
        check_args(args)
    except ValueError as exc:
        assert not fits and "- at `$.args" in str(exc)
    else:
        assert fits
