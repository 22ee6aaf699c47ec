"""Chats on both stores of the seam: listed, their seq, edits by `chat_store.edited`'s rules,
history pages, a resume's gap and replay by the store's clock; two servers appending to one
chat at once give each seq once, gapless and in commit order, to readers on either."""

from __future__ import annotations

import asyncio
import json

import pytest
from waiting import eventually

from core.chatwire import AgentIn, MessageEdit, MessageIn
from space.chat_store import NotEditable, UnknownChat
from space.store import Store

SPACE = "home"
WINDOW = 1.0  # seconds: the old messages age past it, the recent one is read well within it


async def test_chats_are_listed_oldest_first_with_their_seq(store: Store, other_store: Store):
    first = await store.create_chat(SPACE, "general")
    second = await other_store.create_chat(SPACE, "ops")
    await other_store.create_chat("elsewhere", "general")
    await store.add_message(SPACE, second.objectId, MessageIn(text="a"))
    listed = await other_store.chats(SPACE)
    assert listed == sorted(listed, key=lambda c: (c.createdAt, c.objectId))  # oldest first
    assert {c.objectId: c.lastSeq for c in listed} == {first.objectId: 0, second.objectId: 1}
    assert first in listed and first.createdAt <= second.createdAt
    assert await store.chat_seq(SPACE, second.objectId) == 1
    assert await store.chat_seq(SPACE, first.objectId) == 0
    for space, chat in ((SPACE, "chat_nope"), ("elsewhere", first.objectId)):
        with pytest.raises(UnknownChat):
            await other_store.chat_seq(space, chat)


async def test_an_agent_message_is_edited_until_done_and_then_refused(
    store: Store, other_store: Store
) -> None:
    chat = await store.create_chat(SPACE, "general")
    agent = AgentIn(name="watch", done=False)
    sent, _ = await store.add_message(SPACE, chat.objectId, MessageIn(text="He", agent=agent))
    mine, _ = await store.add_message(SPACE, chat.objectId, MessageIn(text="mine"))
    grown, body = await other_store.edit_message(
        chat.objectId, sent.message_id, MessageEdit(text="Hello")
    )
    assert (grown.text, grown.seq, grown.created_at) == ("Hello", sent.seq, sent.created_at)
    assert json.loads(body)["agent"] == {"name": "watch", "done": False}
    done, _ = await store.edit_message(chat.objectId, sent.message_id, MessageEdit(done=True))
    assert done.text == "Hello" and done.agent is not None and done.agent.done
    before = await other_store.messages_since(chat.objectId, 0, 10)
    for target in (sent.message_id, mine.message_id):
        with pytest.raises(NotEditable):
            await other_store.edit_message(chat.objectId, target, MessageEdit(text="x"))
    for chat_id, target in (("chat_nope", sent.message_id), (chat.objectId, "msg_nope")):
        with pytest.raises(UnknownChat):
            await store.edit_message(chat_id, target, MessageEdit(text="x"))
    assert await store.messages_since(chat.objectId, 0, 10) == before
    assert json.loads(before[0][1])["text"] == "Hello"


async def test_two_servers_editing_one_message_at_once_lose_no_edit(
    store: Store, other_store: Store
) -> None:
    chat = await store.create_chat(SPACE, "general")
    agent = AgentIn(name="watch", done=False)
    sent, _ = await store.add_message(SPACE, chat.objectId, MessageIn(text="", agent=agent))
    edits = [MessageEdit(text=f"v{n}") for n in range(20)] + [MessageEdit(done=True)]

    async def edit(n: int, change: MessageEdit) -> str:
        try:
            message, _ = await (store, other_store)[n % 2].edit_message(
                chat.objectId, sent.message_id, change
            )
        except NotEditable:
            return "refused"
        return "done" if message.agent and message.agent.done else message.text

    outcomes = await asyncio.gather(*(edit(n, e) for n, e in enumerate(edits)))
    assert outcomes.count("done") == 1  # one edit ended it; each later one was refused
    (row,) = await store.messages_since(chat.objectId, 0, 10)
    stored = json.loads(row[1])
    assert stored["agent"]["done"] is True and stored["seq"] == sent.seq
    assert stored["text"] in {"", *(o for o in outcomes if o.startswith("v"))}


async def test_history_pages_oldest_first_and_the_newest_page(store: Store) -> None:
    chat = await store.create_chat(SPACE, "general")
    for n in range(7):
        await store.add_message(SPACE, chat.objectId, MessageIn(text=f"m{n}"))
    assert [s for s, _ in await store.messages_since(chat.objectId, 2, 3)] == [3, 4, 5]
    assert [s for s, _ in await store.latest_messages(chat.objectId, 0, 3)] == [5, 6, 7]
    assert [s for s, _ in await store.latest_messages(chat.objectId, 5, 10)] == [6, 7]
    assert await store.latest_messages(chat.objectId, 7, 10) == []
    assert await store.latest_messages("chat_nope", 0, 10) == []
    (seq, body), *_ = await store.latest_messages(chat.objectId, 0, 7)
    assert seq == 1 and json.loads(body)["text"] == "m0"


async def test_a_resume_skips_what_is_older_than_the_window_by_the_stores_clock(
    store: Store,
) -> None:
    chat = await store.create_chat(SPACE, "general")
    for n in range(2):
        await store.add_message(SPACE, chat.objectId, MessageIn(text=f"old {n}"))
    gap, since = await store.resume_gap(chat.objectId, 0, 2, 60.0)
    assert gap is None and await store.replay(chat.objectId, 0, 2, since, 10) != []

    async def aged() -> bool:
        found, _ = await store.resume_gap(chat.objectId, 0, 2, WINDOW)
        return found == (1, 2, 2)

    await eventually(aged, 10, what=f"both messages older than a {WINDOW} s window")
    await store.add_message(SPACE, chat.objectId, MessageIn(text="recent"))
    gap, since = await store.resume_gap(chat.objectId, 0, 3, WINDOW)
    assert gap == (1, 2, 2)
    replayed = await store.replay(chat.objectId, 0, 3, since, 10)
    assert [seq for seq, _ in replayed] == [3] and json.loads(replayed[0][1])["text"] == "recent"
    assert await store.replay(chat.objectId, 0, 2, since, 10) == []  # `upto` bounds it
    gap, _ = await store.resume_gap(chat.objectId, 1, 3, WINDOW)
    assert gap == (2, 2, 1)  # only what is after the cursor


async def test_two_servers_appending_to_one_chat_give_each_seq_once_in_commit_order(
    store: Store, other_store: Store
) -> None:
    chat = await store.create_chat(SPACE, "general")
    writers, each = 6, 40
    total = writers * each
    seen: dict[int, list[int]] = {0: [], 1: []}

    async def write(w: int) -> list[int]:
        seqs = []
        for n in range(each):
            message, _ = await (store, other_store)[w % 2].add_message(
                SPACE, chat.objectId, MessageIn(text=f"{w}.{n}")
            )
            seqs.append(message.seq)
        return seqs

    async def read(r: int) -> None:
        """A reader by seq on either server: a seq committed out of order would be
        skipped for good, since the cursor has passed it."""
        cursor = 0
        while cursor < total:
            rows = await (store, other_store)[r].messages_since(chat.objectId, cursor, 50)
            for seq, _ in rows:
                seen[r].append(seq)
                cursor = seq
            if not rows:
                await asyncio.sleep(0.001)  # yield to the writers; the deadline bounds it

    async with asyncio.timeout(60):
        results = await asyncio.gather(*(write(w) for w in range(writers)), read(0), read(1))
    for seqs in results[:writers]:
        assert seqs == sorted(seqs)  # a writer's next message commits after its last
    assert sorted(s for seqs in results[:writers] for s in seqs) == list(range(1, total + 1))
    assert seen[0] == seen[1] == list(range(1, total + 1))
    rows = await other_store.messages_since(chat.objectId, 0, total + 1)
    created = [json.loads(body)["createdAt"] for _, body in rows]
    assert created == sorted(created) and await store.chat_seq(SPACE, chat.objectId) == total
