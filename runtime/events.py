"""The device's event bus: what one part announces and the others react to.

Owns five event types and one `Bus`: a part publishes its news, the device subscribes the
parts that react, so who hears what is written in one place (`runtime.device`).
`publish()` is synchronous, in subscription order; a handler that raises is logged and the
others still run. `next()` awaits the next event of a type, for tests and waiters.
Must not decide anything: it only delivers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from triggers.registry import Diff

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DiffApplied:
    """The reconciler changed what this device has armed (never an empty diff)."""

    diff: Diff


@dataclass(frozen=True)
class RecordEdited:
    """A feed change touched a record's user fields (armed here or not)."""


@dataclass(frozen=True)
class RoleChanged:
    """`may_fire()` turned: True when this device gained the lease, False when it stopped
    (or, already stopped, lost the lease it held)."""

    active: bool
    term: int


@dataclass(frozen=True)
class Slept:
    """The machine slept or its wall clock jumped by `jump` seconds beyond monotonic time."""

    jump: float
    at: datetime  # the wall clock when it was seen


@dataclass(frozen=True)
class RunFinished:
    """A fire ended on this device and the recorder has written its run record and stamps."""

    trigger_id: str
    run_id: str
    status: str  # an outcome status value: ok, error, timeout, crashed, rejected, skipped
    reason: str = ""


E = TypeVar("E")
Handler = Callable[[Any], object]


class Bus:
    """Synchronous, typed publish/subscribe inside one device."""

    def __init__(self) -> None:
        self._handlers: dict[type, list[Handler]] = {}
        self._waiters: list[tuple[type, Callable[[Any], bool] | None, asyncio.Future[Any]]] = []

    def subscribe(self, kind: type[E], handler: Callable[[E], object]) -> Callable[[], None]:
        """Call `handler(event)` for every published `kind`; returns how to unsubscribe."""
        handlers = self._handlers.setdefault(kind, [])
        handlers.append(handler)
        return lambda: handlers.remove(handler) if handler in handlers else None

    def publish(self, event: object) -> None:
        for handler in list(self._handlers.get(type(event), ())):
            try:
                handler(event)
            except Exception:
                log.exception("events: a %s handler failed", type(event).__name__)
        self._resolve(event)

    async def next(self, kind: type[E], predicate: Callable[[E], bool] | None = None) -> E:
        """The next published `kind` (matching `predicate`); wrap in a deadline."""
        future: asyncio.Future[E] = asyncio.get_running_loop().create_future()
        entry = (kind, predicate, future)
        self._waiters.append(entry)
        try:
            return await future
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)

    def _resolve(self, event: object) -> None:
        for kind, predicate, future in list(self._waiters):
            if type(event) is not kind or future.done():
                continue
            try:
                matched = predicate is None or predicate(event)
            except Exception as exc:  # the waiter's bug: raise it in the waiter, not here
                future.set_exception(exc)
                continue
            if matched:
                future.set_result(event)
