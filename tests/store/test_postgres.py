"""What only the PostgreSQL store has: its migrations, several servers on one database,
the claim's `FOR SHARE` fence holding a takeover back, the history of terms in the
lease's transaction."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from functools import partial

import asyncpg
import pytest
from pgcluster import Cluster
from waiting import eventually

from space import leases
from space.store import Claimed, ClaimIn, Stale, Taken
from space.store.pgschema import MIGRATIONS, NewerStore
from space.store.postgres import _CLAIM, PostgresStore

SPACE = "home"


def _acquire(peer: str, term: int, seconds: float):  # type: ignore[no-untyped-def]
    return lambda lease, now: leases.acquire(lease, peer, term, now, timedelta(seconds=seconds))


async def test_three_servers_opening_a_new_database_at_once_migrate_it_once(
    pg_cluster: Cluster,
) -> None:
    name = pg_cluster.next_name()
    pg_cluster.create_database(name, template="template0")
    stores = await asyncio.gather(*(PostgresStore.open(pg_cluster.dsn(name)) for _ in range(3)))
    try:
        rows = await stores[0].pool.fetch("SELECT version FROM baton_schema ORDER BY version")
        assert [r["version"] for r in rows] == list(range(1, len(MIGRATIONS) + 1))
    finally:
        await asyncio.gather(*(s.close() for s in stores))


async def test_a_connection_back_in_the_pool_is_not_reset_but_its_transaction_is_rolled_back(
    pg_dsn: str,
) -> None:
    """The store leaves no session state, so a release sends no reset query (asyncpg's
    `RESET ALL`, `UNLISTEN *`, …: a round trip a release); a transaction left open is
    still rolled back before the connection serves again."""
    store = await PostgresStore.open(pg_dsn, max_size=1)
    try:
        sent: list[str] = []
        async with store.pool.acquire() as conn:
            conn.add_query_logger(lambda record: sent.append(record.query))
            backend = conn.get_server_pid()
            await conn.execute("BEGIN")
            await conn.execute("CREATE TABLE left_open (x int)")
        async with store.pool.acquire() as again:
            assert again.get_server_pid() == backend  # the same connection, back from the pool
            assert not again.is_in_transaction()
            assert await again.fetchval("SELECT to_regclass('left_open')") is None
        assert "ROLLBACK" in sent, sent  # what asyncpg sends on release is seen here
        assert not any("RESET" in q or "UNLISTEN" in q for q in sent), sent
    finally:
        await store.close()


async def test_a_database_of_a_newer_build_is_refused_naming_both_versions(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    await conn.execute("INSERT INTO baton_schema (version) VALUES (99)")
    await conn.close()
    with pytest.raises(NewerStore, match=f"version 99; this build knows {len(MIGRATIONS)}"):
        await PostgresStore.open(pg_dsn)


async def test_fifty_claims_spread_over_three_servers_give_exactly_one_claimed(
    pg_dsn: str,
) -> None:
    servers = [await PostgresStore.open(pg_dsn, max_size=5) for _ in range(3)]
    try:
        assert (await servers[1].change_lease(SPACE, _acquire("a", 0, 15))).new is not None
        claims = [
            ClaimIn(space=SPACE, trigger_id="t", key="slot", term=1, peer="a", floating=True)
            for _ in range(50)
        ]
        outcomes = await asyncio.gather(*(servers[n % 3].claim(c) for n, c in enumerate(claims)))
        assert sum(isinstance(o, Claimed) for o in outcomes) == 1
        assert sum(isinstance(o, Taken) for o in outcomes) == 49
    finally:
        for server in servers:
            await server.close()


async def test_a_handover_waits_for_a_claim_in_flight_under_the_term_it_replaces(
    pg_dsn: str,
) -> None:
    store = await PostgresStore.open(pg_dsn)
    claim = await asyncpg.connect(pg_dsn)
    try:
        await store.change_lease(SPACE, _acquire("a", 0, 15))
        tx = claim.transaction()
        await tx.start()
        at = await claim.fetchval(_CLAIM, SPACE, "t", "k", 1, "a", "", True)
        assert at is not None  # claimed under term 1, not yet committed, lease row FOR SHARE
        hand = partial(leases.handover, peer="a", term=1, to="b", length=timedelta(seconds=15))
        handover = asyncio.create_task(
            store.change_lease(SPACE, lambda lease, now: hand(lease, now=now))
        )
        waiting = (
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE '%FOR UPDATE%'"
        )
        await eventually(lambda: store.pool.fetchval(waiting), what="the handover waiting")
        assert not handover.done()
        await tx.commit()
        change = await asyncio.wait_for(handover, 10)
        assert change.new is not None and (change.new.active, change.new.term) == ("b", 2)
        stale = await store.claim(
            ClaimIn(space=SPACE, trigger_id="t", key="k2", term=1, peer="a", floating=True)
        )
        assert isinstance(stale, Stale) and stale.lease.term == 2
    finally:
        await claim.close()
        await store.close()


async def test_the_history_of_terms_is_written_with_the_lease(pg_dsn: str) -> None:
    store = await PostgresStore.open(pg_dsn)
    try:
        first = await store.change_lease(SPACE, _acquire("a", 0, 0.3))
        assert first.new is not None

        async def lapsed() -> bool:
            lease, now = await store.lease(SPACE)
            return lease.lapsed(now)

        await eventually(lapsed, what="term 1 lapsing")
        second = await store.change_lease(SPACE, _acquire("b", 1, 15))
        rows = await store.pool.fetch(
            "SELECT term, holder, began, ended, how FROM history_terms ORDER BY term"
        )
        assert [tuple(r) for r in rows] == [
            (1, "a", first.now, first.new.expires_at, "expired"),
            (2, "b", second.now, None, None),
        ]
    finally:
        await store.close()
