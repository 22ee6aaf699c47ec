"""The bounds a trigger record is held to, and the checks of its marker-typed values.

Owns what SPEC "Bad input" calls the bounds the runtime computes within:
`graceSeconds` 0 … 7 days, `once.at` within years 1970 … 9999 in UTC, `limits` (a run's
timeout ≤ 1 day, its memory ≤ 1 TiB, its queue ≤ 100,000), integers in `args` within
64 bits and floats finite, a cron expression that matches at least once in 28 years,
a program reference `name@vN` or `internal:<name>`. The marker
types (`CronExpr`, `TimeZoneName`, `RefText`) are checked by the decode hook, so
a bad value fails with the field's own path. `records` builds its Structs on these.

Pure: no I/O beyond reading the zone database, no clock reads.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec

from triggers import cronfields, cronwall

MAX_GRACE_SECONDS = 7 * 24 * 3600.0
CRON_LATEST_GRACE = 3600.0
"""Default `graceSeconds` of a cron trigger with `catchup: "latest"`."""
LIVE_SLACK = 30.0
"""How late a tick may reach a slot of a `catchup: "none"` trigger and still fire it (its
default `graceSeconds`)."""
AT_MIN = datetime(1970, 1, 1, tzinfo=UTC)
AT_MAX = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
CRON_HORIZON_YEARS = 28
"""A cron expression must match within this many years (every calendar repeats in 28)."""
PROGRAM_REF = re.compile(r"[a-z0-9][a-z0-9_-]*@v[1-9][0-9]{0,17}|internal:[a-z0-9][a-z0-9_-]*")

MAX_TIMEOUT_SECONDS = 24 * 3600.0
MAX_MEMORY_MB = 1024 * 1024
MAX_QUEUE = 100_000
MAX_DISK_MB = 1024 * 1024

Grace = Annotated[float, msgspec.Meta(ge=0, le=MAX_GRACE_SECONDS)]
TimeoutSeconds = Annotated[float, msgspec.Meta(gt=0, le=MAX_TIMEOUT_SECONDS)]
MemoryMB = Annotated[int, msgspec.Meta(gt=0, le=MAX_MEMORY_MB)]
DiskMB = Annotated[int, msgspec.Meta(gt=0, le=MAX_DISK_MB)]
QueueLength = Annotated[int, msgspec.Meta(ge=0, le=MAX_QUEUE)]
UnixSeconds = Annotated[float, msgspec.Meta(ge=AT_MIN.timestamp(), le=AT_MAX.timestamp())]


# Marker types: checked by `_dec_hook`, so a bad value fails with the field's own path.
class CronExpr(str):
    """A cron expression: 5 fields, or 6 with seconds first."""

    __slots__ = ()  # no `__dict__`: one shared instance per distinct value


class TimeZoneName(str):
    """An IANA time zone name."""

    __slots__ = ()  # no `__dict__`: one shared instance per distinct value


class RefText(str):
    """`name@vN` or `internal:<name>`."""

    __slots__ = ()  # no `__dict__`: one shared instance per distinct value


def cron_fields(expr: str) -> tuple[str, ...]:
    """Split and check a cron expression; raise ValueError naming what is wrong."""
    cronwall.compile(expr)
    return tuple(expr.split())


def check_cron(expr: str) -> None:
    """A record's cron expression: valid (`cron_fields`) and matching within 28 years.

    The common grammar is judged without a slot search (`cronfields.matches_every_leap_cycle`:
    28 years hold three 8-year stretches); the rest by its first slot from 2000-01-01."""
    matcher = cronwall.compile(expr)
    if matcher.fields is not None and cronfields.matches_every_leap_cycle(matcher.fields):
        return
    first = matcher.next(datetime(2000, 1, 1)) if matcher.fields is None else None
    if first is None or first >= datetime(2000 + CRON_HORIZON_YEARS, 1, 1):
        raise ValueError(
            f"cron expression {expr!r} never matches within {CRON_HORIZON_YEARS} years"
        )


def zone(name: str) -> ZoneInfo:
    """The zone named `name`; ValueError if there is none."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r}") from None


def check_args(args: dict[str, Any]) -> None:
    """Refuse integers beyond 64 bits and floats that are not finite anywhere in `args`.

    Iterative: stored args may nest deeper than the stack. The message names the path."""
    if not args:
        return
    stack: list[tuple[Any, str]] = [(args, "$.args")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            stack.extend((v, f"{path}.{k}") for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(node))
        elif type(node) is int and not INT64_MIN <= node <= INT64_MAX:
            raise ValueError(f"args: integer beyond 64 bits - at `{path}`")
        elif type(node) is float and not math.isfinite(node):
            raise ValueError(f"args: number {node} is not finite - at `{path}`")


def check_program_ref(ref: str) -> None:
    if not PROGRAM_REF.fullmatch(ref):
        raise ValueError(f"program {ref!r} is not `name@vN` or `internal:<name>`")


_CHECKS: dict[type, Callable[[str], object]] = {
    CronExpr: check_cron,
    TimeZoneName: zone,
    RefText: check_program_ref,
}


_CHECKED: dict[type, dict[str, str]] = {typ: {} for typ in _CHECKS}
"""Checked marker values by text: records repeat a few expressions and zones, and each
record shares the one checked string (the key is that string itself)."""


def dec_hook(typ: type, obj: Any) -> Any:
    checked = _CHECKED.get(typ)
    if checked is None:
        raise NotImplementedError(typ)
    if not isinstance(obj, str):
        raise TypeError(f"Expected `str`, got `{type(obj).__name__}`")
    found = checked.get(obj)
    if found is None:
        found = typ(obj)
        _CHECKS[typ](found)  # so a cron expression's parse is cached under this very string
        cronwall.remember(checked, found, found)
    return found


def enc_hook(obj: Any) -> Any:
    if isinstance(obj, str):  # the marker types above
        return str(obj)
    raise NotImplementedError(type(obj))


def within_calendar(at: datetime) -> bool:
    """Whether `at` lies in 1970 … 9999 in UTC (its offset may push it off the calendar)."""
    try:
        return AT_MIN <= at.astimezone(UTC) <= AT_MAX
    except OverflowError:
        return False
