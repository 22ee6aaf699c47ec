"""Cron expressions on naive wall times: parsed once, matched without croniter's walk.

Owns what a cron expression *means* on a wall clock that has no zone: which
naive datetimes match, the next one strictly after a wall time, the last one
strictly before. croniter parses (so its grammar, aliases and checks stay the
contract: `croniter.expand`), and the common grammar — numbers, ranges, steps,
lists, `*`, `?`, month and weekday names — is matched on the expanded fields
(`triggers.cronfields`: field by field with bisection, at a few microseconds a
step). Anything else (`L`, `W`, `#`, `H`) is matched by croniter itself. Day of
month and day of week combine as croniter combines them: either, when both are
restricted.

`compile` is cached per expression, so records that share an expression share
its parse; the commonest form (each field `*` or one number) is parsed here
without croniter, to the same fields. Must not read the clock; zones and DST are `triggers.cron`'s.
"""

from __future__ import annotations

import functools
import re
import threading
from datetime import datetime

from croniter import croniter
from croniter.croniter import CroniterBadDateError

from triggers.cronfields import BACKWARD, FORWARD, SECOND, Fields, Values, walk

CACHE_SIZE = 1 << 16  # distinct expressions kept parsed; a record set rarely has more
_SIMPLE = re.compile(r"[0-9*/,?-]+")
_MONTHS = re.compile(r"(?:[0-9*/,?-]|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)+")
_DAYS = re.compile(r"(?:[0-9*/,?-]|sun|mon|tue|wed|thu|fri|sat)+")
_FULL = {"second": tuple(range(60)), "minute": tuple(range(60)), "hour": tuple(range(24)),
         "month": tuple(range(1, 13))}  # fmt: skip  # shared by every expression


class Matcher:
    """`next(wall)` / `prev(wall)`: the matching wall time strictly after / before."""

    def __init__(self, expr: str, fields: Fields | None) -> None:
        self.expr, self.fields = expr, fields

    def next(self, wall: datetime) -> datetime | None:
        if self.fields is None:
            return _croniter_step(self.expr, wall, prev=False)
        try:
            return walk(self.fields, wall.replace(microsecond=0) + SECOND, FORWARD)
        except (OverflowError, ValueError):  # past year 9999
            return None

    def prev(self, wall: datetime) -> datetime | None:
        if self.fields is None:
            return _croniter_step(self.expr, wall, prev=True)
        start = wall.replace(microsecond=0)
        try:
            return walk(self.fields, start if wall.microsecond else start - SECOND, BACKWARD)
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
