"""Cron slots in an IANA time zone, with the Debian cron rule for DST.

Owns the instant math of a cron expression: wildcard jobs follow real time, fixed-time jobs
fire once in a repeated hour and after a spring gap (docs/architecture.md, "Module notes");
`next_slot` and `latest_slot` jump straight to the answer. Matching on wall times is
`triggers.cronwall`'s. Must not read the clock or do I/O; catch-up, grace and fire keys live
in schedule.py.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import msgspec

from triggers import cronwall
from triggers.bounds import zone
from triggers.records import CronSpec

SECOND = timedelta(seconds=1)
_DAY = timedelta(days=1)
_MAX_HOPS = 10_000  # transitions crossed in one search; real zones need a handful


class CronRule(msgspec.Struct, frozen=True, gc=False):
    """A checked cron expression in a zone (made per call: its parts are cached)."""

    expr: str
    tz: ZoneInfo
    wildcard: bool
    matcher: cronwall.Matcher  # the expression's parse, shared by every zone
    fixed: timedelta | None  # the zone's one offset, if it never changes (UTC, Etc/…)


def rule(expr: str, tz: str = "UTC") -> CronRule:
    """Check `expr` and `tz`; ValueError naming what is wrong. The parse is cached per
    expression and the zone per name, so no object is kept per (expression, zone)."""
    matcher = cronwall.compile(expr)
    z, fixed = _zone(tz)
    return CronRule(matcher.expr, z, matcher.wildcard, matcher, fixed)


@functools.lru_cache(maxsize=1024)
def _zone(name: str) -> tuple[ZoneInfo, timedelta | None]:
    """The zone, and its one offset if it has one for all time by IANA's definition (UTC,
    `Etc/GMT±n`): no transitions to search."""
    name = str(name)
    z = zone(name)
    fixed = name in ("UTC", "Etc/UTC", "Etc/GMT", "GMT", "UCT", "Zulu", "Universal") or (
        name.startswith("Etc/GMT") and name[7:8] in "+-"
    )
    return z, offset(z, datetime(2000, 1, 1, tzinfo=UTC)) if fixed else None


def rule_of(spec: CronSpec) -> CronRule:
    return rule(spec.expr, spec.tz)


def is_wildcard(expr: str) -> bool:
    """Whether the job follows real time: a time-of-day field starts with `*`."""
    return cronwall.compile(expr).wildcard  # ValueError for a bad one


# --- wall-clock matching (triggers.cronwall) -------------------------------------------


def wall_next(expr: str, wall: datetime) -> datetime | None:
    """The first matching naive wall time strictly after `wall`; None if none."""
    return cronwall.compile(expr).next(wall)


def wall_prev(expr: str, wall: datetime) -> datetime | None:
    """The last matching naive wall time strictly before `wall`; None if none."""
    return cronwall.compile(expr).prev(wall)


# --- zone offsets and transitions ---------------------------------------------------


def offset(tz: ZoneInfo, t: datetime) -> timedelta:
    off = t.astimezone(tz).utcoffset()
    assert off is not None
    return off


def _naive(t: datetime, off: timedelta) -> datetime:
    return t.replace(tzinfo=None) + off


def _aware(wall: datetime, off: timedelta) -> datetime:
    return (wall - off).replace(tzinfo=UTC)


class NaiveInstant(ValueError):
    """An instant without a zone: the schedule never guesses the host's zone."""


def _check_aware(t: datetime) -> None:
    if t.tzinfo is None or t.utcoffset() is None:
        raise NaiveInstant(f"instant {t.isoformat()} has no zone: pass an aware datetime")


def floor_second(t: datetime) -> datetime:
    _check_aware(t)
    return t.astimezone(UTC).replace(microsecond=0)


def _bisect(tz: ZoneInfo, good: datetime, bad: datetime, off: timedelta) -> datetime:
    """Between `good` (offset `off`) and `bad` (another offset): the first second not at `off`."""
    while bad - good > SECOND:
        mid = good + SECOND * ((bad - good) // SECOND // 2)
        if offset(tz, mid) == off:
            good = mid
        else:
            bad = mid
    return bad


@functools.lru_cache(maxsize=4096)
def _transitions(tz: ZoneInfo, year: int) -> tuple[datetime, ...]:
    """The instants in (1 Jan `year`, 1 Jan `year + 1`] (UTC) where `tz`'s offset changes:
    each the first second at the new offset. Probed in day steps, once per zone and year."""
    p = datetime(year, 1, 1, tzinfo=UTC)
    end = datetime(year + 1, 1, 1, tzinfo=UTC) if year < 9999 else p.replace(month=12, day=31)
    found, off = [], offset(tz, p)
    while p < end:
        q = min(p + _DAY, end)
        changed = offset(tz, q)
        if changed != off:
            found.append(_bisect(tz, p, q, off))
            off = changed
        p = q
    return tuple(found)


def first_change(tz: ZoneInfo, lo: datetime, hi: datetime, off: timedelta) -> datetime | None:
    """The first second in (lo, hi] whose offset is not `off` (the offset at `lo`)."""
    for year in range(lo.year - 1, hi.year + 1):
        for t in _transitions(tz, year):
            if t > hi:
                return None
            if t > lo:
                return t
    return None


def segment_start(tz: ZoneInfo, lo: datetime, hi: datetime, off: timedelta) -> datetime | None:
    """Where the offset `off` (held at `hi`) began, if that is in (lo, hi]; else None."""
    for year in range(hi.year, lo.year - 2, -1):
        for t in reversed(_transitions(tz, year)):
            if t <= lo:
                return None
            if t <= hi:
                return t
    return None


def _second_occurrence(tz: ZoneInfo, t: datetime) -> bool:
    return t.astimezone(tz).fold == 1


def repeated(tz: ZoneInfo, t: datetime) -> bool:
    """Whether `t`'s wall time occurs twice (either occurrence)."""
    wall = t.astimezone(tz).replace(tzinfo=None)
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    return first != second and t in (first, second)


def _overlap_bounds(tz: ZoneInfo, t: datetime) -> tuple[datetime, datetime]:
    """For `t` in a second occurrence: the instants where that stretch begins and ends."""
    first = t.astimezone(tz).replace(fold=0).astimezone(UTC)
    start = segment_start(tz, first, t, offset(tz, t))
    assert start is not None
    return start, start + (t - first)


def gap_hit(r: CronRule, t: datetime) -> bool:
    """Whether `t` opens a spring gap that swallowed a wall time matching the rule."""
    before, after = offset(r.tz, t - SECOND), offset(r.tz, t)
    if after <= before:
        return False
    found = r.matcher.next(_naive(t, before) - SECOND)
    return found is not None and found < _naive(t, after)


# --- slots -------------------------------------------------------------------------


def next_slot(r: CronRule, after: datetime) -> datetime | None:
    """The first fire strictly after `after` (aware), in UTC; None if the rule never fires."""
    if r.fixed is not None:  # no transitions: the wall time's next match is the slot
        _check_aware(after)
        local = after.astimezone(UTC) + r.fixed  # its fields are the wall time (no `replace`)
        found = r.matcher.next_in(local, UTC)
        return found - r.fixed if found is not None and r.fixed else found
    lo = floor_second(after)  # walls strictly after lo's wall are searched
    seg, off = lo, offset(r.tz, lo)  # seg: an instant known to be at `off`
    for _ in range(_MAX_HOPS):
        wall = r.matcher.next(_naive(lo, off))
        if wall is None:
            return None
        x = _aware(wall, off)
        change = first_change(r.tz, seg, x, off)
        if change is None:
            if r.wildcard or not _second_occurrence(r.tz, x):
                return x
            seg = _overlap_bounds(r.tz, x)[1] - SECOND
            lo = seg
            continue
        if not r.wildcard and gap_hit(r, change):
            return change
        lo, seg, off = change - SECOND, change, offset(r.tz, change)
    raise RuntimeError(f"no slot found for {r.expr!r} within {_MAX_HOPS} zone transitions")


def latest_slot(r: CronRule, at: datetime) -> datetime | None:
    """The last fire at or before `at` (aware), in UTC; None if there is none."""
    hi = floor_second(at) + SECOND  # exclusive
    if r.fixed is not None:  # no transitions: the wall time's last match is the slot
        found = r.matcher.prev(_naive(hi, r.fixed))
        return None if found is None else _aware(found, r.fixed)
    off = offset(r.tz, hi - SECOND)
    for _ in range(_MAX_HOPS):
        wall = r.matcher.prev(_naive(hi, off))
        if wall is None:
            return None
        x = _aware(wall, off)
        start = segment_start(r.tz, x, hi - SECOND, off)
        if start is None:
            if r.wildcard or not _second_occurrence(r.tz, x):
                return x
            hi = _overlap_bounds(r.tz, x)[0]
        elif not r.wildcard and gap_hit(r, start):
            return start
        else:
            hi = start
        off = offset(r.tz, hi - SECOND)
    raise RuntimeError(f"no slot found for {r.expr!r} within {_MAX_HOPS} zone transitions")
