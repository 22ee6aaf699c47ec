"""Our own subscription loop against the chat stream: repeated drops lose and repeat nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from chats_support import FakeClock, start_space

from core.clock import SystemClock
from runtime.client.sse import SseEvent
from runtime.client.stream import Stream
from space.streams import STREAMS

BOTH_STORES = True  # the stream reads the chat through the store seam


async def test_a_subscription_survives_server_side_drops_without_loss_or_repeat(
    aiohttp_client: Any, tmp_path: Path, store_dsn: str | None
) -> None:
    space = await start_space(aiohttp_client, tmp_path / "s.db", FakeClock(), store_dsn)
    url = str(space.client.make_url(space.chat_url(tail="/stream")))
    token = space.headers["Authorization"].removeprefix("Bearer ")
    seqs: list[int] = []
    hellos = asyncio.Event()
    arrived = asyncio.Condition()

    async def on_event(ev: SseEvent) -> None:
        if ev.event == "hello":
            hellos.set()
        elif ev.event == "message" and ev.seq is not None:
            async with arrived:
                seqs.append(ev.seq)
                arrived.notify_all()

    sub = Stream(url, token, clock=SystemClock(), draw=lambda: 0.0)
    task = asyncio.create_task(sub.run(on_event))
    try:
        async with asyncio.timeout(10):
            await hellos.wait()
            for round_ in range(4):
                for i in range(5):
                    await space.send(f"r{round_}-{i}")
                    if i == 2:
                        space.app[STREAMS].close_all("drop")
                async with arrived:
                    await arrived.wait_for(lambda r=round_: len(seqs) >= 5 * (r + 1))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert seqs == list(range(1, 21))
    assert sub.status.connections >= 5
