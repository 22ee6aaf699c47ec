"""Suite-wide hygiene: no asyncio task may outlive the test that started it."""

import asyncio
import inspect

import pytest


@pytest.fixture(autouse=True)
async def no_pending_tasks(request: pytest.FixtureRequest):
    yield
    if not inspect.iscoroutinefunction(request.function):
        return
    me = asyncio.current_task()
    for _ in range(3):  # let cancelled tasks finish unwinding
        left = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
        if not left:
            return
        await asyncio.sleep(0)
    pytest.fail(f"tasks left pending: {left}")
