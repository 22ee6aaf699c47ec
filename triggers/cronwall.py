"""Cron expressions on naive wall times: parsed once, matched without croniter's walk.

Owns which naive datetimes match an expression, the next one after a wall time and the last
one before it: the common grammar (expanded by `triggers.cronfields`) matched field by field
in integers, anything else (`L`, `W`, `#`, `H`) by croniter. `compile` is cached per
expression. Must not read the clock; zones and DST are `triggers.cron`'s.
"""

from __future__ import annotations

import calendar
import itertools
import threading
from bisect import bisect_left, bisect_right
from datetime import datetime, timedelta, tzinfo
from typing import Any, TypeVar

import msgspec
from croniter import croniter
from croniter.croniter import CroniterBadDateError

from triggers import cronfields
from triggers.cronfields import MONTH_DAYS, Fields

SECOND = timedelta(seconds=1)
CACHE_SIZE = 1 << 16  # distinct expressions kept parsed; a record set rarely has more
MAX_YEARS = 50  # a search gives up this far from its start, as croniter does
V = TypeVar("V")


class Matcher(msgspec.Struct, frozen=True, gc=False):
    """`next(wall)` / `prev(wall)`: the matching wall time strictly after / before.

    `wildcard`: a time-of-day field (seconds, minute or hour) starts with `*`."""

    expr: str
    fields: Fields | None
    wildcard: bool

    def next(self, wall: datetime) -> datetime | None:
        return self.next_in(wall, None)

    def next_in(self, wall: datetime, tz: tzinfo | None) -> datetime | None:
        """`next` of `wall`'s own fields, whatever its zone, the match made in `tz` (a fixed
        offset's slot is found with no `datetime.replace`: ≈ 1.5 µs each)."""
        if self.fields is None:
            found = _croniter_step(self.expr, wall.replace(tzinfo=None), prev=False)
            return found if found is None or tz is None else found.replace(tzinfo=tz)
        t = wall  # strictly after its second: the second + 1 carries up like any other step
        try:
            return _next(self.fields, (t.year, t.month, t.day, t.hour, t.minute, t.second + 1), tz)
        except (OverflowError, ValueError):  # past year 9999
            return None

    def prev(self, wall: datetime) -> datetime | None:
        if self.fields is None:
            return _croniter_step(self.expr, wall, prev=True)
        start = wall.replace(microsecond=0)
        try:
            return _prev(self.fields, start if wall.microsecond else start - SECOND)
        except (OverflowError, ValueError):  # before year 1
            return None


_compiled: dict[str, Matcher] = {}


def remember(cache: dict[Any, V], key: Any, value: V) -> V:
    """`cache[key] = value`, the oldest half dropped when it holds `CACHE_SIZE`: a plain
    dict costs a slot an entry where an `lru_cache` keeps a linked node and a key tuple."""
    if len(cache) >= CACHE_SIZE:
        for old in list(itertools.islice(cache, CACHE_SIZE // 2)):
            del cache[old]
    cache[key] = value
    return value


def compile(expr: str) -> Matcher:
    """Parse `expr` (5 fields, or 6 with seconds first); ValueError naming what is wrong.
    Cached per expression (records that share one share its parse)."""
    found = _compiled.get(expr)
    if found is None:
        found = remember(_compiled, expr, _compile(expr))  # the record's own string, no copy
    return found


def _compile(expr: str) -> Matcher:
    fields, wildcard = cronfields.parse(expr)
    return Matcher(expr, fields, wildcard)


def _next(f: Fields, t: tuple[int, int, int, int, int, int], tz: tzinfo | None) -> datetime | None:
    """The first matching wall time at or after `t` (year … second); raises past year 9999.

    Stepped in integers, a field at a time (a value past a field's end carries into the next
    field up through the membership checks), and one datetime made at the end, in `tz`."""
    y, mo, d, h, mi, s = t
    months, hours, minutes, seconds = f.months, f.hours, f.minutes, f.seconds
    limit = y + MAX_YEARS
    while y <= limit:
        if mo not in months:
            i = bisect_left(months, mo)
            y, mo = (y, months[i]) if i < len(months) else (y + 1, months[0])
            d, h, mi, s = 1, 0, 0, 0
        day = _first_day(f, y, mo, d)
        if day is None:  # none left this month
            (y, mo), d, h, mi, s = (y + 1, 1) if mo == 12 else (y, mo + 1), 1, 0, 0, 0
            continue
        if day != d:
            d, h, mi, s = day, 0, 0, 0
        if h not in hours:
            i = bisect_right(hours, h)
            d, h, mi, s = (d, hours[i], 0, 0) if i < len(hours) else (d + 1, 0, 0, 0)
        elif mi not in minutes:
            i = bisect_right(minutes, mi)
            h, mi, s = (h, minutes[i], 0) if i < len(minutes) else (h + 1, 0, 0)
        elif s not in seconds:
            i = bisect_right(seconds, s)
            mi, s = (mi, seconds[i]) if i < len(seconds) else (mi + 1, 0)
        else:
            return datetime(y, mo, d, h, mi, s, tzinfo=tz)
    return None


def _first_day(f: Fields, year: int, month: int, day: int) -> int | None:
    """The first matching day at or after `day` in the month; None if none is left."""
    last = 29 if month == 2 and calendar.isleap(year) else MONTH_DAYS[month] - (month == 2)
    if day > last:
        return None
    if f.dow is None:
        if f.dom is None:
            return day
        i = bisect_left(f.dom, day)
        return f.dom[i] if i < len(f.dom) and f.dom[i] <= last else None
    weekday = (calendar.weekday(year, month, day) + 1) % 7  # 0 = Sunday
    for d in range(day, last + 1):
        dom_ok = f.dom is None or d in f.dom
        dow_ok = weekday in f.dow
        if (dom_ok or dow_ok) if f.day_or else (dom_ok and dow_ok):
            return d
        weekday = (weekday + 1) % 7
    return None


def _prev(f: Fields, t: datetime) -> datetime | None:
    """The last matching wall time at or before `t` (whole seconds); raises before year 1."""
    limit = t.year - MAX_YEARS
    while t.year >= limit:
        if t.month not in f.months:
            i = bisect_right(f.months, t.month) - 1
            year, month = (t.year, f.months[i]) if i >= 0 else (t.year - 1, f.months[-1])
            last = calendar.monthrange(year, month)[1]
            t = datetime(year, month, last, 23, 59, 59)
        elif not f.day_ok(t.year, t.month, t.day):
            t = _day_before(f, t)
        elif t.hour not in f.hours:
            t = _down(t, f.hours, t.hour, "hour") or _day_before(f, t)
        elif t.minute not in f.minutes:
            t = _down(t, f.minutes, t.minute, "minute") or _hour_before(t)
        elif t.second not in f.seconds:
            t = _down(t, f.seconds, t.second, "second") or _minute_before(t)
        else:
            return t
    return None


_LOWER = {"hour": ("minute", "second"), "minute": ("second",), "second": ()}  # for `_down`


def _down(t: datetime, allowed: tuple[int, ...], now: int, unit: str) -> datetime | None:
    """`t` moved to the last allowed `unit` value below `now`, the units below at their end."""
    i = bisect_left(allowed, now) - 1
    if i < 0:
        return None
    fields: dict[str, Any] = {unit: allowed[i], **dict.fromkeys(_LOWER[unit], 59)}
    return t.replace(**fields)


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


# --- croniter for the rest of the grammar --------------------------------------------

_local = threading.local()


def _croniter_step(expr: str, wall: datetime, *, prev: bool) -> datetime | None:
    """croniter's answer, from a parsed croniter per expression and thread."""
    cache: dict[str, croniter] = _local.__dict__.setdefault("cache", {})
    found = cache.get(expr)
    if found is None:
        found = croniter(expr, datetime(2000, 1, 1), ret_type=datetime, second_at_beginning=True)
        if len(cache) > 256:
            cache.clear()
        cache[expr] = found
    try:
        if prev:
            before: datetime = found.get_prev(start_time=wall)
            return before
        after: datetime = found.get_next(start_time=wall)
        return after
    except (CroniterBadDateError, OverflowError):  # none, or none before year 9999
        return None
