"""The space server's notion of time: one injectable function, and how instants go on the wire.

Owns `ServerClock` (a zero-argument function returning an aware UTC datetime),
the system clock used by default (the runtime's `SystemClock`), and RFC 3339
formatting. Handlers ask the app's clock, never the machine, so tests control it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated

import msgspec

from runtime.clock import SystemClock

ServerClock = Callable[[], datetime]
Aware = Annotated[datetime, msgspec.Meta(tz=True)]
"""An instant on the wire: RFC 3339 with an offset (msgspec refuses a naive one)."""
_SYSTEM = SystemClock()


def system_clock() -> datetime:
    return _SYSTEM.wall()


def iso(when: datetime) -> str:
    """RFC 3339 in UTC with milliseconds, e.g. `2026-12-01T09:00:00.000Z`."""
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def epoch(when: datetime) -> float:
    return when.timestamp()
