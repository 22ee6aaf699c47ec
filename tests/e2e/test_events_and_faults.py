# ruff: noqa: F811  (pytest fixtures imported from device_support are parameters here)
"""Devices running in this process against a real space server on 127.0.0.1.

Event triggers fire once per user message and never for what came while nobody
was subscribed; dropped streams and a restarted server lose nothing; chat-watch is
seeded, kept and answers once; a suspend fires only what the rules allow; bad
records are stamped while a healthy trigger keeps firing; `baton status --json`
shows it all. Programs run in a real Executor (two workers). Where time matters
the device and the server share a FakeClock; elsewhere real time, with waits on
conditions under a deadline.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from device_support import (  # noqa: F401  (the fixtures are used by name)
    DEADLINE,
    SPACE,
    MakeDevice,
    Space,
    Spaces,
    eventually,
    make_device,
    pass_time,
    space,
    spaces,
)
from pages import read_all

from core.chatwire import Message
from core.clock import FakeClock
from runtime.cli.main import main
from runtime.client.api import ApiError
from runtime.election.decision import Config as LeaseConfig
from space.app import default_admin_token_file
from space.db import open_db
from space.token_store import Principal, Role, mint_token
from triggers.records import RESERVED_CHAT_WATCH as CHAT_WATCH


def by_key(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["key"]: r for r in runs}


async def test_an_event_trigger_fires_once_per_user_message_and_never_for_the_unsubscribed(
    space: Space, make_device: MakeDevice
):
    await space.publish("echo@v1")
    chat = await space.chat("inbox")
    before = await space.send(chat, "before the device")
    trg = await space.event_trigger(chat, args={"who": "me"})
    tid = trg["id"]
    dev = await make_device()
    await dev.active()
    await dev.live(chat, tid)

    m1 = await space.send(chat, "one")
    await space.send(chat, "a reply", agent={"name": "triage", "done": True})
    m2 = await space.send(chat, "two")
    runs = by_key(await space.until_runs(tid, 2))
    assert set(runs) == {m1.message_id, m2.message_id}
    run = runs[m1.message_id]
    assert run["status"] == "ok", run
    event = {"space": SPACE, "objectId": chat, "messageId": m1.message_id, "text": "one"}
    assert run["result"] == {"ok": True, "args": {"who": "me", "event": event}}
    assert run["peer"] == dev.peer and run["term"] >= 1

    await space.patch(tid, {"enabled": False})
    await dev.not_following(chat)
    paused = await space.send(chat, "while paused")
    await space.patch(tid, {"enabled": True})
    await dev.live(chat, tid)
    m3 = await space.send(chat, "three")
    await space.until_runs(tid, 3)
    await dev.settled()

    await dev.stop()
    down = await space.send(chat, "while no device runs")
    dev = await make_device(peer=dev.peer)
    await dev.active()
    await dev.live(chat, tid)
    m4 = await space.send(chat, "four")
    await space.until_runs(tid, 4)
    await dev.settled()

    fired = [m1.message_id, m2.message_id, m3.message_id, m4.message_id]
    texts = {m.message_id: m.text for m in await space.messages(chat)}
    claimed = [texts.get(f["key"]) for f in await space.fires(tid)]
    assert claimed == ["one", "two", "three", "four"]
    runs = await space.runs(tid)
    assert [r["key"] for r in runs] == fired
    never = {before.message_id, paused.message_id, down.message_id}
    assert never.isdisjoint(r["key"] for r in runs)


async def test_dropped_streams_and_a_restarted_server_lose_nothing_and_repeat_nothing(
    space: Space, make_device: MakeDevice
):
    await space.publish("echo@v1")
    chat = await space.chat("inbox")
    tid = (await space.event_trigger(chat))["id"]
    dev = await make_device()
    await dev.active()
    await dev.live(chat, tid)
    sent = [await space.send(chat, "m1")]
    await space.until_runs(tid, 1)

    sent.append(await space.send(chat, "m2, just before the cut"))
    space.cut_streams()
    sent.append(await space.send(chat, "m3, while the stream is down"))
    await space.until_runs(tid, 3)

    sent.append(await space.send(chat, "m4, just before the restart"))
    await space.restart()
    sent.append(await space.send(chat, "m5, as the server is back"))
    sent.append(await space.send(chat, "m6"))
    await space.until_runs(tid, len(sent))
    await dev.settled()

    runs = await space.runs(tid)
    assert sorted(r["key"] for r in runs) == sorted(m.message_id for m in sent)
    assert {r["status"] for r in runs} == {"ok"}
    assert [r["result"]["args"]["event"]["text"] for r in runs][:1] == ["m1"]
    connections = dev.chat_state(chat)["connections"]
    assert connections >= 3, dev.chat_state(chat)


def answers(messages: list[Message], text: str) -> int:
    """How many of the agent's messages answer the user's `text` (the built-in responder)."""
    return sum(1 for m in messages if m.agent and f"noted: {text!r}" in m.text)


async def until_answered(space: Space, text: str) -> None:
    async def answered() -> bool:
        return answers(await space.messages(space.general), text) > 0

    await eventually(answered)


async def chat_watch(space: Space) -> dict[str, Any] | None:
    try:
        return await space.record(CHAT_WATCH)
    except ApiError as exc:
        assert exc.status == 404, exc
        return None


async def test_chat_watch_is_seeded_reseeded_never_overwritten_and_answers_once(
    space: Space, make_device: MakeDevice
):
    dev = await make_device()
    await dev.active()
    record = await eventually(lambda: chat_watch(space))
    assert {k: record[k] for k in ("name", "kind", "program", "owner", "enabled")} == {
        "name": "Chat responder",
        "kind": "event",
        "program": "internal:chat-watch",
        "owner": "",
        "enabled": True,
    }
    assert record["spec"]["objectId"] == space.general
    await dev.live(space.general, CHAT_WATCH)
    await space.send(space.general, "hello there")
    await until_answered(space, "hello there")

    await space.api.trigger_delete(SPACE, CHAT_WATCH)
    reseeded = await eventually(lambda: chat_watch(space))
    assert reseeded["enabled"] is True
    await dev.live(space.general, CHAT_WATCH)
    await space.send(space.general, "after the reseed")
    await until_answered(space, "after the reseed")

    paused = await space.patch(CHAT_WATCH, {"enabled": False})
    await dev.not_following(space.general)
    await space.send(space.general, "while paused")
    await dev.stop()
    dev = await make_device(peer=dev.peer)
    await dev.active()
    await eventually(lambda: CHAT_WATCH in dev.device.reconciler.records)
    kept = await space.record(CHAT_WATCH)
    assert (kept["enabled"], kept["rev"]) == (False, paused["rev"])
    assert dev.chat_state(space.general) is None
    await space.send(space.general, "still paused")

    await space.patch(CHAT_WATCH, {"enabled": True})
    await dev.live(space.general, CHAT_WATCH)
    await space.send(space.general, "back again")
    await until_answered(space, "back again")
    messages = await space.messages(space.general)
    answered = ["hello there", "after the reseed", "back again"]
    assert [answers(messages, t) for t in answered] == [1, 1, 1]
    assert answers(messages, "while paused") == answers(messages, "still paused") == 0
    assert sum(1 for m in messages if m.agent) == 3


async def test_a_space_created_while_the_device_runs_gets_its_chat_responder(
    space: Space, make_device: MakeDevice, caplog: pytest.LogCaptureFixture
):
    # The admin mints no token for a space that does not exist (issue 25): this one was
    # minted in the store, as for a space that went away and is made again.
    db = open_db(space.db)
    who = Principal(role=Role.DEVICE, peer="dev1", space="later")
    token = mint_token(db, who, time.time())
    db.conn.close()
    dev = await make_device(space_id="later", token=token)
    await eventually(lambda: "could not seed" in caplog.text)  # no such space yet
    created = await space.api.space_create({"id": "later"})
    general = created.generalChat

    async def seeded() -> dict[str, Any] | None:
        try:
            return await space.api.trigger_get("later", CHAT_WATCH)
        except ApiError:
            return None

    record = await eventually(seeded, timeout=DEADLINE)
    assert (record["program"], record["spec"]["objectId"]) == ("internal:chat-watch", general)
    await eventually(lambda: (dev.chat_state(general) or {}).get("state") == "live")
    await space.api.chat_send("later", general, {"text": "hello there"})

    async def answered() -> bool:
        listing = await space.api.chat_messages("later", general, limit=100)
        return any(m.agent for m in read_all(listing))

    await eventually(answered)


def keys(runs: list[dict[str, Any]]) -> list[str]:
    return [r["key"] for r in runs]


async def test_a_wall_clock_jump_fires_only_what_the_rules_allow(
    spaces: Spaces, make_device: MakeDevice
):
    clock = FakeClock(datetime(2026, 12, 1, 9, 2, tzinfo=UTC))
    space = await spaces.new(clock)
    await space.publish("echo@v1")
    chat = await space.chat("inbox")
    every5 = {"expr": "*/5 * * * *"}
    none = (await space.trigger(kind="cron", spec=every5, program="echo@v1"))["id"]
    spec = {**every5, "catchup": "latest"}
    latest = (await space.trigger(kind="cron", spec=spec, program="echo@v1"))["id"]
    event = (await space.event_trigger(chat))["id"]
    dev = await make_device(space=space, clock=clock)
    await dev.active()
    await dev.live(chat, event)
    await eventually(lambda: {none, latest} <= dev.device.ticker.next_fires().keys())
    clock.advance(0.01)  # a message in the millisecond of the trigger's creation never fires it
    await space.send(chat, "awake before")
    await space.until_runs(event, 1)

    await pass_time(clock, 5 * 60, dev)  # 09:07:00, past the 09:05 slot
    assert keys(await space.until_runs(none, 1)) == ["2026-12-01T09:05:00.000Z"]
    assert keys(await space.until_runs(latest, 1)) == ["2026-12-01T09:05:00.000Z"]

    space.cut_streams()  # the machine sleeps: its streams die, its clocks stop
    await eventually(lambda: dev.chat_state(chat)["state"] == "backoff")
    clock.jump_wall(1800)
    await space.send(chat, "while asleep")
    clock.jump_wall(1799)
    await space.send(chat, "just before waking")
    clock.jump_wall(1)  # woken at 10:07:00: 10:05 is a stale slot, within `latest`'s grace

    await pass_time(clock, 5, dev)
    await dev.active()
    await dev.live(chat, event)
    awake = await space.send(chat, "awake after")
    await pass_time(clock, 3 * 60, dev)  # 10:10:05, past the 10:10 slot
    await space.until_runs(none, 2)
    await space.until_runs(latest, 3)
    await space.until_runs(event, 2)
    await dev.settled()

    assert keys(await space.runs(none)) == ["2026-12-01T09:05:00.000Z", "2026-12-01T10:10:00.000Z"]
    assert keys(await space.runs(latest)) == [
        "2026-12-01T09:05:00.000Z",
        "2026-12-01T10:05:00.000Z",
        "2026-12-01T10:10:00.000Z",
    ]
    texts = [r["result"]["args"]["event"]["text"] for r in await space.runs(event)]
    assert texts == ["awake before", "awake after"]
    assert keys(await space.runs(event))[-1] == awake.message_id


def insert_raw(space: Space, *bodies: dict[str, Any]) -> None:
    """Store records the way a newer build or a hand edit would: past the API's checks."""
    with sqlite3.connect(space.db) as conn:
        for body in bodies:
            row = [SPACE, body["id"], json.dumps({"rev": 1, **body})]
            conn.execute("INSERT INTO triggers VALUES (?, ?, 1, ?)", row)
    conn.close()


async def test_bad_records_are_stamped_while_a_healthy_trigger_keeps_firing(
    space: Space, make_device: MakeDevice
):
    await space.publish("echo@v1")
    chat = await space.chat("inbox")
    common = {"program": "echo@v1", "owner": "", "enabled": True, "name": "bad"}
    insert_raw(
        space,
        {"id": "trg_hook", "kind": "webhook", "spec": {"url": "https://x"}, **common},
        {"id": "trg_badcron", "kind": "cron", "spec": {"expr": "every tuesday"}, **common},
    )
    yearly = {"expr": "0 0 1 1 *"}  # never due while the test runs
    ghost = await space.trigger(kind="cron", spec=yearly, program="ghost@v1")
    nowhere = await space.event_trigger("chat_nowhere")
    healthy = (await space.event_trigger(chat))["id"]
    dev = await make_device(health_interval=0.2)
    await dev.active()
    await dev.live(chat, healthy)
    first = await space.send(chat, "first")
    await space.until_runs(healthy, 1)

    expected = {
        "trg_hook": "unsupported_kind",
        "trg_badcron": "invalid_spec",
        ghost["id"]: "unknown_program",
        nowhere["id"]: "source_not_found",
    }
    stamped = {tid: await space.until_stamped(tid, status) for tid, status in expected.items()}
    assert "webhook" in stamped["trg_hook"]["lastStatusDetail"]
    assert "ghost@v1" in stamped[ghost["id"]]["lastStatusDetail"]
    raw = stamped["trg_hook"]
    assert (raw["kind"], raw["spec"]) == ("webhook", {"url": "https://x"})  # never rewritten

    second = await space.send(chat, "second")
    runs = await space.until_runs(healthy, 2)
    assert keys(runs) == [first.message_id, second.message_id]
    assert {r["status"] for r in runs} == {"ok"}
    assert not dev.task.done()
    assert await space.runs("trg_hook") == await space.runs("trg_badcron") == []


BAD_PROGRAMS = {
    "raises@v1": ("def main(args):\n    raise RuntimeError('boom')\n", "error"),
    "crashes@v1": ("import os\n\ndef main(args):\n    os._exit(3)\n", "crashed"),
    "loops@v1": ("def main(args):\n    while True:\n        pass\n", "timeout"),
}


async def test_a_program_that_raises_crashes_or_loops_costs_its_run_only(
    space: Space, make_device: MakeDevice
):
    await space.publish("echo@v1")
    chat = await space.chat("inbox")
    bad: dict[str, str] = {}
    for ref, (source, status) in BAD_PROGRAMS.items():
        await space.publish(ref, source)
        made = await space.event_trigger(chat, program=ref, limits={"timeoutSeconds": 1})
        bad[made["id"]] = status
    healthy = (await space.event_trigger(chat))["id"]
    dev = await make_device()
    await dev.active()
    await dev.live(chat, healthy)

    sent = [await space.send(chat, "first"), await space.send(chat, "second")]
    for tid, status in bad.items():
        runs = await space.until_runs(tid, 2)
        assert [r["status"] for r in runs] == [status, status], runs
    runs = await space.until_runs(healthy, 2)
    assert keys(runs) == [m.message_id for m in sent]
    assert {r["status"] for r in runs} == {"ok"}
    errors = [r for tid in bad for r in await space.runs(tid)]
    assert "boom" in next(r["error"] for r in errors if r["status"] == "error")

    third = await space.send(chat, "third")
    runs = await space.until_runs(healthy, 3)
    assert (runs[-1]["key"], runs[-1]["status"]) == (third.message_id, "ok")
    assert not dev.task.done()


PARROT = """
def main(args):
    ev = args["event"]
    use("any@v1").chat_send(ev["space"], ev["objectId"], {"text": "you said " + ev["text"]})
    return {"ok": True}
"""


async def test_a_program_answering_into_the_chat_it_watches_does_not_fire_itself(
    space: Space, make_device: MakeDevice
):
    await space.publish("parrot@v1", PARROT)
    chat = await space.chat("inbox")
    tid = (await space.event_trigger(chat, program="parrot@v1"))["id"]
    dev = await make_device()
    await dev.active()
    await dev.live(chat, tid)

    first = await space.send(chat, "one")
    await space.until_runs(tid, 1)
    second = await space.send(chat, "two")  # after the parrot's answer to "one" in the feed
    await space.until_runs(tid, 2)
    await dev.settled()

    runs = await space.runs(tid)
    assert keys(runs) == [first.message_id, second.message_id]
    assert {r["status"] for r in runs} == {"ok"}
    answers = [m for m in await space.messages(chat) if m.text.startswith("you said")]
    assert [m.text for m in answers] == ["you said one", "you said two"]
    # a run token writes as the agent
    assert {m.agent.name if m.agent else None for m in answers} == {"parrot@v1"}


async def test_baton_status_json_shows_the_device_term_subscriptions_and_triggers(
    space: Space, make_device: MakeDevice, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    await space.publish("echo@v1")
    chat = await space.chat("inbox")
    hourly = {"expr": "0 * * * *"}
    floating = (await space.trigger(kind="cron", spec=hourly, program="echo@v1"))["id"]
    event = (await space.event_trigger(chat))["id"]
    ghost = (await space.trigger(kind="cron", spec=hourly, program="ghost@v1"))["id"]
    dev = await make_device(health_interval=0.2, lease=LeaseConfig(renew_s=0.2))
    pinned = await space.trigger(kind="cron", spec=hourly, program="echo@v1", owner=dev.peer)
    await dev.active()
    await dev.live(chat, event)
    await space.until_stamped(ghost, "unknown_program")

    async def reported_live() -> bool:
        devices = (await space.api.devices(SPACE)).devices
        subs = [s for d in devices for s in d.status.get("subscriptions", [])]
        return any(s["chat"] == chat and s["state"] == "live" for s in subs)

    await eventually(reported_live)
    nexts = dev.device.ticker.next_fires()
    await eventually(lambda: all(k in nexts for k in (floating, pinned["id"])))

    async def next_fires_stamped() -> bool:
        return all([(await space.record(t))["nextFireAt"] for t in (floating, pinned["id"])])

    await eventually(next_fires_stamped)

    argv = ["status", "--url", space.url, "--space", SPACE, "--json", "--data", str(tmp_path)]
    argv += ["--token-file", str(default_admin_token_file(space.db))]
    assert await asyncio.to_thread(main, argv) == 0
    report = json.loads(capsys.readouterr().out)

    assert report["election"]["active"] == dev.peer
    assert report["election"]["term"] == dev.device.elector.term >= 1
    assert [(d["peer"], d["live"]) for d in report["devices"]] == [(dev.peer, True)]
    subs = {s["chat"]: s for s in report["subscriptions"]}
    assert subs[chat]["peer"] == dev.peer and subs[chat]["state"] == "live"
    assert subs[chat]["triggers"] == [event]
    assert subs[space.general]["triggers"] == [CHAT_WATCH]
    shown = {t["id"]: t for t in report["triggers"]}
    assert set(shown) == {floating, event, ghost, pinned["id"], CHAT_WATCH}
    assert shown[floating]["owner"] == shown[event]["owner"] == "(floating)"
    assert shown[pinned["id"]]["owner"] == dev.peer
    assert shown[ghost]["status"] == "unknown_program" and "ghost@v1" in shown[ghost]["detail"]
    for tid in (floating, pinned["id"]):
        assert datetime.fromisoformat(shown[tid]["nextFireAt"]) == nexts[tid]
    assert shown[event]["nextFireAt"] == ""


async def test_a_sleep_the_elector_notices_first_bridges_nothing_from_the_sleep(
    spaces: Spaces, make_device: MakeDevice
):
    clock = FakeClock(datetime(2026, 12, 1, 9, 2, tzinfo=UTC))
    space = await spaces.new(clock)
    await space.publish("echo@v1")
    chat = await space.chat("inbox")
    event = (await space.event_trigger(chat))["id"]
    minutely = await space.trigger(kind="cron", spec={"expr": "* * * * *"}, program="echo@v1")
    dev = await make_device(space=space, clock=clock)
    await dev.active()
    await dev.live(chat, event)
    await pass_time(clock, 30, dev)  # 09:02:30

    space.cut_streams()
    await eventually(lambda: dev.chat_state(chat)["state"] == "backoff")
    clock.jump_wall(3540)
    await space.send(chat, "asleep, a minute before waking")
    clock.jump_wall(60)  # woken at 10:02:30; the 10:01 slot passed while asleep
    # A fire taken at wake, before the sleep watch's next tick, asks the elector first:
    assert dev.device.elector.may_fire() is False
    await dev.active()
    await pass_time(clock, 5, dev)
    await dev.live(chat, event)
    awake = await space.send(chat, "awake")
    await space.until_runs(event, 1)
    await pass_time(clock, 60, dev)  # 10:03:35, past the 10:03 slot
    await space.until_runs(minutely["id"], 1)
    await dev.settled()

    assert keys(await space.runs(event)) == [awake.message_id]
    assert keys(await space.runs(minutely["id"])) == ["2026-12-01T10:03:00.000Z"]
