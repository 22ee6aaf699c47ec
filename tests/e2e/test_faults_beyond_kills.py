# ruff: noqa: F811  (pytest fixtures imported from device_support are parameters here)
"""Faults that are not kills (issue 24), with devices in this process on a real space.

A space that restarts while a device takes over costs the takeover's bridge nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from device_support import (  # noqa: F401  (the fixtures are used by name)
    SPACE,
    MakeDevice,
    Space,
    eventually,
    make_device,
    space,
    spaces,
)

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
