"""The suite's one wait for a condition no event announces (a process state, a counter).

Where a part announces what a test waits for, await it instead: the device's bus
(`await bus.next(RunFinished, ...)`), a FakeClock's `wait_for_sleepers`, or the
test's own `asyncio.Condition`. This helper is for what only looking again can see.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


async def eventually(
    probe: Callable[[], Awaitable[Any] | Any],
    timeout: float = 5.0,
    *,
    every: float = 0.01,
    what: str = "the condition",
) -> Any:
    """Look again every `every` seconds until `probe()` (awaited if it is a coroutine) is
    truthy, under a deadline; return what it gave. Past the deadline the test fails
    naming `what` and the last thing the probe gave."""
    found: Any = None
    try:
        async with asyncio.timeout(timeout):
            while True:
                found = probe()
                if asyncio.iscoroutine(found):
                    found = await found
                if found:
                    return found
                await asyncio.sleep(every)
    except TimeoutError:
        raise AssertionError(f"{what}: not within {timeout} s (last seen: {found!r})") from None
