"""How a device's calls to its space are retried: a few tries, close together, on no answer
or a failing space.

Owns the one retry policy of space calls (`retried`, through `core.aio.retry` on the
Clock): no answer at all or a 5xx is transient and tried again after 0.5 s, then 1 s;
any other refusal is the caller's to judge at once. Used by the fire path (claims, run
tokens, run writes). `retried_for` keeps trying (0.5 s, 1 s, then every 2 s) for a
window instead (a takeover's bridge: a space restart must not cost it). Must not know
what a call asks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from core.aio import Backoff, retry
from core.clock import Clock
from core.routes import ApiError

T = TypeVar("T")

SPACE_RETRY = Backoff(base=0.5, cap=2.0, jitter=False)  # waits 0.5 s, then 1 s
SPACE_TRIES = 3  # a space restart costs no claim nor write; no jitter keeps that window whole


def transient(exc: Exception) -> bool:
    """A refusal worth retrying: no answer at all, or the space failed (5xx)."""
    return isinstance(exc, ApiError) and (exc.status == 0 or exc.status >= 500)


async def retried(work: Callable[[], Awaitable[T]], clock: Clock) -> T:
    """`work()`, tried again after a transient refusal (`SPACE_TRIES` tries in all);
    the last refusal, or one that is not transient, is raised."""
    return await retry(
        work, clock=clock, backoff=SPACE_RETRY, attempts=SPACE_TRIES, retry_if=transient
    )


async def retried_for(
    work: Callable[[], Awaitable[T]],
    clock: Clock,
    seconds: float,
    *,
    still: Callable[[], bool] = lambda: True,
    on_failure: Callable[[Exception, float], object] | None = None,
) -> T:
    """`work()`, tried again after a transient refusal for up to `seconds` (while `still()`
    holds); the last refusal, or one that is not transient, is raised."""
    return await retry(
        work,
        clock=clock,
        backoff=SPACE_RETRY,
        retry_if=lambda exc: transient(exc) and still(),
        on_failure=on_failure,
        until=clock.monotonic() + seconds,
    )
