"""Cron expressions on naive wall times: parsed once, matched without croniter's walk.

Owns what a cron expression *means* on a wall clock that has no zone: which
naive datetimes match, the next one strictly after a wall time, the last one
strictly before. croniter parses (so its grammar, aliases and checks stay the
contract: `croniter.expand`), and the common grammar — numbers, ranges, steps,
lists, `*`, `?`, month and weekday names — is matched here on the expanded
fields, field by field with bisection, at a few microseconds a step. Anything
else (`L`, `W`, `#`, `H`) is matched by croniter itself. Day of month and day of
week combine as croniter combines them: either, when both are restricted.

`compile` is cached per expression, so records that share an expression share
its parse; the commonest form (each field `*` or one number) is parsed here
without croniter, to the same fields. Must not read the clock; zones and DST are `triggers.cron`'s.
"""

from __future__ import annotations

import calendar
import functools
import re
import threading
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from croniter import croniter
from croniter.croniter import CroniterBadDateError

SECOND = timedelta(seconds=1)
CACHE_SIZE = 1 << 16  # distinct expressions kept parsed; a record set rarely has more
MAX_YEARS = 50  # a search gives up this far from its start, as croniter does
_SIMPLE = re.compile(r"[0-9*/,?-]+")
_MONTHS = re.compile(r"(?:[0-9*/,?-]|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)+")
_DAYS = re.compile(r"(?:[0-9*/,?-]|sun|mon|tue|wed|thu|fri|sat)+")
_FULL = {"second": tuple(range(60)), "minute": tuple(range(60)), "hour": tuple(range(24)),
         "month": tuple(range(1, 13))}  # fmt: skip  # shared by every expression
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


class Matcher:
    """`next(wall)` / `prev(wall)`: the matching wall time strictly after / before."""

    def __init__(self, expr: str, fields: Fields | None) -> None:
        self.expr, self.fields = expr, fields

    def next(self, wall: datetime) -> datetime | None:
        if self.fields is None:
            return _croniter_step(self.expr, wall, prev=False)
        try:
            return _next(self.fields, wall.replace(microsecond=0) + SECOND)
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


@functools.lru_cache(maxsize=CACHE_SIZE)
def compile(expr: str) -> Matcher:
    """Parse `expr` (5 fields, or 6 with seconds first); ValueError naming what is wrong."""
    fields = expr.lower().split()
    if len(fields) not in (5, 6):
        raise ValueError(f"cron expression {expr!r} has {len(fields)} fields, expected 5 or 6")
    plain = _plain(fields)
    if plain is not None:
        return Matcher(expr, plain)
    try:
        expanded, nth = croniter.expand(expr, second_at_beginning=True)
    except (ValueError, KeyError) as exc:
        raise ValueError(f"invalid cron expression {expr!r}: {exc}") from None
    return Matcher(expr, _fields(fields, expanded) if not nth else None)


def _fields(raw: list[str], expanded: list[list[int | str]]) -> Fields | None:
    """The common grammar's fields, or None for what only croniter matches."""
    *time_of_day, dom, month, dow = raw if len(raw) == 6 else ["0", *raw]
    if not all(_SIMPLE.fullmatch(f) for f in (*time_of_day, dom)):
        return None
    if not (_MONTHS.fullmatch(month) and _DAYS.fullmatch(dow)):
        return None
    values = [_values(e) for e in expanded]
    if any(v == () for v in values):
        return None  # e.g. `l` left in a field: not ours to match
    minute, hour, day, mon, wday = values[:5]
    second = values[5] if len(values) == 6 else (0,)
    return _build(second, minute, hour, day, mon, wday)


def _build(second: Values, minute: Values, hour: Values, day: Values, mon: Values,
            wday: Values) -> Fields:  # fmt: skip
    return Fields(
        seconds=_all("second", second),
        minutes=_all("minute", minute),
        hours=_all("hour", hour),
        months=_all("month", mon),
        dom=day,
        dow=frozenset(wday) if wday is not None else None,
        day_or=day is not None and wday is not None,
    )


_BOUNDS = ((0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 7))  # s, m, h, dom, mon, dow
_ONE = {n: (n,) for n in range(60)}  # one shared tuple per single value


def _plain(raw: list[str]) -> Fields | None:
    """Fields of the commonest form, each `*` or one number (`30 9 * * 1`), without croniter's
    parse (≈ 100 µs an expression: 40,000 distinct ones cost seconds); None for anything else.
    A number out of range is left to croniter, whose message names it."""
    fields = raw if len(raw) == 6 else ["0", *raw]
    values: list[Values] = []
    for f, (low, high) in zip(fields, _BOUNDS, strict=True):
        if f == "*":
            values.append(None)
        elif len(f) <= 2 and f.isascii() and f.isdigit() and low <= int(f) <= high:
            values.append(_ONE[int(f) % 7 if high == 7 else int(f)])
        else:
            return None
    second, minute, hour, day, mon, wday = values
    return _build(second, minute, hour, day, mon, wday)


def _values(field: list[int | str]) -> Values:
    if field == ["*"]:
        return None
    if not all(isinstance(v, int) for v in field):
        return ()
    return tuple(sorted({int(v) for v in field}))


def _all(unit: str, values: Values) -> tuple[int, ...]:
    return _FULL[unit] if values is None else values


def _next(f: Fields, t: datetime) -> datetime | None:
    """The first matching wall time at or after `t` (whole seconds); raises past year 9999."""
    limit = t.year + MAX_YEARS
    while t.year <= limit:
        if t.month not in f.months:
            i = bisect_left(f.months, t.month)
            year, month = (t.year, f.months[i]) if i < len(f.months) else (t.year + 1, f.months[0])
            t = datetime(year, month, 1)
        elif not f.day_ok(t.year, t.month, t.day):
            t = _day_after(f, t)
        elif t.hour not in f.hours:
            t = _up(t, f.hours, t.hour, "hour") or _day_after(f, t)
        elif t.minute not in f.minutes:
            t = _up(t, f.minutes, t.minute, "minute") or _hour_after(t)
        elif t.second not in f.seconds:
            t = _up(t, f.seconds, t.second, "second") or _minute_after(t)
        else:
            return t
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
