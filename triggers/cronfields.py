"""Cron expressions expanded into their fields: what each field allows, parsed once.

Owns the parse of an expression into `Fields` (sorted allowed seconds, minutes, hours,
months; days of month and of week), for the common grammar — numbers, ranges, steps,
lists, `*`, `?`, month and weekday names. croniter parses (`croniter.expand`, so its
grammar, aliases and checks stay the contract), except for the commonest form (each
field `*` or one number), parsed here to the same fields at a fraction of the cost.
Anything else (`L`, `W`, `#`, `H`) has no `Fields`: `triggers.cronwall` leaves it to
croniter. Also whether an expression can ever match (`matches_every_leap_cycle`).
Pure: no clock, no I/O; matching wall times is `triggers.cronwall`'s.
"""

from __future__ import annotations

import calendar
import re

import msgspec
from croniter import croniter

_SIMPLE = re.compile(r"[0-9*/,?-]+")
_MONTHS = re.compile(r"(?:[0-9*/,?-]|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)+")
_DAYS = re.compile(r"(?:[0-9*/,?-]|sun|mon|tue|wed|thu|fri|sat)+")
_FULL = {
    "second": tuple(range(60)),
    "minute": tuple(range(60)),
    "hour": tuple(range(24)),
    "month": tuple(range(1, 13)),
}  # shared by every expression
MONTH_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # the most a month has

Values = tuple[int, ...] | None  # sorted allowed values; None: every value


class Fields(msgspec.Struct, frozen=True, gc=False):
    """An expanded expression of the common grammar (untracked by the cycle collector: it
    holds tuples of ints only, and 40,000 distinct expressions would be walked at each full
    collection)."""

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
    return any(f.dom[0] <= MONTH_DAYS[m] for m in f.months)


def parse(expr: str) -> tuple[Fields | None, bool]:
    """`expr`'s fields (None: only croniter matches it) and whether a time-of-day field
    (seconds, minute or hour) starts with `*`; ValueError naming what is wrong."""
    fields = expr.lower().split()
    if len(fields) not in (5, 6):
        raise ValueError(f"cron expression {expr!r} has {len(fields)} fields, expected 5 or 6")
    time_of_day = fields[:3] if len(fields) == 6 else fields[:2]
    wildcard = any(f.startswith("*") for f in time_of_day)
    plain = _plain(fields)
    if plain is not None:
        return plain, wildcard
    try:
        expanded, nth = croniter.expand(expr, second_at_beginning=True)
    except (ValueError, KeyError) as exc:
        raise ValueError(f"invalid cron expression {expr!r}: {exc}") from None
    return (_fields(fields, expanded) if not nth else None), wildcard


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


def _build(
    second: Values, minute: Values, hour: Values, day: Values, mon: Values, wday: Values
) -> Fields:
    return Fields(
        seconds=_all("second", second),
        minutes=_all("minute", minute),
        hours=_all("hour", hour),
        months=_all("month", mon),
        dom=day,
        dow=None if wday is None else _weekdays(wday),
        day_or=day is not None and wday is not None,
    )


_BOUNDS = ((0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 7))  # s, m, h, dom, mon, dow
_ONE = {n: (n,) for n in range(60)}  # one shared tuple per single value
_ONE_DAY = {n: frozenset((n,)) for n in range(7)}  # one shared set per single weekday
_ATOMS = tuple(
    {
        "*": None,
        **{
            text: _ONE[n % 7 if high == 7 else n]
            for n in range(low, high + 1)
            for text in (str(n), f"{n:02d}")
        },
    }
    for low, high in _BOUNDS
)  # per field: each `*` or number (one or two digits, in range) it may be


def _plain(raw: list[str]) -> Fields | None:
    """Fields of the commonest form, each `*` or one number (`30 9 * * 1`), without croniter's
    parse (≈ 100 µs an expression: 40,000 distinct ones cost seconds); None for anything else.
    A number out of range is left to croniter, whose message names it."""
    fields = raw if len(raw) == 6 else ["0", *raw]
    try:
        second, minute, hour, day, mon, wday = [a[f] for a, f in zip(_ATOMS, fields, strict=True)]
    except KeyError:
        return None
    return _build(second, minute, hour, day, mon, wday)


def _weekdays(wday: tuple[int, ...]) -> frozenset[int]:
    shared = _ONE_DAY.get(wday[0]) if len(wday) == 1 else None
    return shared if shared is not None else frozenset(wday)


def _values(field: list[int | str]) -> Values:
    if field == ["*"]:
        return None
    if not all(isinstance(v, int) for v in field):
        return ()
    return tuple(sorted({int(v) for v in field}))


def _all(unit: str, values: Values) -> tuple[int, ...]:
    return _FULL[unit] if values is None else values
