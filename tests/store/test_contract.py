"""One contract for both stores of the seam: the election, fire claims and the feed's `seq`.

Every test runs against the SQLite store and the PostgreSQL store (the `store` fixture);
what a store decides by its own clock (the lease's expiry) is waited for with a short
lease, never slept over.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from functools import partial

import pytest
from waiting import eventually

from core.chatwire import MessageIn
from space import leases
from space.change_log import Change
from space.chat_store import UnknownChat
from space.servertime import iso
from space.store import Claimed, ClaimIn, Stale, Store, Taken

SPACE = "home"
LONG = timedelta(seconds=15)
SHORT = timedelta(seconds=1)  # lapses soon, yet a loaded machine still claims within it


def _claim(key: str, peer: str = "a", term: int = 1, **kw: object) -> ClaimIn:
    fields = {"space": SPACE, "trigger_id": "t1", "key": key, "term": term, "peer": peer}
    return ClaimIn(**{"floating": True, **fields, **kw})  # type: ignore[arg-type]


async def _acquire(store: Store, peer: str, term: int, length: timedelta = LONG) -> leases.Lease:
    change = await store.change_lease(SPACE, partial(_acquiring, peer, term, length))
    assert change.new is not None, f"{peer} could not acquire at term {term}: {change.old}"
    return change.new


def _acquiring(peer: str, term: int, length: timedelta, lease: leases.Lease, now):  # type: ignore[no-untyped-def]
    return leases.acquire(lease, peer, term, now, length)


async def test_a_free_lease_is_acquired_at_the_next_term_for_its_length(store: Store) -> None:
    lease, _ = await store.lease(SPACE)
    assert lease == leases.Lease()
    change = await store.change_lease(SPACE, partial(_acquiring, "a", 0, LONG))
    assert change.new is not None and change.new.active == "a" and change.new.term == 1
    assert change.new.expires_at == change.now + LONG
    held, now = await store.lease(SPACE)
    assert held == change.new and not held.lapsed(now)


async def test_a_held_lease_refuses_another_peer_and_renews_for_its_holder(store: Store) -> None:
    first = await _acquire(store, "a", 0)
    refused = await store.change_lease(SPACE, partial(_acquiring, "b", 1, LONG))
    assert refused.new is None and refused.old == first
    renewed = await _acquire(store, "a", 1)
    assert renewed.term == 1 and renewed.expires_at is not None
    assert first.expires_at is not None and renewed.expires_at >= first.expires_at


async def test_a_lapsed_lease_is_taken_over_and_the_old_term_is_fenced(store: Store) -> None:
    await _acquire(store, "a", 0, SHORT)
    assert isinstance(await store.claim(_claim("k1")), Claimed)

    async def lapsed() -> bool:
        lease, now = await store.lease(SPACE)
        return lease.lapsed(now)

    await eventually(lapsed, what="the short lease lapsing by the store's clock")
    stale = await store.claim(_claim("k2"))
    assert isinstance(stale, Stale) and stale.lease.term == 1
    taken = await _acquire(store, "b", 1)
    assert taken.term == 2 and taken.active == "b"
    old = await store.claim(_claim("k3"))
    assert isinstance(old, Stale) and old.lease.active == "b" and old.lease.term == 2
    assert isinstance(await store.claim(_claim("k3", peer="b", term=2)), Claimed)


async def test_handover_gives_the_next_term_and_release_frees_it(store: Store) -> None:
    await _acquire(store, "a", 0)
    step = partial(leases.handover, peer="a", term=1, to="b", length=LONG)
    handed = await store.change_lease(SPACE, lambda lease, now: step(lease, now=now))
    assert handed.new is not None and (handed.new.active, handed.new.term) == ("b", 2)
    freed = await store.change_lease(SPACE, lambda lease, now: leases.release(lease, "b", 2, now))
    assert freed.new is not None and freed.new.active is None and freed.new.term == 2
    lease, now = await store.lease(SPACE)
    assert lease.lapsed(now) and lease.term == 2


async def test_fifty_concurrent_claims_of_one_key_give_exactly_one_claimed(store: Store) -> None:
    await _acquire(store, "a", 0)
    claims = [_claim("2026-12-01T08:00:00Z", claim_id=f"c{n}") for n in range(50)]
    outcomes = await asyncio.gather(*(store.claim(c) for c in claims))
    won = [o for o in outcomes if isinstance(o, Claimed)]
    assert len(won) == 1
    assert all(
        isinstance(o, Taken) and o.peer == "a" and o.term == 1 for o in outcomes if o not in won
    )
    assert {o.claimed_at for o in outcomes if isinstance(o, Taken)} == {won[0].claimed_at}


async def test_a_pinned_claim_is_not_fenced_by_the_lease_and_still_once(store: Store) -> None:
    claims = [_claim("m1", peer=f"p{n}", term=0, floating=False) for n in range(20)]
    outcomes = await asyncio.gather(*(store.claim(c) for c in claims))
    assert sum(isinstance(o, Claimed) for o in outcomes) == 1


async def test_a_resent_claim_answers_its_first_instant(store: Store) -> None:
    await _acquire(store, "a", 0)
    first = await store.claim(_claim("k", claim_id="once"))
    again = await store.claim(_claim("k", claim_id="once"))
    other = await store.claim(_claim("k", claim_id="another"))
    assert isinstance(first, Claimed) and again == first
    assert isinstance(other, Taken) and other.claimed_at == first.claimed_at


async def test_no_claim_is_claimed_under_a_term_after_it_was_replaced(store: Store) -> None:
    """Claims at term 1 race a takeover: every one claimed began before term 2 did."""
    await _acquire(store, "a", 0, SHORT)
    claimed: list[str] = []

    async def claims() -> None:
        for n in range(100_000):
            outcome = await store.claim(_claim(f"k{n}"))
            if isinstance(outcome, Stale):
                return
            assert isinstance(outcome, Claimed)
            claimed.append(outcome.claimed_at)

    async def takeover() -> str:
        while True:
            change = await store.change_lease(SPACE, partial(_acquiring, "b", 1, LONG))
            if change.new is not None:
                return iso(change.now)
            await asyncio.sleep(0.005)  # the next attempt, as a device's election loop does

    claiming = asyncio.create_task(claims())
    began = await asyncio.wait_for(takeover(), 10)
    await asyncio.wait_for(claiming, 10)
    assert claimed, "no claim was made before the takeover"
    assert max(claimed) <= began


async def test_eight_writers_give_each_seq_once_in_order_to_a_tailing_reader(store: Store) -> None:
    writers, each = 8, 250
    seen: list[int] = []

    async def write(w: int) -> list[int]:
        return [
            await store.append_change(Change(SPACE, f"t{w}", "update", n, "{}", "at"))
            for n in range(each)
        ]

    async def tail(done: asyncio.Event) -> None:
        while True:
            finished = done.is_set()
            page = await store.changes_since(SPACE, seen[-1] if seen else 0, 500)
            got = [c["seq"] for c in page]
            start = seen[-1] + 1 if seen else 1
            assert got == list(range(start, start + len(got))), (
                f"a gap after {start - 1}: {got[:5]}"
            )
            seen.extend(got)
            if finished and not got:
                return
            await asyncio.sleep(0)

    done = asyncio.Event()
    reader = asyncio.create_task(tail(done))
    given = await asyncio.gather(*(write(w) for w in range(writers)))
    done.set()
    await asyncio.wait_for(reader, 10)
    assert seen == list(range(1, writers * each + 1))
    assert sorted(s for g in given for s in g) == seen
    assert all(g == sorted(g) for g in given)


async def test_the_feed_answers_its_rows_as_the_api_shows_them(store: Store) -> None:
    seq = await store.append_change(
        Change(SPACE, "t1", "create", 1, '{"id":"t1","rev":1}', "2026-12-01T08:00:00.000Z")
    )
    assert await store.changes_since(SPACE, 0, 10) == [
        {
            "seq": seq,
            "triggerId": "t1",
            "op": "create",
            "rev": 1,
            "at": "2026-12-01T08:00:00.000Z",
            "record": {"id": "t1", "rev": 1},
        }
    ]
    assert await store.changes_since("elsewhere", 0, 10) == []


async def test_a_writers_own_stamps_are_named_only_to_that_writer(store: Store) -> None:
    at = "2026-12-01T08:00:00.000Z"
    body = '{"id":"t1","rev":1}'
    seqs = [
        await store.append_change(
            Change(SPACE, "t1", "create", 1, body, at, "box/a")
        ),  # not a stamp
        await store.append_change(Change(SPACE, "t1", "stamp", 1, body, at, "box/a")),
        await store.append_change(Change(SPACE, "t1", "stamp", 1, body, at, "cart/a")),
        await store.append_change(Change(SPACE, "t1", "stamp", 1, body, at)),
    ]
    mine = await store.changes_since(SPACE, 0, 10, "box/a")
    assert [c["seq"] for c in mine] == seqs  # every seq, gapless
    assert mine[1] == {"seq": seqs[1], "omitted": True}
    assert [c["record"] for c in mine if "omitted" not in c] == [{"id": "t1", "rev": 1}] * 3
    everyone = await store.changes_since(SPACE, 0, 10)
    assert all(c["op"] and c["record"] == {"id": "t1", "rev": 1} for c in everyone)
    assert await store.changes_since(SPACE, seqs[0], 1, "box/a") == [mine[1]]


async def test_a_message_to_a_chat_that_does_not_exist_is_refused(store: Store) -> None:
    with pytest.raises(UnknownChat):
        await store.add_message(SPACE, "chat_nope", MessageIn(text="hi"))
    chat = await store.create_chat(SPACE, "general")
    with pytest.raises(UnknownChat):
        await store.add_message("elsewhere", chat.objectId, MessageIn(text="hi"))
    assert await store.messages_since(chat.objectId, 0, 10) == []


async def test_eight_writers_to_one_chat_give_a_gapless_seq_in_commit_order(store: Store) -> None:
    chat = await store.create_chat(SPACE, "general")
    assert chat.lastSeq == 0 and chat.objectId.startswith("chat_")

    async def write(w: int) -> None:
        for n in range(50):
            message, body = await store.add_message(
                SPACE, chat.objectId, MessageIn(text=f"{w}.{n}")
            )
            assert json.loads(body)["seq"] == message.seq

    await asyncio.gather(*(write(w) for w in range(8)))
    rows = await store.messages_since(chat.objectId, 0, 1000)
    assert [seq for seq, _ in rows] == list(range(1, 401))
    messages = [json.loads(body) for _, body in rows]
    assert sorted(m["text"] for m in messages) == sorted(
        f"{w}.{n}" for w in range(8) for n in range(50)
    )
    created = [m["createdAt"] for m in messages]
    assert created == sorted(created)  # the instant grows with seq
    assert [seq for seq, _ in await store.messages_since(chat.objectId, 398, 10)] == [399, 400]
