"""The claim route's path on both stores: the fence, the key once, the run's token, by the
store's clock (the route answers what `claim_fire` and `claim_list` answer)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from functools import partial
from typing import Any

import pytest

from core.wire import FireIn, RunAsk
from space import leases
from space.history import Author
from space.http import Refusal
from space.servertime import iso
from space.store import Store

SPACE = "home"
ADMIN = Author("admin", "by hand")
MARGIN = 30.0


async def _floating(store: Store) -> dict[str, Any]:
    body = {"name": "tick", "kind": "cron", "spec": {"expr": "* * * * * *"}, "program": "p@v1"}
    return await store.create_record(SPACE, body, ADMIN)


async def _acquire(store: Store, peer: str, term: int, seconds: float) -> None:
    step = partial(_acquiring, peer, term, timedelta(seconds=seconds))
    change = await store.change_lease(SPACE, step)
    assert change.new is not None, change.old


def _acquiring(peer: str, term: int, length: timedelta, lease: leases.Lease, now):  # type: ignore[no-untyped-def]
    return leases.acquire(lease, peer, term, now, length)


async def _outcome(call: Any) -> dict[str, Any] | Refusal:
    try:
        return dict(await call)
    except Refusal as exc:
        return exc


async def test_fifty_concurrent_claims_of_one_slot_give_one_claim_and_49_refusals(
    store: Store,
) -> None:
    record = await _floating(store)
    await _acquire(store, "a", 0, 15)
    fire = FireIn(triggerId=record["id"], key=record["activeSince"], term=1, peer="a")
    outcomes = await asyncio.gather(
        *(_outcome(store.claim_fire(SPACE, fire, MARGIN)) for _ in range(50))
    )
    won = [o for o in outcomes if isinstance(o, dict)]
    assert len(won) == 1 and won[0]["key"] == record["activeSince"]
    assert {o.code for o in outcomes if isinstance(o, Refusal)} == {"already_claimed"}
    listed = await store.fires_page(SPACE, record["id"], 10)
    assert [(f["key"], f["claimedAt"]) for f in listed] == [(fire.key, won[0]["claimedAt"])]


async def test_a_claim_is_fenced_by_the_lease_and_a_run_gets_its_token(store: Store) -> None:
    record = await _floating(store)
    fire = FireIn(triggerId=record["id"], key=record["activeSince"], term=1, peer="a")
    refused = await _outcome(store.claim_fire(SPACE, fire, MARGIN))
    assert isinstance(refused, Refusal) and refused.code == "stale_term"  # nobody holds it
    await _acquire(store, "a", 0, 15)
    asked = FireIn(**{**_fields(fire), "run": RunAsk(runId="run_1", ttlSeconds=10)})
    claimed = await store.claim_fire(SPACE, asked, MARGIN)
    assert claimed["token"].startswith("btr_") and claimed["expiresAt"] > claimed["claimedAt"]
    results = await store.claim_list(SPACE, [fire, FireIn(**{**_fields(fire), "peer": "b"})], 30)
    assert [(r["status"], r.get("error")) for r in results] == [
        (409, "already_claimed"),
        (409, "stale_term"),
    ]


def _fields(fire: FireIn) -> dict[str, Any]:
    return {n: getattr(fire, n) for n in fire.__struct_fields__}


@pytest.mark.parametrize("lease_s", [1.0])
async def test_no_route_claim_commits_under_a_term_after_it_was_replaced(
    store: Store, lease_s: float
) -> None:
    """Claims at term 1 race a takeover: every one claimed was claimed before term 2 began."""
    record = await _floating(store)
    await _acquire(store, "a", 0, lease_s)
    claimed: list[str] = []

    async def claims() -> None:
        for n in range(100_000):
            fire = FireIn(triggerId=record["id"], key=f"k{n}", term=1, peer="a")
            outcome = await _outcome(store.claim_fire(SPACE, fire, MARGIN))
            if isinstance(outcome, Refusal):
                assert outcome.code == "stale_term", outcome.detail
                return
            claimed.append(outcome["claimedAt"])

    async def takeover() -> str:
        while True:
            change = await store.change_lease(
                SPACE, partial(_acquiring, "b", 1, timedelta(seconds=15))
            )
            if change.new is not None:
                return iso(change.now)
            await asyncio.sleep(0.005)  # the next attempt, as a device's election loop does

    claiming = asyncio.create_task(claims())
    began = await asyncio.wait_for(takeover(), 10)
    await asyncio.wait_for(claiming, 10)
    assert claimed, "no claim was made before the takeover"
    assert max(claimed) <= began


async def test_a_run_asked_is_a_write_at_the_next_rev_and_its_key_is_claimed_once_by_the_owner(
    store: Store,
) -> None:
    body = {"name": "lamp", "kind": "cron", "spec": {"expr": "0 0 1 1 *"}, "program": "p@v1"}
    record = await store.create_record(SPACE, {**body, "owner": "box"}, ADMIN)
    stale = await _outcome(store.ask_run(SPACE, record["id"], 7, ADMIN))
    assert isinstance(stale, Refusal) and stale.code == "rev_mismatch"
    asked = await store.ask_run(SPACE, record["id"], 1, ADMIN)
    ask = asked["runAsked"]
    assert asked["rev"] == 2 and ask["key"] == "manual:" + ask["requestedAt"]
    assert ask["requestedAt"] == asked["updatedAt"] >= record["updatedAt"]
    feed = await store.changes_since(SPACE, 0, 10)
    assert [(c["op"], c["rev"]) for c in feed] == [("create", 1), ("update", 2)]
    fire = FireIn(triggerId=record["id"], key=ask["key"], term=0, peer="box")
    outcomes = await asyncio.gather(
        *(_outcome(store.claim_fire(SPACE, fire, MARGIN)) for _ in range(10)),
        _outcome(store.claim_fire(SPACE, FireIn(**{**_fields(fire), "peer": "laptop"}), MARGIN)),
    )
    assert sum(isinstance(o, dict) for o in outcomes) == 1
    refused = sorted(o.code for o in outcomes if isinstance(o, Refusal))
    assert refused == ["already_claimed"] * 9 + ["not_owner"]
