"""One contract for trigger records on both stores: ids, compare-and-set, stamps, names, feed.

Every test runs against the SQLite store and the PostgreSQL store (the `store` fixture).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from space import trigger_store
from space.history import Author
from space.http import Refusal
from space.store import Store

SPACE = "home"
ADMIN = Author("admin", "by hand")


def _cron(name: str = "nightly", **kw: Any) -> dict[str, Any]:
    return {"name": name, "kind": "cron", "spec": {"expr": "0 3 * * *"}, "program": "p@v1", **kw}


async def _get(store: Store, tid: str) -> tuple[int, dict[str, Any]]:
    return trigger_store.flagged(SPACE, tid, await store.record_row(SPACE, tid))


async def _refused(call: Any) -> Refusal:
    with pytest.raises(Refusal) as caught:
        await call
    return caught.value


async def test_a_created_record_has_a_fresh_id_rev_one_and_its_change(store: Store) -> None:
    one = await store.create_record(SPACE, _cron("a"), ADMIN)
    two = await store.create_record(SPACE, _cron("b"), ADMIN)
    assert one["id"] != two["id"] and one["id"].startswith("trg_")
    assert one["rev"] == 1 and one["createdAt"] == one["updatedAt"] == one["activeSince"]
    rev, stored = await _get(store, one["id"])
    assert rev == 1 and stored["name"] == "a"
    feed = await store.changes_since(SPACE, 0, 10)
    assert await store.latest_seq(SPACE) == 2
    assert [(c["seq"], c["op"], c["triggerId"]) for c in feed] == [
        (1, "create", one["id"]),
        (2, "create", two["id"]),
    ]


async def test_a_patch_with_the_stored_rev_wins_and_a_stale_one_is_refused(store: Store) -> None:
    tid = (await store.create_record(SPACE, _cron(), ADMIN))["id"]
    patched = await store.patch_record(SPACE, tid, {"enabled": False}, 1, ADMIN)
    assert patched["rev"] == 2 and patched["enabled"] is False
    refused = await _refused(store.patch_record(SPACE, tid, {"enabled": True}, 1, ADMIN))
    assert (refused.status, refused.code) == (409, "rev_mismatch")
    assert (await _get(store, tid))[0] == 2  # the refused patch changed nothing


async def test_concurrent_patches_at_one_rev_give_exactly_one_winner(store: Store) -> None:
    tid = (await store.create_record(SPACE, _cron(), ADMIN))["id"]
    notes = [{"args": {"writer": n}} for n in range(10)]
    got = await asyncio.gather(
        *(store.patch_record(SPACE, tid, note, 1, ADMIN) for note in notes),
        return_exceptions=True,
    )
    won = [g for g in got if isinstance(g, dict)]
    assert len(won) == 1 and won[0]["rev"] == 2
    assert all(isinstance(g, Refusal) and g.code == "rev_mismatch" for g in got if g not in won)


async def test_a_stamp_keeps_rev_and_updated_at_and_an_unchanged_one_writes_nothing(
    store: Store,
) -> None:
    made = await store.create_record(SPACE, _cron(), ADMIN)
    stamped, wrote = await store.stamp_record(SPACE, made["id"], {"lastStatus": "ok"}, None, None)
    assert wrote and stamped["rev"] == 1 and stamped["updatedAt"] == made["updatedAt"]
    again, wrote = await store.stamp_record(SPACE, made["id"], {"lastStatus": "ok"}, None, None)
    assert not wrote and again["lastStatus"] == "ok"
    assert [c["op"] for c in await store.changes_since(SPACE, 0, 10)] == ["create", "stamp"]


async def test_names_are_unique_in_a_space_even_for_concurrent_creates(store: Store) -> None:
    got = await asyncio.gather(
        *(store.create_record(SPACE, _cron("same"), ADMIN) for _ in range(6)),
        return_exceptions=True,
    )
    won = [g for g in got if isinstance(g, dict)]
    assert len(won) == 1
    assert all(isinstance(g, Refusal) and g.code == "name_taken" for g in got if g not in won)
    other = await store.create_record(SPACE, _cron("other"), ADMIN)
    refused = await _refused(store.patch_record(SPACE, other["id"], {"name": "same"}, None, ADMIN))
    assert refused.code == "name_taken" and refused.extra["id"] == won[0]["id"]


async def test_a_delete_frees_the_name_never_the_id_and_is_a_change(store: Store) -> None:
    made = await store.create_record(SPACE, _cron(), ADMIN)
    refused = await _refused(store.delete_record(SPACE, made["id"], 7, ADMIN))
    assert refused.code == "rev_mismatch"
    await store.delete_record(SPACE, made["id"], 1, ADMIN)
    gone = await _refused(_get(store, made["id"]))
    assert (gone.status, gone.code) == (404, "unknown_trigger")
    again = await store.create_record(SPACE, _cron(), ADMIN)
    assert again["id"] != made["id"]
    ops = [(c["op"], c["rev"]) for c in await store.changes_since(SPACE, 0, 10)]
    assert ops == [("create", 1), ("delete", 2), ("create", 1)]


async def test_records_are_paged_by_id(store: Store) -> None:
    made = sorted([(await store.create_record(SPACE, _cron(n), ADMIN))["id"] for n in "abcde"])
    first, after = await store.records_page(SPACE, "", 3, stored=False)
    assert [r["id"] for r in first] == made[:3] and after == made[2]  # type: ignore[index]
    rest, end = await store.records_page(SPACE, after, 3, stored=False)
    assert [r["id"] for r in rest] == made[3:] and end is None  # type: ignore[index]


async def test_a_bad_record_is_refused_naming_the_field_and_stores_nothing(store: Store) -> None:
    refused = await _refused(store.create_record(SPACE, {"name": "x", "kind": "nope"}, ADMIN))
    assert refused.status == 400 and "kind" in refused.detail
    assert await store.changes_since(SPACE, 0, 10) == []


async def test_a_reserved_record_is_created_once_of_concurrent_puts(store: Store) -> None:
    spec = {"dataset": "chat_messages", "objectId": "cht_general"}
    watch = {"kind": "event", "spec": spec, "program": "internal:chat-watch"}
    tid = "chat-watch"
    got = await asyncio.gather(
        *(store.create_reserved_record(SPACE, tid, watch, ADMIN) for _ in range(5))
    )
    assert sorted(created for _, created in got) == [False, False, False, False, True]
    assert {record["id"] for record, _ in got} == {tid}
    assert [c["op"] for c in await store.changes_since(SPACE, 0, 10)] == ["create"]
    refused = await _refused(store.create_reserved_record(SPACE, "mine", watch, ADMIN))
    assert (refused.status, refused.code) == (400, "not_reserved")


async def test_a_named_reserved_record_put_through_two_servers_at_once_is_created_once(
    store: Store, other_store: Store
) -> None:
    """Devices on two servers seed chat-watch together: its name's unique index must not
    refuse the second (a 500 it was), the id's conflict answers the first's record."""
    spec = {"dataset": "chat_messages", "objectId": "cht_general"}
    watch = {"kind": "event", "name": "chat-watch", "spec": spec, "program": "internal:chat-watch"}
    for round_ in range(8):  # the race is narrow: several rounds, each a fresh space
        space = f"race{round_}"
        got = await asyncio.gather(
            *(
                (store, other_store)[n % 2].create_reserved_record(
                    space, "chat-watch", watch, ADMIN
                )
                for n in range(8)
            )
        )
        assert sorted(created for _, created in got) == [False] * 7 + [True]
        assert {record["name"] for record, _ in got} == {"chat-watch"}
