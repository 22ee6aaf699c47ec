"""The DST rule, checked exhaustively at every zone transition from 2000 to 2040.

Transitions are found here independently of triggers.cron (day steps, then bisection on
whole seconds). Around each one the fires of `next_fire` are compared with an oracle written
from the rule itself, with no croniter: a wildcard job fires at every instant whose local
wall time matches; a fixed-time daily job once per local day (its wall time, the first of a
repeated one, the gap's end for one in a gap); `latest_at_or_before` walks the same fires
backwards.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from triggers.bounds import CronExpr, TimeZoneName
from triggers.records import CronSpec
from triggers.schedule import latest_at_or_before, next_fire

ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",  # 30-minute shift
    "America/Santiago",  # southern hemisphere, changes at midnight
    "Australia/Sydney",  # southern hemisphere
    "Pacific/Apia",  # skipped all of 30 December 2011
]
MINUTE = timedelta(minutes=1)
SECOND = timedelta(seconds=1)
WINDOW = timedelta(minutes=75)  # covers a whole gap or repeated hour


class Transition:
    def __init__(self, tz: ZoneInfo, at: datetime) -> None:
        self.tz, self.at = tz, at
        self.before = (at - SECOND).astimezone(tz).utcoffset()
        self.after = at.astimezone(tz).utcoffset()
        self.wall_from = at.replace(tzinfo=None) + self.before  # the clock jumps from here…
        self.wall_to = at.replace(tzinfo=None) + self.after  # …to here

    @property
    def gap(self) -> bool:
        return self.after > self.before

    def __repr__(self) -> str:
        return (
            f"{self.tz.key} {self.at:%Y-%m-%d %H:%M}Z {self.wall_from:%H:%M}→{self.wall_to:%H:%M}"
        )


def _offset(tz: ZoneInfo, ts: int) -> timedelta:
    return datetime.fromtimestamp(ts, UTC).astimezone(tz).utcoffset()


@functools.cache
def transitions(name: str) -> list[Transition]:
    tz, found = ZoneInfo(name), []
    ts, end = (
        int(datetime(2000, 1, 1, tzinfo=UTC).timestamp()),
        int(datetime(2041, 1, 1, tzinfo=UTC).timestamp()),
    )
    off = _offset(tz, ts)
    while ts < end:
        nxt = ts + 86400
        if _offset(tz, nxt) != off:
            lo, hi = ts, nxt
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if _offset(tz, mid) == off else (lo, mid)
            found.append(Transition(tz, datetime.fromtimestamp(hi, UTC)))
            off = _offset(tz, nxt)
        ts = nxt
    return found


def walk(spec: CronSpec, start: datetime, end: datetime) -> list[datetime]:
    """`next_fire` from `start` (exclusive) up to `end` (inclusive)."""
    fires, t = [], start
    while (t := next_fire(spec, t)) is not None and t <= end:
        fires.append(t)
    return fires


def check_walk(spec: CronSpec, start: datetime, end: datetime, expected: list[datetime]) -> None:
    fires = walk(spec, start, end)
    assert fires == expected, (spec.expr, start)
    assert all(a < b for a, b in itertools.pairwise(fires))
    for prev, fire in itertools.pairwise(fires):  # backwards: the same fires
        assert latest_at_or_before(spec, fire - SECOND) == prev
    if fires:
        assert latest_at_or_before(spec, end) == fires[-1]


def cron(expr: str, tz: ZoneInfo) -> CronSpec:
    return CronSpec(expr=CronExpr(expr), tz=TimeZoneName(tz.key))


@pytest.mark.parametrize("name", ZONES)
def test_transitions_are_found(name):
    found = transitions(name)
    assert len(found) >= (20 if name == "Pacific/Apia" else 70)  # ~2 a year where DST holds
    assert {t.gap for t in found} == {True, False}
    if name == "Australia/Lord_Howe":
        assert {abs(t.after - t.before) for t in found} == {timedelta(minutes=30)}


# --- wildcard jobs: real time ------------------------------------------------------------

WILDCARD: dict[str, Callable[[datetime], bool]] = {
    "*/5 * * * *": lambda w: w.minute % 5 == 0,
    "*/7 * * * *": lambda w: w.minute % 7 == 0,
    "0 * * * *": lambda w: w.minute == 0,
    "30 * * * *": lambda w: w.minute == 30,
    "*/20 2 * * *": lambda w: w.hour == 2 and w.minute % 20 == 0,
}


@pytest.mark.parametrize("name", ZONES)
def test_wildcard_jobs_fire_at_every_matching_instant(name):
    tz = ZoneInfo(name)
    for tr in transitions(name):
        start, end = tr.at - WINDOW, tr.at + WINDOW
        grid = [start + i * MINUTE for i in range(1, 2 * 75 + 1)]
        walls = [(x, x.astimezone(tz).replace(tzinfo=None)) for x in grid]
        for expr, matches in WILDCARD.items():
            expected = [x for x, w in walls if matches(w)]
            check_walk(cron(expr, tz), start, end, expected)


@pytest.mark.parametrize("name", ZONES)
def test_every_five_minutes_keeps_absolute_spacing(name):
    tz = ZoneInfo(name)
    spec = cron("*/5 * * * *", tz)
    for tr in transitions(name):
        fires = walk(spec, tr.at - WINDOW, tr.at + WINDOW)
        assert len(fires) == 30, tr
        assert {b - a for a, b in itertools.pairwise(fires)} == {5 * MINUTE}, tr


# --- fixed-time jobs: Debian cron ----------------------------------------------------------


def fixed_times(tr: Transition) -> list[datetime]:
    """Daily wall times around the transition: before, in and at the end of gap/overlap."""
    lo, hi = sorted((tr.wall_from, tr.wall_to))
    mid = lo + (hi - lo) / 2
    return [lo - MINUTE, lo, mid, hi - MINUTE, hi, hi + 30 * MINUTE]


def oracle_daily(tr: Transition, hour: int, minute: int) -> list[datetime]:
    """Fires of `minute hour * * *` on the local days around the transition."""
    fires = []
    day0 = tr.wall_from.date() - timedelta(days=2)
    for d in range(6):
        wall = datetime.combine(day0 + timedelta(days=d), datetime.min.time()).replace(
            hour=hour, minute=minute
        )
        first = wall.replace(tzinfo=tr.tz, fold=0).astimezone(UTC)
        if first.astimezone(tr.tz).replace(tzinfo=None) != wall:  # no such wall time: the gap
            fires.append(tr.at)
        else:
            fires.append(first)
    return sorted(set(fires))  # a gap that swallows a whole day merges two days' fires


@pytest.mark.parametrize("name", ZONES)
def test_fixed_time_jobs_fire_once_a_day(name):
    for tr in transitions(name):
        start, end = tr.at - timedelta(days=2), tr.at + timedelta(days=2)
        for wall in fixed_times(tr):
            spec = cron(f"{wall.minute} {wall.hour} * * *", tr.tz)
            expected = oracle_daily(tr, wall.hour, wall.minute)
            expected = [x for x in expected if start < x <= end]
            check_walk(spec, start, end, expected)
            # a fire at the gap's end counts for the day the gap swallowed its time on
            local_days = [
                tr.wall_from.date() if tr.gap and x == tr.at else x.astimezone(tr.tz).date()
                for x in expected
            ]
            assert len(set(local_days)) == len(local_days), (tr, wall)


@pytest.mark.parametrize("name", ZONES)
def test_fixed_time_job_in_the_gap_fires_once_at_its_end(name):
    for tr in transitions(name):
        if not tr.gap:
            continue
        # every wall minute of the gap within its first hour is in the job: one fire, at its end
        hour = tr.wall_from.hour
        gap = (tr.wall_from + i * MINUTE for i in range(60))
        minutes = sorted({w.minute for w in gap if w < tr.wall_to and w.hour == hour})
        spec = cron(f"{','.join(map(str, minutes))} {hour} * * *", tr.tz)
        after = [tr.at + i * MINUTE for i in range(1, 30)]  # natural matches after the gap
        natural = [
            x for x in after if (w := x.astimezone(tr.tz)).hour == hour and w.minute in minutes
        ]
        fires = walk(spec, tr.at - timedelta(hours=1), tr.at + 29 * MINUTE)
        assert fires == [tr.at, *natural], tr
        assert latest_at_or_before(spec, tr.at) == tr.at


@pytest.mark.parametrize("name", ZONES)
def test_fixed_time_job_in_the_overlap_fires_at_the_first_occurrence(name):
    for tr in transitions(name):
        if tr.gap:
            continue
        wall = tr.wall_to  # the first repeated wall time
        spec = cron(f"{wall.minute} {wall.hour} * * *", tr.tz)
        first = wall.replace(tzinfo=tr.tz, fold=0).astimezone(UTC)
        assert walk(spec, tr.at - timedelta(hours=3), tr.at + timedelta(hours=3)) == [first], tr


def test_croniter_alone_fires_twice_in_the_repeated_hour():
    """Why cron.py maps wall times itself: croniter 7 with an aware start repeats the slot."""
    tz = ZoneInfo("Europe/Berlin")
    it = croniter("30 2 * * *", datetime(2026, 10, 25, 0, 0, tzinfo=tz), ret_type=datetime)
    first, second = it.get_next(), it.get_next()
    assert first.astimezone(UTC) == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert second.astimezone(UTC) == datetime(2026, 10, 25, 1, 30, tzinfo=UTC)
    ours = walk(cron("30 2 * * *", tz), datetime(2026, 10, 24, 23, tzinfo=UTC), second)
    assert ours == [first.astimezone(UTC)]
