# ruff: noqa: F811  (pytest fixtures imported from device_support are parameters here)
"""chat-watch's turns land in the space's `agent_turns`, and its record's rollup counts them.

A device in this process answers a message of the general chat through the built-in
responder; the turn is then listed by `GET …/turns` with that message id, and the
chat-watch record is stamped: one more conversation start in `rollup`, `lastStatus`
and `lastRunAt` from the turn. The count goes on from the record's stamp, so it follows
the record from device to device.
"""

from __future__ import annotations

from typing import Any

from device_support import (  # noqa: F401  (the fixtures are used by name)
    SPACE,
    MakeDevice,
    Space,
    eventually,
    make_device,
    space,
    spaces,
)

from programs import rollup
from runtime.fire.bodies import stamped_rollup
from triggers.records import RESERVED_CHAT_WATCH as CHAT_WATCH


async def turns_of(space: Space, message_id: str) -> list[dict[str, Any]]:
    listing = await space.api.turns(SPACE, chat=space.general, limit=1000)
    return [t for t in listing["turns"] if message_id in t["messageIds"]]


async def until_starts(space: Space, starts: int) -> dict[str, Any]:
    async def stamped() -> dict[str, Any] | None:
        record = await space.record(CHAT_WATCH)
        return record if rollup.from_dict(record.get("rollup")).starts == starts else None

    return await eventually(stamped)


async def test_an_answered_message_leaves_one_turn_and_one_conversation_start(
    space: Space, make_device: MakeDevice
):
    dev = await make_device()
    await dev.active()
    await dev.live(space.general, CHAT_WATCH)
    sent = await space.send(space.general, "hello there")

    record = await until_starts(space, 1)
    (found,) = await turns_of(space, sent.message_id)
    assert found["outcome"] == "ok" and found["replies"] == 1, found
    assert (found["space"], found["objectId"]) == (SPACE, space.general)
    assert len((await space.api.turns(SPACE))["turns"]) == 1
    assert record["lastStatus"] == "ok" and record["lastRunAt"] is not None
    counted = rollup.from_dict(record["rollup"])
    assert (counted.starts, counted.runs) == (1, 0)  # a turn is not a run record
    assert (await space.api.runs(SPACE, trigger=CHAT_WATCH))["runs"] == []


async def test_the_count_goes_on_from_the_records_stamp(space: Space, make_device: MakeDevice):
    dev = await make_device()
    await dev.active()
    await dev.live(space.general, CHAT_WATCH)
    earlier = rollup.to_dict(rollup.Rollup(starts=4))  # as another device left it
    await space.api.trigger_status(SPACE, CHAT_WATCH, {"rollup": earlier})
    records = dev.device.reconciler.records
    await eventually(lambda: stamped_rollup(records.get(CHAT_WATCH)).starts == 4)

    sent = await space.send(space.general, "and again")
    await until_starts(space, 5)
    assert len(await turns_of(space, sent.message_id)) == 1
