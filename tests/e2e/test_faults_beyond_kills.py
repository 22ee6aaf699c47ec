# ruff: noqa: F811  (pytest fixtures imported from device_support are parameters here)
"""Faults that are not kills (issue 24), with devices in this process on a real space.

A space that restarts while a device takes over costs the takeover's bridge nothing. A
device whose clock is off the space's (±30 s, ±2 min), or steps, fires by the space's
clock: no cron slot early or late, `lateMs` the truth, no chat message waiting or lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from device_support import (  # noqa: F401  (the fixtures are used by name)
    DEADLINE,
    SPACE,
    MakeDevice,
    Running,
    Space,
    Spaces,
    eventually,
    make_device,
    pass_time,
    space,
    spaces,
)
from faultproxy import FaultProxy

from core.clock import FakeClock
from runtime.client.api import SpaceClient
from runtime.events import RoleChanged


async def test_a_space_restart_during_a_takeover_loses_no_chat_message(
    space: Space, make_device: MakeDevice
) -> None:
    await space.publish("echo@v1")
    chat = await space.chat("inbox")
    tid = (await space.event_trigger(chat))["id"]
    ghost = SpaceClient(space.url, await space.device_token("ghost"))
    try:  # a holder that fires nothing: what comes while it holds is only the bridge's
        held = await ghost.call("election_claim", {"peer": "ghost", "term": 0}, space=SPACE)
        dev = await make_device()
        await eventually(lambda: dev.device.reconciler.ready.is_set())
        await eventually(_heartbeat_of(space, dev.peer))
        sent = [await space.send(chat, f"while nobody fires {i}") for i in range(3)]

        restarted = asyncio.Event()

        async def restart_the_space() -> None:
            await space.stop()
            await asyncio.sleep(1.5)  # the space is away this long: a restart
            await space.start()
            restarted.set()

        task: list[asyncio.Task[None]] = []
        dev.device.bus.subscribe(
            RoleChanged,
            lambda e: (
                e.active and not task and task.append(asyncio.create_task(restart_the_space()))
            ),
        )
        body = {"peer": "ghost", "term": held["term"]}
        await ghost.call("election_release", body, space=SPACE)
        await dev.active()
        async with asyncio.timeout(10):
            await restarted.wait()
        runs = await space.until_runs(tid, len(sent))
        await dev.settled()
        assert sorted(r["key"] for r in runs) == sorted(m.message_id for m in sent)
    finally:
        await ghost.close()


def _heartbeat_of(space: Space, peer: str) -> Callable[[], Awaitable[bool]]:
    async def seen() -> bool:
        devices = (await space.api.devices(SPACE)).devices
        return any(d.peer == peer and d.live for d in devices)

    return seen


class Skewed:
    """The device's own clock: the test's FakeClock, its wall `skew` seconds off the space's
    (which reads the FakeClock itself); setting `skew` later is a step of the device's clock."""

    def __init__(self, clock: FakeClock, skew: float) -> None:
        self.clock, self.skew = clock, skew

    def wall(self) -> datetime:
        return self.clock.wall() + timedelta(seconds=self.skew)

    def monotonic(self) -> float:
        return self.clock.monotonic()

    async def sleep(self, seconds: float) -> None:
        await self.clock.sleep(seconds)

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        return self.clock.timeout(seconds)


def slots(runs: list[dict[str, Any]]) -> list[datetime]:
    return [datetime.fromisoformat(r["key"]) for r in runs]


def on_time(space_clock_runs: list[dict[str, Any]], fires: list[dict[str, Any]]) -> list[str]:
    """What went wrong with each cron run, by the space's clock: claimed early (before its
    slot less the claim's lead), claimed late, or a `lateMs` that is not the truth."""
    claimed = {f["key"]: datetime.fromisoformat(f["claimedAt"]) for f in fires}
    wrong = []
    for run in space_clock_runs:
        slot = datetime.fromisoformat(run["key"])
        at = claimed[run["key"]]
        if at < slot - timedelta(seconds=0.1) or at > slot + timedelta(seconds=2):
            wrong.append(f"{run['key']} claimed at {at.isoformat()}")
        true_late = (datetime.fromisoformat(run["startedAt"]) - slot).total_seconds() * 1000
        if abs(run["lateMs"] - true_late) > 1 or not -100 <= run["lateMs"] < 2000:
            wrong.append(f"{run['key']} lateMs {run['lateMs']}")
        if datetime.fromisoformat(run["startedAt"]) < at - timedelta(seconds=0.1):
            wrong.append(f"{run['key']} started {run['startedAt']}, before its claim {at}")
    return wrong


async def skewed_household(
    spaces: Spaces, make_device: MakeDevice, skew: float
) -> tuple[FakeClock, Space, Skewed, Running, str, str, str]:
    clock = FakeClock(datetime(2026, 12, 1, 9, 2, tzinfo=UTC))
    space = await spaces.new(clock)
    await space.publish("echo@v1")
    chat = await space.chat("inbox")
    minutely = await space.trigger(kind="cron", spec={"expr": "* * * * *"}, program="echo@v1")
    event = (await space.event_trigger(chat))["id"]
    own = Skewed(clock, skew)
    dev = await make_device(space=space, clock=own)
    await dev.active()
    await dev.live(chat, event)
    clock.advance(0.01)  # a message in the millisecond of the trigger's creation never fires it
    return clock, space, own, dev, chat, minutely["id"], event


@pytest.mark.parametrize("skew", [30.0, -30.0, 120.0, -120.0])
async def test_a_device_whose_clock_is_off_fires_by_the_spaces_clock(
    spaces: Spaces, make_device: MakeDevice, skew: float
) -> None:
    clock, space, _, dev, chat, minutely, event = await skewed_household(spaces, make_device, skew)
    offset = dev.device.offset.status()
    assert abs(offset.offset_ms + skew * 1000) < 10 and offset.warning, offset
    sent = [await space.send(chat, f"m{i}") for i in range(3)]
    runs = await space.until_runs(event, 3)  # no fake time passes: events never wait
    assert sorted(r["key"] for r in runs) == sorted(m.message_id for m in sent)
    await pass_time(clock, 125, dev)  # 09:04:05: the 09:03 and 09:04 slots
    runs = await space.until_runs(minutely, 2)
    await dev.settled()
    assert slots(runs) == [datetime(2026, 12, 1, 9, m, tzinfo=UTC) for m in (3, 4)]
    assert on_time(runs, await space.fires(minutely)) == []
    status = (await space.api.devices(SPACE)).devices
    assert any(d.peer == dev.peer for d in status)


@pytest.mark.parametrize("step", [120.0, -90.0])
async def test_a_step_of_the_devices_clock_fires_nothing_early_and_loses_nothing(
    spaces: Spaces, make_device: MakeDevice, step: float
) -> None:
    clock, space, own, dev, chat, minutely, event = await skewed_household(spaces, make_device, 0.0)
    await pass_time(clock, 20, dev)  # 09:02:20
    own.skew += step  # the device's clock is set wrong
    await pass_time(clock, 5, dev)
    await dev.active()
    await dev.live(chat, event)
    sent = [await space.send(chat, f"after the step {i}") for i in range(3)]
    runs = await space.until_runs(event, 3)
    assert sorted(r["key"] for r in runs) == sorted(m.message_id for m in sent)
    assert {r["status"] for r in runs} == {"ok"}, runs
    await pass_time(clock, 100, dev)  # 09:04:05
    runs = await space.until_runs(minutely, 2)
    await dev.settled()
    assert slots(runs) == [datetime(2026, 12, 1, 9, m, tzinfo=UTC) for m in (3, 4)]
    assert on_time(runs, await space.fires(minutely)) == []


class Behind:
    """The space as a device reaches it: through a `FaultProxy` (for `make_device`)."""

    def __init__(self, space: Space, proxy: FaultProxy) -> None:
        self.space, self.proxy = space, proxy

    @property
    def url(self) -> str:
        return self.proxy.url

    async def device_token(self, peer: str, space: str = SPACE) -> str:
        return await self.space.device_token(peer, space)


@pytest.mark.parametrize("one_way", [1.5, 3.0])
async def test_a_slow_link_is_not_a_lost_lease_and_loses_no_chat_fire(
    space: Space, make_device: MakeDevice, one_way: float, caplog: pytest.LogCaptureFixture
) -> None:
    """Up to 3 s each way: the lease stays (at most the pause at its onset, when the
    renewal timed by the fast link comes back late), the chat's one subscription stays
    open through it, and every message fires once."""
    caplog.set_level(logging.INFO, "runtime.feeds.chats")
    await space.publish("echo@v1")
    chat = await space.chat("inbox")
    tid = (await space.event_trigger(chat))["id"]
    async with FaultProxy(space.port) as proxy:
        dev = await make_device(space=Behind(space, proxy))
        await dev.active()
        await dev.live(chat, tid)
        edges: list[bool] = []
        dev.device.bus.subscribe(RoleChanged, lambda e: edges.append(e.active))
        proxy.latency = one_way
        sent = []
        for i in range(24):  # 24 s of messages over the slow link
            sent.append(await space.send(chat, f"slow {i}"))
            await asyncio.sleep(1.0)  # the pace of a conversation, not a wait for a result
        proxy.latency = 0.0
        runs = await space.until_runs(tid, len(sent), timeout=30)
        await dev.settled()
        assert sorted(r["key"] for r in runs) == sorted(m.message_id for m in sent)
        assert edges in ([], [False, True]), f"more than the onset's pause: {edges}"
        assert dev.device.elector.term == 1  # the lease never moved
        subscribed = [
            r for r in caplog.records if r.getMessage().startswith(f"chat {chat}: subscribing")
        ]
        assert len(subscribed) == 1, "the chat's subscription was torn down and opened again"


async def test_a_frozen_holder_that_wakes_fires_nothing_stale(
    spaces: Spaces, make_device: MakeDevice
) -> None:
    """SIGSTOP for 30 s, as fake time: every clock moves on at once while the device cannot
    run. Woken, it drops its stale cursors before it fires: no slot of the freeze runs (on
    the lease's triggers or its own pinned ones), and what comes after runs on time."""
    clock = FakeClock(datetime(2026, 12, 1, 9, 2, tzinfo=UTC))
    space = await spaces.new(clock)
    await space.publish("echo@v1")
    every = {"kind": "cron", "spec": {"expr": "* * * * * *"}, "program": "echo@v1"}
    floating = (await space.trigger(**every))["id"]
    dev = await make_device(space=space, clock=clock)
    pinned = (await space.trigger(**every, name="mine", owner=dev.peer))["id"]
    await dev.active()
    await pass_time(clock, 3, dev)
    frozen = clock.wall()
    clock.advance(30.0)  # nothing of the device runs meanwhile
    woke = clock.wall()
    await pass_time(clock, 5, dev)
    await dev.active()
    await pass_time(clock, 3, dev)
    await dev.settled()
    for tid in (floating, pinned):  # what ran (a refused claim is recorded, never run)
        recorded = await space.runs(tid)
        runs = [r for r in recorded if r["status"] not in ("rejected", "skipped")]
        stale = [r["key"] for r in runs if frozen + timedelta(seconds=1) < slot_of(r) < woke]
        assert stale == [], f"{tid}: slots of the freeze fired after it: {stale}"
        seen = [(r["key"], r["status"], r.get("error")) for r in recorded]
        assert any(slot_of(r) > woke for r in runs), (
            f"{tid} ({tid == pinned=}): none after {woke}: {seen}"
        )
        # a fire already taken as the device froze (its slot that very instant) may run as
        # it wakes, with its true lateness; what came after the wake runs on time
        late = [(r["key"], r["lateMs"]) for r in runs if slot_of(r) > woke and r["lateMs"] > 2000]
        assert late == [], late


def slot_of(run: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(run["key"])
