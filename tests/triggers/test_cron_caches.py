"""The analytic validity check and the caches per (expression, zone) answer as a search does."""

from datetime import UTC, datetime

import pytest
from croniter import croniter
from croniter.croniter import CroniterBadDateError
from hypothesis import given, settings
from hypothesis import strategies as st

from triggers import bounds, cron, cronfields, cronwall, schedule
from triggers.records import CronSpec

days = st.lists(st.integers(1, 31), min_size=1, max_size=3).map(lambda v: ",".join(map(str, v)))
months = st.lists(st.integers(1, 12), min_size=1, max_size=3).map(lambda v: ",".join(map(str, v)))
weekdays = st.sampled_from(["*", "1", "0,6", "mon-fri"])


def croniter_matches(expr: str) -> bool:
    try:
        first = croniter(expr, datetime(2000, 1, 1)).get_next(datetime)
    except CroniterBadDateError:
        return False
    return first < datetime(2028, 1, 1)


@settings(max_examples=300, deadline=None)
@given(days, months, weekdays)
def test_the_analytic_check_agrees_with_croniter(dom: str, month: str, dow: str) -> None:
    expr = f"0 0 {dom} {month} {dow}"
    fields = cronwall.compile(expr).fields
    assert fields is not None
    assert cronfields.matches_every_leap_cycle(fields) == croniter_matches(expr)


NEVER = [
    ("0 0 30 2 *", False),
    ("0 0 29 2 *", True),
    ("0 0 31 4,6 *", False),
    ("0 0 31 4,7 *", True),
]


@pytest.mark.parametrize(("expr", "ok"), NEVER)
def test_check_cron_refuses_what_never_matches(expr: str, ok: bool) -> None:
    if ok:
        bounds.check_cron(expr)
    else:
        with pytest.raises(ValueError, match="never matches"):
            bounds.check_cron(expr)


def test_a_changed_zone_or_expression_gets_its_own_rule_and_slot() -> None:
    after = datetime(2026, 3, 29, 0, 0, tzinfo=UTC)  # Europe/Berlin springs forward this day
    utc = schedule.next_fire(CronSpec(expr="30 2 * * *", tz="UTC"), after)
    berlin = schedule.next_fire(CronSpec(expr="30 2 * * *", tz="Europe/Berlin"), after)
    other = schedule.next_fire(CronSpec(expr="30 3 * * *", tz="UTC"), after)
    assert utc == datetime(2026, 3, 29, 2, 30, tzinfo=UTC)
    assert berlin == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # out of the gap: 03:00 local
    assert other == datetime(2026, 3, 29, 3, 30, tzinfo=UTC)
    assert cron.rule("30 2 * * *", "UTC") is not cron.rule("30 2 * * *", "Europe/Berlin")
    assert cron.rule("30 2 * * *", "UTC").fixed is not None
    assert cron.rule("30 2 * * *", "Europe/Berlin").fixed is None


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 59),
    st.integers(0, 23),
    st.integers(1, 28),
    st.integers(1, 12),
    st.datetimes(datetime(2001, 1, 1), datetime(2090, 1, 1)),
    st.sampled_from(["UTC", "Etc/GMT-2", "Etc/GMT+5", "Etc/GMT-14", "Etc/GMT+12"]),
    st.sampled_from(["*", "1", "mon-fri"]),
)
def test_the_fixed_zone_path_agrees_with_the_zone_search(
    m: int, h: int, d: int, mon: int, at: datetime, tz: str, dow: str
) -> None:
    expr = f"{m} {h} {d} {mon} {dow}"
    fast = cron.rule(expr, tz)
    assert fast.fixed is not None
    slow = cron.CronRule(fast.expr, fast.tz, fast.wildcard, fast.matcher, None)
    after = at.replace(tzinfo=UTC)
    assert cron.next_slot(fast, after) == cron.next_slot(slow, after)
    assert cron.latest_slot(fast, after) == cron.latest_slot(slow, after)
