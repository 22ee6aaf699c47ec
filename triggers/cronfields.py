"""Expanded cron fields and the walk over naive wall times to the next or last match.

Owns `Fields` (an expression of the common grammar as sorted allowed values per field,
and the rule that combines its two day fields), whether such fields ever match
(`matches_every_leap_cycle`), and `walk`: from a wall time, field by field with
bisection, to the first matching one in either direction (`FORWARD`, `BACKWARD`).
Parsing an expression into `Fields` is `triggers.cronwall`'s. Must not read the clock;
zones and DST are `triggers.cron`'s.
"""

from __future__ import annotations

import calendar
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

SECOND = timedelta(seconds=1)
MAX_YEARS = 50  # a search gives up this far from its start, as croniter does
_MONTH_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # the most a month has

Values = tuple[int, ...] | None  # sorted allowed values; None: every value


@dataclass(frozen=True, slots=True)
class Fields:
    """An expanded expression of the common grammar."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: tuple[int, ...]
    dom: Values
    dow: frozenset[int] | None  # 0 = Sunday
    day_or: bool  # both day fields restricted: a day matches either

    def day_ok(self, year: int, month: int, day: int) -> bool:
        dom_ok = self.dom is None or day in self.dom
        dow_ok = self.dow is None or (calendar.weekday(year, month, day) + 1) % 7 in self.dow
        return (dom_ok or dow_ok) if self.day_or else (dom_ok and dow_ok)


def matches_every_leap_cycle(f: Fields) -> bool:
    """Whether the expression matches in every 8 years, without a slot search.

    Every month holds each weekday, every day 1 … 28, and days up to its length (29 for
    a February of a leap year, which comes at least once in 8 years); times of day are
    never empty. So only a day-of-month field alone can make an expression never match:
    when none of its days fits any of its months (`0 0 30 2 *`)."""
    if f.dom is None or f.dow is not None:
        return True
    return any(f.dom[0] <= _MONTH_DAYS[m] for m in f.months)


def walk(f: Fields, t: datetime, way: Way) -> datetime | None:
    """The first matching wall time from `t` on (whole seconds), in `way`'s direction:
    the first field that does not match moves to its next allowed value that way, the
    fields below it to their first (or last) value. Raises past year 9999 or before 1."""
    start = t.year
    while abs(t.year - start) <= MAX_YEARS:
        if t.month not in f.months:
            t = way.month(f, t)
        elif not f.day_ok(t.year, t.month, t.day):
            t = way.day(f, t)
        elif t.hour not in f.hours:
            t = way.within(t, f.hours, t.hour, "hour") or way.day(f, t)
        elif t.minute not in f.minutes:
            t = way.within(t, f.minutes, t.minute, "minute") or way.hour(t)
        elif t.second not in f.seconds:
            t = way.within(t, f.seconds, t.second, "second") or way.minute(t)
        else:
            return t
    return None


_LOWER = {"hour": ("minute", "second"), "minute": ("second",), "second": ()}


def _up(t: datetime, allowed: tuple[int, ...], now: int, unit: str) -> datetime | None:
    """`t` moved to the next allowed `unit` value above `now`, the units below at their start."""
    i = bisect_right(allowed, now)
    if i == len(allowed):
        return None
    fields: dict[str, Any] = {unit: allowed[i], **dict.fromkeys(_LOWER[unit], 0)}
    return t.replace(**fields)


def _down(t: datetime, allowed: tuple[int, ...], now: int, unit: str) -> datetime | None:
    """`t` moved to the last allowed `unit` value below `now`, the units below at their end."""
    i = bisect_left(allowed, now) - 1
    if i < 0:
        return None
    fields: dict[str, Any] = {unit: allowed[i], **dict.fromkeys(_LOWER[unit], 59)}
    return t.replace(**fields)


def _month_after(f: Fields, t: datetime) -> datetime:
    i = bisect_left(f.months, t.month)
    year, month = (t.year, f.months[i]) if i < len(f.months) else (t.year + 1, f.months[0])
    return datetime(year, month, 1)


def _day_after(f: Fields, t: datetime) -> datetime:
    """The start of the next matching day of `t`'s month, else of the next month."""
    year, month = t.year, t.month
    last = 29 if month == 2 and calendar.isleap(year) else _MONTH_DAYS[month] - (month == 2)
    if f.dow is None and f.dom is not None:  # the day-of-month field alone: jump to its next
        i = bisect_right(f.dom, t.day)
        days: Any = f.dom[i : i + 1] if i < len(f.dom) and f.dom[i] <= last else ()
    else:
        days = (d for d in range(t.day + 1, last + 1) if f.day_ok(year, month, d))
    for day in days:
        return datetime(year, month, day)
    return datetime(year + 1, 1, 1) if month == 12 else datetime(year, month + 1, 1)


def _hour_after(t: datetime) -> datetime:
    return t.replace(minute=0, second=0) + timedelta(hours=1)


def _minute_after(t: datetime) -> datetime:
    return t.replace(second=0) + timedelta(minutes=1)


def _month_before(f: Fields, t: datetime) -> datetime:
    i = bisect_right(f.months, t.month) - 1
    year, month = (t.year, f.months[i]) if i >= 0 else (t.year - 1, f.months[-1])
    return datetime(year, month, calendar.monthrange(year, month)[1], 23, 59, 59)


def _day_before(f: Fields, t: datetime) -> datetime:
    """The end of the previous matching day of `t`'s month, else of the previous month."""
    year, month = t.year, t.month
    for day in range(t.day - 1, 0, -1):
        if f.day_ok(year, month, day):
            return datetime(year, month, day, 23, 59, 59)
    return datetime(year, month, 1) - SECOND


def _hour_before(t: datetime) -> datetime:
    return t.replace(minute=59, second=59) - timedelta(hours=1)


def _minute_before(t: datetime) -> datetime:
    return t.replace(second=59) - timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class Way:
    """One direction of `walk`: how each field steps to its next allowed value."""

    month: Callable[[Fields, datetime], datetime]
    day: Callable[[Fields, datetime], datetime]
    within: Callable[[datetime, tuple[int, ...], int, str], datetime | None]
    hour: Callable[[datetime], datetime]
    minute: Callable[[datetime], datetime]


FORWARD = Way(_month_after, _day_after, _up, _hour_after, _minute_after)
BACKWARD = Way(_month_before, _day_before, _down, _hour_before, _minute_before)
