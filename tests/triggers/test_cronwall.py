"""`triggers.cronwall` answers exactly what croniter answers, for every expression it matches.

Hypothesis draws expressions of the common grammar (numbers, ranges, steps, lists,
`*`, `?`, names) and wall times from 1990 to 2060; the next and previous match
must equal croniter's own walk from the same start.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from croniter import croniter
from croniter.croniter import CroniterBadDateError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triggers import cronfields, cronwall

MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]


def part(low: int, high: int, names: list[str] | None = None) -> st.SearchStrategy[str]:
    """One comma-separated element of a field whose values run from `low` to `high`."""
    number = st.integers(low, high)
    value = number.map(str)
    if names:
        value = value | st.sampled_from(names)
    span = st.tuples(number, number).map(lambda p: f"{min(p)}-{max(p)}")
    step = st.integers(1, high - low + 1)
    return st.one_of(
        value,
        span,
        st.tuples(span, step).map(lambda p: f"{p[0]}/{p[1]}"),
        step.map(lambda s: f"*/{s}"),
        st.tuples(number, step).map(lambda p: f"{p[0]}/{p[1]}"),
    )


def field(low: int, high: int, names: list[str] | None = None, *, blank: str = "*"):
    listed = st.lists(part(low, high, names), min_size=1, max_size=3).map(",".join)
    return st.one_of(st.just(blank), listed, listed)


# Built once: a strategy made anew at every draw costs hypothesis its validation each time.
SIXTY, HOURS = field(0, 59), field(0, 23)
MONTHS_FIELD, DAYS_FIELD = field(1, 12, MONTHS), field(0, 6, DAYS)
MONTH_DAYS = {blank: field(1, 31, blank=blank) for blank in ("*", "?")}


@st.composite
def expressions(draw: st.DrawFn) -> str:
    fields = [
        draw(SIXTY),
        draw(HOURS),
        draw(MONTH_DAYS[draw(st.sampled_from(["*", "?"]))]),
        draw(MONTHS_FIELD),
        draw(DAYS_FIELD),
    ]
    if draw(st.booleans()):
        fields.insert(0, draw(SIXTY))
    return " ".join(fields)


walls = st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2060, 12, 31))


def croniters(expr: str, wall: datetime, *, prev: bool) -> datetime | None:
    it = croniter(expr, wall, ret_type=datetime, second_at_beginning=True)
    try:
        return it.get_prev() if prev else it.get_next()
    except CroniterBadDateError:
        return None


def valid(expr: str) -> bool:
    try:
        croniter.expand(expr, second_at_beginning=True)
    except (ValueError, KeyError):
        return False
    return True


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions(), walls)
def test_next_and_prev_are_croniters(expr: str, wall: datetime) -> None:
    if not valid(expr):
        with pytest.raises(ValueError, match="invalid cron expression"):
            cronwall.compile(expr)
        return
    matcher = cronwall.compile(expr)
    assert matcher.next(wall) == croniters(expr, wall, prev=False)
    assert matcher.prev(wall) == croniters(expr, wall, prev=True)


@pytest.mark.parametrize(
    "expr",
    [
        "*/5 * * * *",
        "0 9 * * MON-FRI",
        "5/15 * * * *",
        "30 2 * * *",
        "0 0 31 * 1",
        "0 0 29 2 *",
        "*/10 30 2 * * *",
        "0 0 1-31/2 * *",
        "0 0 ? JAN,JUL SUN",
        "0 0 * * 0-7",
    ],
)
def test_common_expressions_are_matched_here(expr: str) -> None:
    matcher = cronwall.compile(expr)
    assert matcher.fields is not None
    start = datetime(2026, 12, 31, 23, 59, 59)
    walked = [start]
    for _ in range(50):
        walked.append(matcher.next(walked[-1]))
    it = croniter(expr, start, ret_type=datetime, second_at_beginning=True)
    assert walked[1:] == [it.get_next() for _ in range(50)]


@pytest.mark.parametrize("expr", ["0 0 L * *", "0 0 15W * *", "0 0 * * 5#2", "0 0 L 2 *"])
def test_the_rest_of_the_grammar_is_croniters(expr: str) -> None:
    matcher = cronwall.compile(expr)
    start = datetime(2026, 2, 10, 12, 0, 0)
    it = croniter(expr, start, ret_type=datetime, second_at_beginning=True)
    assert [matcher.next(start + timedelta(days=40 * i)) for i in range(3)] == [
        croniter(expr, start + timedelta(days=40 * i), ret_type=datetime).get_next()
        for i in range(3)
    ]
    assert matcher.prev(start) == it.get_prev()


def test_no_match_and_the_calendars_end_are_none() -> None:
    assert cronwall.compile("0 0 30 2 *").next(datetime(2026, 1, 1)) is None
    assert cronwall.compile("0 0 1 1 *").next(datetime(9999, 6, 1)) is None
    assert cronwall.compile("0 0 1 1 *").prev(datetime(1, 1, 1, 0, 0, 0)) is None


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("* * * *", "has 4 fields"),
        ("61 * * * *", "invalid cron expression"),
        ("* * * * FOO", "invalid cron expression"),
    ],
)
def test_bad_expressions_name_what_is_wrong(expr: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        cronwall.compile(expr)


@pytest.mark.parametrize(
    "expr",
    [
        "30 9 * * *",
        "0 0 1 1 *",
        "5 4 31 2 *",
        "0 12 * * 7",
        "0 12 * * 0",
        "0 12 13 * 5",
        "59 23 * 12 *",
        "* * * * *",
        "7 * * * * *",
        "0 0 0 29 2 *",
        "05 09 * * *",
    ],
)
def test_the_plain_form_parses_to_the_fields_croniter_gives(expr):
    raw = expr.lower().split()
    expanded, _ = cronfields.croniter.expand(expr, second_at_beginning=True)
    assert cronfields._plain(raw) == cronfields._fields(raw, expanded)


@pytest.mark.parametrize("expr", ["60 * * * *", "0 24 * * *", "0 0 0 * *", "0 0 * 13 *"])
def test_a_plain_number_out_of_range_is_refused_as_croniter_refuses_it(expr):
    assert cronfields._plain(expr.split()) is None
    with pytest.raises(ValueError):
        cronwall.compile(expr)
