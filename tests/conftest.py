"""Suite-wide hygiene: no asyncio task may outlive the test that started it.

Every test under tests/e2e/ is marked `e2e` (as are, by hand, a few elsewhere that run a
server or the CLI as a process), so `pytest -m "not e2e"` and `pytest -m e2e` are the two
jobs of `.ci/run`.
"""

import asyncio
import inspect
from pathlib import Path

import pytest
from pgfixtures import pg_cluster, pg_dsn  # noqa: F401  # PostgreSQL for every test dir

E2E = Path(__file__).resolve().parent / "e2e"
UNWIND_S = 5.0  # what a task still running at teardown has to end in, on a busy machine


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if E2E in item.path.parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(autouse=True)
async def no_pending_tasks(request: pytest.FixtureRequest):
    yield
    if not inspect.iscoroutinefunction(request.function):
        return
    me = asyncio.current_task()
    left = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    if left:  # cancelled ones unwinding, a request handler's shielded write finishing
        await asyncio.wait(left, timeout=UNWIND_S)
        left = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    if left:
        pytest.fail(f"tasks left pending {UNWIND_S:g} s after the test: {left}")
