"""Chat fan-out for bench/servers.py: a message posted on one server, until its SSE `message`
event arrives on a stream another server (or the same one) serves.

A stream of the space's general chat is opened on server `on`; messages are posted on
server 0, one at a time (each awaited on the stream before the next) and in bursts of 20
posted at once. Latency: from just before the POST is sent to the event's arrival here,
so it includes the POST itself (its answer's times are printed beside it).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any

import aiohttp

BURST = 20
WARM = 5  # messages first, not counted: the stream's and the pools' first use


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


class Stream:
    """The chat's SSE stream on one server: when each message (by its text) arrived."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self.waiting: dict[str, asyncio.Future[float]] = {}
        self.ready = asyncio.Event()

    def expect(self, text: str) -> asyncio.Future[float]:
        future = asyncio.get_running_loop().create_future()
        self.waiting[text] = future
        return future

    async def read(self, session: aiohttp.ClientSession, url: str, headers: dict) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with session.get(url, headers=headers, timeout=timeout) as resp:
            assert resp.status == 200, await resp.text()
            event, data = "", []
            async for raw in resp.content:
                line = raw.decode().rstrip("\n")
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
                elif line == "":
                    self.dispatch(event, "\n".join(data))
                    event, data = "", []

    def dispatch(self, event: str, data: str) -> None:
        if event == "hello":
            self.ready.set()
        elif event == "message":
            at = time.perf_counter()
            future = self.waiting.pop(json.loads(data)["text"], None)
            if future is not None and not future.done():
                future.set_result(at)


async def fanout(s: Any, on: int, args: Any, gap: float) -> dict[str, list[float]]:
    """Latencies (ms) of messages posted on server 0 and streamed by server `on`; a pause
    of 0 to `gap` s (uniform) before each message or burst, so that posts land at random
    instants of a poller's period instead of just after its read (which the previous
    arrival would otherwise be)."""
    chat = f"/spaces/{s.space}/chats/{s.chat}"
    stream = Stream()
    headers = {**s.admin, "Accept": "text/event-stream"}
    reader = asyncio.create_task(stream.read(s.session, s.url(on, f"{chat}/stream"), headers))
    await asyncio.wait_for(stream.ready.wait(), 10)
    posts: list[float] = []  # the POST's answer, ms

    async def one(text: str) -> float:
        arrival = stream.expect(text)
        t0 = time.perf_counter()
        status, body = await s.post(0, f"{chat}/messages", {"text": text}, s.admin)
        posts.append((time.perf_counter() - t0) * 1e3)
        assert status == 201, body
        return (await asyncio.wait_for(arrival, 10) - t0) * 1e3

    try:
        for n in range(WARM):
            await one(f"warm {n}")
        posts.clear()
        sequential, bursts = [], []
        for n in range(args.messages):
            await asyncio.sleep(random.uniform(0, gap))
            sequential.append(await one(f"seq {n}"))
        posted_one, posts = posts, []
        for b in range(max(1, args.messages // BURST)):
            await asyncio.sleep(random.uniform(0, gap))
            bursts += await asyncio.gather(*(one(f"burst {b} {n}") for n in range(BURST)))
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    return {"sequential": sequential, "bursts": bursts, "post one": posted_one, "post burst": posts}


def show_fanout(rows: list[tuple[str, dict[str, list[float]]]], args: Any) -> None:
    def cell(values: list[float]) -> str:
        return f"{pct(values, 50):.1f} / {pct(values, 99):.1f}"

    print(
        f"| chat fan-out ({args.messages} messages each way), ms | one at a time: "
        f"arrival p50 / p99 | its POST's answer p50 / p99 | bursts of {BURST}: arrival "
        "p50 / p99 | its POSTs' answers p50 / p99 |"
    )
    print("|---|---|---|---|---|")
    for name, got in rows:
        print(
            f"| {name} | {cell(got['sequential'])} | {cell(got['post one'])} "
            f"| {cell(got['bursts'])} | {cell(got['post burst'])} |"
        )
