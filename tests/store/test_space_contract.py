"""Spaces and programs' state on both stores of the seam: a space comes with its general
chat and is created once however many servers try; `identify` is a token's lookup with its
space's existence; a state PUT replaces the value whole, stamped by the store's clock, and
two servers writing one key leave one of the writes whole."""

from __future__ import annotations

import asyncio

import pytest

from space.http import Refusal
from space.store import Store
from space.token_store import Principal, Role, TokenError

SPACE = "home"


async def test_a_space_comes_with_its_general_chat_and_is_listed_by_id(
    store: Store, other_store: Store
) -> None:
    made = await store.create_space(SPACE, "Home")
    assert (made.id, made.name) == (SPACE, "Home") and made.generalChat
    assert made.createdAt is not None and made.createdAt.endswith("Z")
    (chat,) = await other_store.chats(SPACE)
    assert (chat.objectId, chat.name, chat.createdAt) == (
        made.generalChat,
        "general",
        made.createdAt,
    )
    await other_store.create_space("attic", "attic")
    assert [s.id for s in await store.spaces()] == ["attic", SPACE]
    assert await other_store.spaces(SPACE) == [made]
    assert await store.spaces("nope") == []
    assert await other_store.space_exists(SPACE) and not await other_store.space_exists("nope")


async def test_of_servers_creating_one_space_at_once_one_does_and_the_rest_are_refused(
    store: Store, other_store: Store
) -> None:
    async def create(n: int) -> str:
        try:
            return (await (store, other_store)[n % 2].create_space(SPACE, f"by {n}")).name
        except Refusal as exc:
            assert (exc.status, exc.code) == (409, "space_exists")
            return ""

    names = await asyncio.gather(*(create(n) for n in range(10)))
    assert len([n for n in names if n]) == 1
    (space,) = await store.spaces()
    assert space.name in names
    assert [c.objectId for c in await other_store.chats(SPACE)] == [space.generalChat]


async def test_identify_is_the_tokens_lookup_and_whether_its_space_exists(
    store: Store, other_store: Store
) -> None:
    await store.create_space(SPACE, SPACE)
    token = await store.mint_token(Principal(role=Role.DEVICE, peer="box", space=SPACE))
    who, found = await other_store.identify(token, SPACE)
    assert (who.role, who.peer, who.space, found) == (Role.DEVICE, "box", SPACE, True)
    assert (await store.identify(token, "nope"))[1] is False
    listed = [t for t in await store.list_tokens() if t["id"] == who.id]
    assert listed[0]["lastUsedAt"] is not None  # noted as a lookup notes it
    await store.revoke_token(who.id)
    for bad, code in ((token, "token_revoked"), (token + "x", "unauthorized")):
        with pytest.raises(TokenError) as caught:
            await other_store.identify(bad, SPACE)
        assert caught.value.code == code


async def test_state_is_replaced_whole_and_stamped_by_the_stores_clock(
    store: Store, other_store: Store
) -> None:
    assert await store.state(SPACE, "t1", "cursor") is None
    first = await store.put_state(SPACE, "t1", "cursor", '{"after": 1}')
    assert first.endswith("Z") and len(first) == 24  # RFC 3339, milliseconds
    assert await other_store.state(SPACE, "t1", "cursor") == ('{"after": 1}', first)
    second = await other_store.put_state(SPACE, "t1", "cursor", "[2]")
    assert second >= first
    assert await store.state(SPACE, "t1", "cursor") == ("[2]", second)
    for space, tid, key in (("elsewhere", "t1", "cursor"), (SPACE, "t2", "cursor")):
        assert await store.state(space, tid, key) is None
    assert await store.state(SPACE, "t1", "other") is None


async def test_two_servers_writing_one_key_at_once_leave_one_write_whole(
    store: Store, other_store: Store
) -> None:
    async def put(n: int) -> tuple[str, str]:
        value = f'{{"writer": {n}}}'
        return value, await (store, other_store)[n % 2].put_state(SPACE, "t1", "k", value)

    written = await asyncio.gather(*(put(n) for n in range(20)))
    stored = await store.state(SPACE, "t1", "k")
    assert stored in written  # the value with the instant its own write answered
    assert await other_store.state(SPACE, "t1", "k") == stored
