"""The space server's notion of time: one injectable function, and how instants go on the wire.

Owns `ServerClock` (a zero-argument function returning an aware UTC datetime),
the system clock used by default (`core.clock.SystemClock`), and RFC 3339
formatting. Handlers ask the app's clock, never the machine, so tests control it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated

import msgspec

from core.clock import SystemClock, iso

__all__ = ["Aware", "ServerClock", "epoch", "iso", "system_clock"]

ServerClock = Callable[[], datetime]
Aware = Annotated[datetime, msgspec.Meta(tz=True)]
"""An instant on the wire: RFC 3339 with an offset (msgspec refuses a naive one)."""
_SYSTEM = SystemClock()


def system_clock() -> datetime:
    return _SYSTEM.wall()


def epoch(when: datetime) -> float:
    return when.timestamp()
