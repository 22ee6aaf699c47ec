"""Agent turns and `Idempotency-Key` answers on both stores: a turn once (the same again
changes nothing, another under its id is refused), pruned per chat; an answer kept under its
key. On PostgreSQL two servers given one key at once: one answers it, the other waits and
replays that answer (on SQLite one server's `IN_FLIGHT` does this)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from core.vocab import TurnOutcome
from core.wire import TurnIn
from space.appstate import RunRetention
from space.http import Refusal
from space.store import Store
from space.store.logwire import Kept, LogQuery

SPACE = "home"
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
ALL = LogQuery(filters={}, since=None, limit=100)


def _turn(n: int, chat: str = "c1", outcome: TurnOutcome = TurnOutcome.OK) -> TurnIn:
    at = T0 + timedelta(seconds=n)
    return TurnIn(
        turnId=f"turn_{n}",
        space=SPACE,
        objectId=chat,
        messageIds=[f"m{n}"],
        calls=1,
        replies=1,
        startedAt=at,
        finishedAt=at,
        durationMs=1.0,
        outcome=outcome,
        peer="box",
    )


async def test_a_turn_is_written_once_and_another_under_its_id_is_refused(store: Store) -> None:
    keep = RunRetention()
    assert await store.post_turn(SPACE, _turn(1), keep) is True
    assert await store.post_turn(SPACE, _turn(1), keep) is False
    with pytest.raises(Refusal) as caught:
        await store.post_turn(SPACE, _turn(1, outcome=TurnOutcome.ERROR), keep)
    assert (caught.value.status, caught.value.code) == (409, "turn_exists")
    (shown,) = await store.turns_page(SPACE, ALL)
    assert (shown["turnId"], shown["startedAt"], shown["outcome"]) == (
        "turn_1",
        "2026-12-01T09:00:01.000Z",
        "ok",
    )


async def test_turns_are_pruned_per_chat_and_listed_by_chat_and_since(store: Store) -> None:
    keep = RunRetention(ok_per_trigger=2, failure_per_trigger=1)
    for n in range(5):
        await store.post_turn(SPACE, _turn(n), keep)
    await store.post_turn(SPACE, _turn(5, outcome=TurnOutcome.ERROR), keep)
    await store.post_turn(SPACE, _turn(6, outcome=TurnOutcome.TIMEOUT), keep)
    await store.post_turn(SPACE, _turn(7, chat="c2"), keep)
    ids = [t["turnId"] for t in await store.turns_page(SPACE, ALL)]
    assert ids == ["turn_3", "turn_4", "turn_6", "turn_7"]
    c1 = LogQuery(
        filters={"object_id": "c1"}, since=(T0 + timedelta(seconds=4)).timestamp(), limit=9
    )
    assert [t["turnId"] for t in await store.turns_page(SPACE, c1)] == ["turn_4", "turn_6"]


async def test_two_servers_posting_one_turn_write_it_once(store: Store, other_store: Store) -> None:
    keep = RunRetention()
    for n in range(10):
        made = await asyncio.gather(
            store.post_turn(SPACE, _turn(n), keep), other_store.post_turn(SPACE, _turn(n), keep)
        )
        assert sorted(made) == [False, True]


def _kept(digest: str, body: bytes = b'{"ok":true}') -> Kept:
    return Kept(digest=digest, status=201, content_type="application/json", headers="{}", body=body)


async def test_an_answer_kept_under_its_key_is_answered_again(store: Store) -> None:
    assert await store.kept_answer("admin:a", "k1", "d1") is None
    await store.keep_answer("admin:a", "k1", _kept("d1"))
    assert await store.kept_answer("admin:a", "k1", "d1") == _kept("d1")
    assert await store.kept_answer("admin:a", "k1", "other") == _kept("d1")  # `replayed` 422s
    assert await store.kept_answer("device:b", "k1", "d1") is None  # keys are per token


async def test_a_key_given_up_is_free_for_a_retry(store: Store) -> None:
    assert await store.kept_answer("admin:a", "k1", "d1") is None
    await store.drop_key("admin:a", "k1")  # a 5xx: nothing kept
    assert await store.kept_answer("admin:a", "k1", "d1") is None
    await store.keep_answer("admin:a", "k1", _kept("d1"))
    await store.drop_key("admin:a", "k1")  # a kept answer is never dropped
    assert await store.kept_answer("admin:a", "k1", "d1") == _kept("d1")


@pytest.mark.parametrize("store_target", ["postgres"], indirect=True)
async def test_two_servers_given_one_key_at_once_answer_it_once(
    store: Store, other_store: Store
) -> None:
    for n in range(10):
        key, body = f"k{n}", f"answer {n}".encode()
        calls = [
            asyncio.ensure_future(s.kept_answer("admin:a", key, "d")) for s in (store, other_store)
        ]
        done, _ = await asyncio.wait(calls, return_when=asyncio.FIRST_COMPLETED)
        (first,) = done  # one server is given the key to answer
        assert first.result() is None
        (waiting,) = [c for c in calls if c is not first]
        ahead, _ = await asyncio.wait([waiting], timeout=0.2)
        assert not ahead  # the other waits while it is being answered
        await (store, other_store)[calls.index(first)].keep_answer("admin:a", key, _kept("d", body))
        replay = await asyncio.wait_for(waiting, 5)  # and replays that answer
        assert replay is not None and replay.body == body
