"""Takeovers with the devices spread over two `baton space serve` on one PostgreSQL database.

The bodies are the SQLite suite's (tests/e2e/test_failover.py, test_trigger_policies.py),
collected here again with `house` on PostgreSQL (`pg_household.pg_house`): the holder's
successor talks to the other server, and every claim, run and turn is checked by the
test's admin client through a third. The two kept hand the most across servers: a clean
stop (cron, event and chat-watch go to a device on the other server) and a retry due
after its holder died; a SIGKILLed holder back within its lease runs spread too, under
each server kill (test_servers_kill.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pg_household import pg_house
from test_failover import (
    Household,
    test_nothing_from_before_a_record_existed_and_nothing_lost_at_a_clean_stop,
)
from test_trigger_policies import test_a_retry_due_after_its_holder_died_is_run_once_by_the_next

__all__ = [
    "test_a_retry_due_after_its_holder_died_is_run_once_by_the_next",
    "test_nothing_from_before_a_record_existed_and_nothing_lost_at_a_clean_stop",
]


@pytest.fixture
async def house(tmp_path: Path, pg_dsn: str) -> AsyncIterator[Household]:
    async with pg_house(tmp_path, pg_dsn) as spread:
        yield spread
