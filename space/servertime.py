"""The space server's notion of time: one injectable function, and how instants go on the wire.

Owns `ServerClock` (a zero-argument function returning an aware UTC datetime),
the system clock used by default (`core.clock.SystemClock`), and hands on
the one wire format of instants (`core.vocab.iso`). Handlers ask the app's
clock, never the machine, so tests control it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from core.clock import SystemClock
from core.vocab import iso

__all__ = ["ServerClock", "epoch", "iso", "system_clock"]

ServerClock = Callable[[], datetime]
_SYSTEM = SystemClock()


def system_clock() -> datetime:
    return _SYSTEM.wall()


def epoch(when: datetime) -> float:
    return when.timestamp()
