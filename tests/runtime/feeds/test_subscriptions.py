"""Chat subscriptions against a real space server on 127.0.0.1 (SQLite in tmp_path).

The registry diff comes from the real `reconcile`; the Dispatcher is a recorder (the
seam to the firing pipeline). The runtime clock is a FakeClock, so a stream's backoff
and the re-probe wait end only when the test moves time; the server's clock is set by
the test too. "Nothing more fired" is shown by a later sentinel message of the same
chat, since a chat's fires come in seq order.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from faultproxy import FaultProxy
from waiting import eventually

from core.chatwire import Message
from core.clock import FakeClock
from runtime.client.api import SpaceClient
from runtime.client.seat import Seat
from runtime.feeds.chats import Subscriptions
from runtime.feeds.followed import ChatMessage, active_for
from runtime.fire.dispatch import FireRequest
from space.app import create_app, default_admin_token_file
from space.chats import TOPICS
from space.streams import STREAMS
from triggers.diffing import reconcile
from triggers.records import Loaded, PeerId, load
from triggers.registry import Registry, apply

SPACE = "home"
ME = PeerId("dev_a")


class ServerClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


class Recorder:
    """The Dispatcher seam: records each request; raises for texts in `fail`."""

    def __init__(self) -> None:
        self.fired: list[FireRequest] = []
        self.fail: set[str] = set()
        self.batches: list[int] = []  # how many fires each hand-over carried
        self.changed = asyncio.Condition()

    async def fire(self, *requests: FireRequest) -> None:
        async with self.changed:
            self.fired.extend(requests)
            self.batches.append(len(requests))
            self.changed.notify_all()
        if any(r.event and r.event["text"] in self.fail for r in requests):
            raise RuntimeError("the dispatcher broke")

    def texts(self, tid: str) -> list[str]:
        return [r.event["text"] for r in self.fired if r.trigger.id == tid]

    async def until(self, predicate: Callable[[Recorder], bool]) -> None:
        async with asyncio.timeout(5), self.changed:
            await self.changed.wait_for(lambda: predicate(self))


def event_record(tid: str, chat: str, **fields: Any) -> Loaded:
    body = {"id": tid, "kind": "event", "name": tid, "program": "triage@v1", "rev": 1}
    body |= {"spec": {"dataset": "chat_messages", "objectId": chat}, **fields}
    return load(body)


class World:
    """A space server, a client on a FakeClock, the recorder and the Subscriptions."""

    def __init__(self, server: Any, db: Path, client: SpaceClient, clock: FakeClock) -> None:
        self.server, self.db, self.client, self.clock = server, db, client, clock
        self.server_clock = ServerClock()
        self.recorder = Recorder()
        seat = Seat(client, SPACE, ME, clock)
        self.subs = Subscriptions(seat, self.recorder, reprobe_s=5.0)
        self.registry = Registry()
        self.general = self.other = ""

    def arm(self, *records: Loaded, bridge_from: datetime | None = None) -> None:
        diff = reconcile(self.registry, list(records), ME, True)
        self.registry = apply(self.registry, diff)
        self.subs.apply(diff)
        if bridge_from is not None:
            self.subs.bridge(bridge_from)

    async def send(self, chat: str, text: str, **fields: Any) -> Message:
        return await self.client.chat_send(SPACE, chat, {"text": text, **fields})

    def chat(self, object_id: str) -> dict[str, Any]:
        found = next(c for c in self.subs.status() if c.chat == object_id)
        return msgspec.to_builtins(found)  # as `baton status` reads it

    async def live(self, *chats: str) -> None:
        await eventually(lambda: all(self.chat(c)["lastId"] is not None for c in chats))

    def streams(self, chat: str) -> int:
        return self.server.app[TOPICS].count(chat)


@pytest.fixture
async def world(tmp_path: Path, aiohttp_server: Any):
    db = tmp_path / "space.db"
    server_clock = ServerClock()
    server = await aiohttp_server(create_app(db, clock=server_clock))
    token = default_admin_token_file(db).read_text().strip()
    clock = FakeClock()
    async with SpaceClient(str(server.make_url("/")), token, clock=clock) as client:
        w = World(server, db, client, clock)
        w.server_clock = server_clock
        w.general = (await client.space_create({"id": SPACE})).generalChat
        w.other = (await client.chat_create(SPACE, {"name": "other"}))["objectId"]
        try:
            yield w
        finally:
            await w.subs.close()


async def drive(clock: FakeClock) -> None:
    """End every backoff and re-probe sleep as soon as it begins."""
    while True:
        await clock.wait_for_sleepers()
        clock.advance_to_next()


async def stop(task: asyncio.Task) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_one_subscription_per_chat_and_each_message_fires_each_trigger_once(world):
    w = world
    args = {"space": "bao"}
    w.arm(
        event_record("trg_1", w.general, args=args),
        event_record("trg_2", w.general),
        event_record("trg_3", w.other),
    )
    await w.live(w.general, w.other)
    assert [c.triggers for c in w.subs.status()] in (
        [["trg_1", "trg_2"], ["trg_3"]],
        [["trg_3"], ["trg_1", "trg_2"]],
    )
    assert (w.streams(w.general), w.streams(w.other)) == (1, 1)
    a1 = await w.send(w.general, "a1")
    await w.send(w.general, "bot says", agent={"name": "triage", "done": True})
    await w.send(w.other, "b1")
    await w.send(w.general, "a2")
    await w.recorder.until(lambda r: len(r.fired) == 5)
    assert w.recorder.texts("trg_1") == w.recorder.texts("trg_2") == ["a1", "a2"]
    assert w.recorder.texts("trg_3") == ["b1"]
    first = next(r for r in w.recorder.fired if r.trigger.id == "trg_1")
    assert first.key == a1.message_id
    assert first.due_at == datetime.fromisoformat(a1.created_at)
    assert first.event == {
        "space": SPACE,
        "objectId": w.general,
        "messageId": a1.message_id,
        "text": "a1",
    }
    assert first.trigger.args == args  # the firing pipeline merges args, not this
    keys = [(r.trigger.id, r.key) for r in w.recorder.fired]
    assert len(keys) == len(set(keys))


async def test_agent_messages_fire_only_chat_watch(world):
    w = world
    watch = event_record("chat-watch", w.general, program="internal:chat-watch")
    w.arm(watch, event_record("trg_1", w.general))
    await w.live(w.general)
    await w.send(w.general, "reply", agent={"name": "chat-watch", "done": True})
    await w.send(w.general, "nudge", agent={"name": "trigger:daily"})
    await w.send(w.general, "hi")
    await w.recorder.until(lambda r: len(r.texts("chat-watch")) == 3)
    assert w.recorder.texts("chat-watch") == ["reply", "nudge", "hi"]
    assert w.recorder.texts("trg_1") == ["hi"]
    agent = next(r.event for r in w.recorder.fired if r.event["text"] == "nudge")["agent"]
    assert agent == {"name": "trigger:daily"}


async def test_live_only_nothing_from_before_the_subscription_or_while_unarmed(world):
    w = world
    await w.send(w.general, "before 1")
    await w.send(w.general, "before 2")
    trg = event_record("trg_1", w.general)
    w.arm(trg)
    await w.live(w.general)
    await w.send(w.general, "after")
    await w.recorder.until(lambda r: len(r.fired) == 1)
    w.arm()  # the last trigger of the chat goes: its subscription closes
    assert w.subs.status() == []
    await eventually(lambda: w.streams(w.general) == 0)
    await w.send(w.general, "while unarmed")
    w.arm(trg)
    await w.live(w.general)
    await w.send(w.general, "again")
    await w.recorder.until(lambda r: len(r.fired) == 2)
    assert w.recorder.texts("trg_1") == ["after", "again"]


@pytest.mark.parametrize("how", ["restart", "streams cut"])
async def test_a_server_side_drop_loses_nothing_and_repeats_nothing(world, aiohttp_server, how):
    w = world
    w.arm(event_record("trg_1", w.general))
    await w.live(w.general)
    await w.send(w.general, "m1")
    await w.recorder.until(lambda r: len(r.fired) == 1)
    if how == "restart":
        port = w.server.port
        await w.server.close()
        w.server = await aiohttp_server(create_app(w.db, clock=w.server_clock), port=port)
    else:
        w.server.app[STREAMS].close_all("cut")
    await w.clock.wait_for_sleepers()  # the stream is down, its backoff waits on the clock
    await w.send(w.general, "m2")  # accepted while the stream was down
    await w.send(w.general, "m3")
    driver = asyncio.create_task(drive(w.clock))
    try:
        await w.recorder.until(lambda r: len(r.fired) == 3)
        await w.send(w.general, "m4")
        await w.recorder.until(lambda r: len(r.fired) == 4)
    finally:
        await stop(driver)
    assert w.recorder.texts("trg_1") == ["m1", "m2", "m3", "m4"]
    assert w.chat(w.general)["connections"] == 2


async def test_update_and_rearm_keep_the_subscription_and_use_the_current_record(world):
    w = world
    w.arm(event_record("trg_1", w.general, args={"v": 1}))
    await w.live(w.general)
    w.arm(event_record("trg_1", w.general, args={"v": 2}, rev=2))  # update
    w.arm(event_record("trg_1", w.general, args={"v": 3}, owner=ME, rev=3))  # rearm
    await w.send(w.general, "m1")
    await w.recorder.until(lambda r: len(r.fired) == 1)
    assert w.recorder.fired[0].trigger.args == {"v": 3}
    assert w.chat(w.general)["connections"] == 1
    assert w.streams(w.general) == 1
    w.arm(event_record("trg_1", w.other, owner=ME, rev=4))  # moves to another chat
    await w.live(w.other)
    assert [c.chat for c in w.subs.status()] == [w.other]
    await w.send(w.other, "m2")
    await w.recorder.until(lambda r: len(r.fired) == 2)
    await eventually(lambda: w.streams(w.general) == 0)


def add_chat(db: Path, object_id: str) -> None:
    """The chat appears in the space (as if synced from another device)."""
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO chats (object_id, space, name, created_at) VALUES (?, ?, ?, ?)",
            [object_id, SPACE, "late", "2026-12-01T09:00:00.000Z"],
        )
    conn.close()


async def test_an_unknown_chat_is_missing_alone_and_found_by_a_reprobe(world):
    w = world
    w.arm(event_record("trg_gone", "chat_late"), event_record("trg_1", w.general))
    await eventually(lambda: w.subs.missing == {"chat_late"})
    assert w.chat("chat_late")["state"] == "missing"
    assert "unknown_chat" in w.chat("chat_late")["error"]
    await w.live(w.general)
    await w.send(w.general, "still firing")
    await w.recorder.until(lambda r: r.texts("trg_1") == ["still firing"])
    add_chat(w.db, "chat_late")
    await w.clock.wait_for_sleepers()  # the re-probe wait
    w.clock.advance(5.0)
    await w.live("chat_late")
    assert w.subs.missing == frozenset()
    assert w.chat("chat_late")["error"] == ""
    await w.send("chat_late", "found")
    await w.recorder.until(lambda r: r.texts("trg_gone") == ["found"])


async def test_slept_drops_cursors_so_what_came_while_asleep_never_fires(world, aiohttp_server):
    w = world
    w.arm(event_record("trg_1", w.general))
    await w.live(w.general)
    await w.send(w.general, "awake")
    await w.recorder.until(lambda r: len(r.fired) == 1)
    port = w.server.port
    await w.server.close()  # the stream is gone while the machine sleeps
    await w.clock.wait_for_sleepers()
    w.server = await aiohttp_server(create_app(w.db, clock=w.server_clock), port=port)
    await w.send(w.general, "while asleep")
    w.subs.slept(w.clock.wall())
    await w.live(w.general)
    await w.send(w.general, "woke")
    await w.recorder.until(lambda r: len(r.fired) == 2)
    assert w.recorder.texts("trg_1") == ["awake", "woke"]


async def test_takeover_bridges_messages_since_bridge_from_then_goes_live(world):
    w = world
    old = [await w.send(w.general, f"old {i}") for i in range(3)]
    w.server_clock.now += timedelta(seconds=60)
    bridge_from = w.server_clock.now
    recent = [await w.send(w.general, f"recent {i}") for i in range(3)]
    w.arm(event_record("trg_1", w.general), bridge_from=bridge_from)
    await w.recorder.until(lambda r: len(r.fired) == 3)
    await w.live(w.general)
    await w.send(w.general, "live")
    await w.recorder.until(lambda r: len(r.fired) == 4)
    assert w.recorder.texts("trg_1") == ["recent 0", "recent 1", "recent 2", "live"]
    assert [r.key for r in w.recorder.fired[:3]] == [m.message_id for m in recent]
    assert [r.catchup for r in w.recorder.fired] == [True, True, True, False]
    assert old[-1].message_id not in {r.key for r in w.recorder.fired}


async def test_takeover_onto_a_live_chat_bridges_only_the_new_trigger(world):
    w = world
    w.arm(event_record("trg_pinned", w.general, owner=ME))
    await w.live(w.general)
    bridge_from = w.server_clock.now
    await w.send(w.general, "before takeover")
    await w.recorder.until(lambda r: len(r.fired) == 1)
    records = [event_record("trg_pinned", w.general, owner=ME), event_record("trg_f", w.general)]
    w.arm(*records, bridge_from=bridge_from)
    await w.recorder.until(lambda r: len(r.fired) == 2)
    await w.send(w.general, "after")
    await w.recorder.until(lambda r: len(r.fired) == 4)
    assert w.recorder.texts("trg_pinned") == ["before takeover", "after"]
    assert w.recorder.texts("trg_f") == ["before takeover", "after"]
    assert w.chat(w.general)["connections"] == 1


@pytest.mark.parametrize(
    ("created", "fires"),
    [("09:00:00.122", False), ("09:00:00.123", False), ("09:00:00.124", True)],
)
def test_a_message_stamped_in_the_millisecond_of_a_resume_never_fires(created, fires):
    record = event_record("trg_1", "chat_1", activeSince="2026-12-01T09:00:00.123Z")
    when = datetime.fromisoformat(f"2026-12-01T{created}+00:00")
    message = ChatMessage(message_id="msg_1", seq=1, text="x", created_at=when)
    assert active_for(record, message) is fires  # type: ignore[arg-type]


async def test_nothing_accepted_before_a_triggers_active_since_fires_it(world):
    w = world
    w.arm(event_record("trg_old", w.general))
    await w.live(w.general)
    bridge_from = w.server_clock.now
    await w.send(w.general, "while paused")
    w.server_clock.now += timedelta(seconds=5)
    resumed = w.server_clock.now  # `activeSince` of a trigger resumed now
    w.server_clock.now += timedelta(seconds=1)
    await w.send(w.general, "after resume")
    w.arm(
        event_record("trg_old", w.general),
        event_record("trg_new", w.general, activeSince=resumed.isoformat()),
        bridge_from=bridge_from,
    )
    await w.recorder.until(lambda r: "after resume" in r.texts("trg_new"))
    await w.send(w.general, "live")
    await w.recorder.until(lambda r: "live" in r.texts("trg_new"))
    # When the stream is already past "after resume" as trg_new is armed, both the new
    # trigger's bridge and `bridge_from`'s hand it over: the claim takes one (this Recorder
    # stands before the claims), so the fires are the distinct texts.
    assert list(dict.fromkeys(w.recorder.texts("trg_new"))) == ["after resume", "live"]


async def test_a_long_history_bridges_from_the_right_place(world):
    w = world
    for i in range(150):
        await w.send(w.general, f"old {i}")
    w.server_clock.now += timedelta(seconds=30)
    since = w.server_clock.now
    await w.send(w.general, "recent")
    w.arm(event_record("trg_1", w.general), bridge_from=since)
    await w.recorder.until(lambda r: len(r.fired) == 1)
    await w.send(w.general, "live")
    await w.recorder.until(lambda r: len(r.fired) == 2)
    assert w.recorder.texts("trg_1") == ["recent", "live"]


async def test_bad_messages_and_a_failing_dispatcher_never_stop_the_chat(world, aiohttp_server):
    w = world
    w.arm(event_record("trg_1", w.general), event_record("trg_2", w.general))
    await w.live(w.general)
    w.recorder.fail.add("boom")
    await w.send(w.general, "boom")  # the dispatcher raises for trg_1
    await w.recorder.until(lambda r: r.texts("trg_2") == ["boom"])
    port = w.server.port
    await w.server.close()
    await w.clock.wait_for_sleepers()
    w.server = await aiohttp_server(create_app(w.db, clock=w.server_clock), port=port)
    for text in ("no id", "not json", "fine"):
        await w.send(w.general, text)
    with sqlite3.connect(w.db) as conn:  # stored bodies this device cannot read
        conn.execute("UPDATE chat_messages SET body = '{\"seq\": 2}' WHERE seq = 2")
        conn.execute("UPDATE chat_messages SET body = 'not json' WHERE seq = 3")
    conn.close()
    driver = asyncio.create_task(drive(w.clock))
    try:
        await w.recorder.until(lambda r: r.texts("trg_2")[-1:] == ["fine"])
    finally:
        await stop(driver)
    assert w.recorder.texts("trg_1") == w.recorder.texts("trg_2") == ["boom", "fine"]
    assert w.chat(w.general)["lastId"] == 4


async def test_status_and_close(world):
    w = world
    w.arm(event_record("trg_1", w.general), event_record("trg_2", w.other))
    await w.live(w.general, w.other)
    await w.send(w.general, "m")
    await w.recorder.until(lambda r: len(r.fired) == 1)
    await eventually(lambda: w.chat(w.general)["lastId"] == 1)
    row = w.chat(w.general)
    assert {k: row[k] for k in ("state", "triggers", "lastId", "error")} == {
        "state": "live",
        "triggers": ["trg_1"],
        "lastId": 1,
        "error": "",
    }
    await w.subs.close()
    assert w.subs.status() == []
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("chat ")]
    await eventually(lambda: w.streams(w.general) == w.streams(w.other) == 0)


async def test_other_sources_are_not_followed_and_run_closes_on_cancel(world):
    w = world
    other = load(
        {"id": "trg_x", "kind": "event", "program": "triage@v1", "spec": {"dataset": "mail"}}
    )
    cron = load({"id": "trg_c", "kind": "cron", "program": "t@v1", "spec": {"expr": "* * * * *"}})
    w.arm(other, cron, event_record("trg_1", w.general))
    assert [c.chat for c in w.subs.status()] == [w.general]
    runner = asyncio.create_task(w.subs.run())
    await w.live(w.general)
    await stop(runner)
    assert w.subs.status() == []
    await eventually(lambda: w.streams(w.general) == 0)


async def test_a_bridge_that_fails_on_a_space_restart_is_tried_again_and_loses_nothing(
    tmp_path: Path, aiohttp_server: Any
) -> None:
    """The space is away (connections refused) when the takeover's bridge reads the chat:
    the bridge is tried again once it is back, and every message since `since` fires."""
    db = tmp_path / "space.db"
    server_clock = ServerClock()
    server = await aiohttp_server(create_app(db, clock=server_clock))
    token = default_admin_token_file(db).read_text().strip()
    clock = FakeClock()
    async with FaultProxy(server.port) as proxy, SpaceClient(proxy.url, token, clock=clock) as c:
        w = World(server, db, c, clock)
        w.server_clock = server_clock
        w.general = (await c.space_create({"id": SPACE})).generalChat
        try:
            w.arm(event_record("trg_pinned", w.general, owner=ME))
            await w.live(w.general)
            since = server_clock.now
            server_clock.now += timedelta(seconds=1)
            sent = [await w.send(w.general, f"m {i}") for i in range(3)]
            await w.recorder.until(lambda r: len(r.fired) == 3)  # the pinned trigger, live
            proxy.refusing = True  # the space restarts
            w.arm(
                event_record("trg_pinned", w.general, owner=ME),
                event_record("trg_f", w.general),
                bridge_from=since,
            )
            async with asyncio.timeout(5):  # the stream's backoff, and the bridge's: it failed
                await clock.wait_for_sleepers(2)  # and waits to try again
            assert w.recorder.texts("trg_f") == []
            proxy.refusing = False
            driver = asyncio.create_task(drive(clock))
            try:
                await w.recorder.until(lambda r: len(r.texts("trg_f")) == 3)
            finally:
                await stop(driver)
            assert [r.key for r in w.recorder.fired if r.trigger.id == "trg_f"] == [
                m.message_id for m in sent
            ]
        finally:
            await w.subs.close()
