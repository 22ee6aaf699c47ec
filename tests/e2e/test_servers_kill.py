"""A takeover test whose holder's server is SIGKILLed mid-run, on PostgreSQL.

The body is the SQLite suite's (tests/e2e/test_failover.py), collected again with `house`
a `KillingHousehold` (pg_household.py): once the cron has fired, the `baton space serve`
process the holder talks to is SIGKILLed and started again on its port — at once (the
holder keeps its term), or once the device on the other server has taken the lease
over — while that other device stays up; then the test goes on. Its checks are
unchanged: every slot since the record was created fired once (none lost to the
outage, none claimed twice by the holder and a standby), and nothing is replayed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pg_household import KillingHousehold, pg_house
from test_failover import (
    Household,
    test_a_holder_killed_and_back_within_its_lease_loses_nothing_while_standbys_were_up,
)

__all__ = ["test_a_holder_killed_and_back_within_its_lease_loses_nothing_while_standbys_were_up"]


@pytest.fixture(params=["back at once", "back after a takeover"])
async def house(
    tmp_path: Path, pg_dsn: str, request: pytest.FixtureRequest
) -> AsyncIterator[Household]:
    async with pg_house(tmp_path, pg_dsn, KillingHousehold) as killing:
        assert isinstance(killing, KillingHousehold)
        killing.away_past_the_lease = request.param == "back after a takeover"
        yield killing
        (outage,), ((before, after),) = killing.outages, killing.terms
        print(f"server outage: {outage:.1f} s from SIGKILL to listening; term {before} → {after}")
        assert (after > before) == killing.away_past_the_lease  # the case it says it is
