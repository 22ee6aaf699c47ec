"""The suite's one wait for a condition no event announces (a process state, a counter).

Where a part announces what a test waits for, await it instead: the device's bus
(`await bus.next(RunFinished, ...)`), a FakeClock's `wait_for_sleepers`, or the
test's own `asyncio.Condition`. This helper is for what only looking again can see.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def eventually(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait for `predicate()` under a deadline, looking again every few milliseconds."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)
