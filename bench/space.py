"""The embedded space server under load: chat SSE fan-out, many chats, fire claims.

Run: .venv/bin/python bench/space.py [--quick]

The server in its own process, the clients in this one (separate cores); latency from just
before the POST to the subscriber's parsed event. Scenarios: fan-out to N subscribers of one
chat, 1,000 chats with a stream each, fire claims with 20 concurrent claimers. Details in
docs/performance.md, "Benchmark notes".
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from serving import in_parallel, start_server, stop_server

SPACE = "bench"
PEER = "bench-box"
NO_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_read=60)


# ---------------------------------------------------------------- server process


# ---------------------------------------------------------------- clients


class Tally:
    """Deliveries and their latencies, with an event when the expected count is reached."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.posted: dict[str, float] = {}
        self.latencies: list[float] = []
        self.first_post = 0.0
        self.last_receive = 0.0
        self.done = asyncio.Event()

    def received(self, text: str) -> None:
        now = time.perf_counter()
        self.latencies.append(now - self.posted[text])
        self.last_receive = now
        if len(self.latencies) >= self.expected:
            self.done.set()


async def subscribe(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    ready: Callable[[], None],
    tally: Tally,
) -> None:
    """Read one chat stream: `ready()` at hello, `tally.received` for each message."""
    async with session.get(url, headers=headers, timeout=NO_TIMEOUT) as resp:
        resp.raise_for_status()
        event = ""
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "message":
                tally.received(json.loads(line[6:])["text"])
            elif line.startswith("data: ") and event == "hello":
                ready()


async def open_streams(
    session: aiohttp.ClientSession, urls: list[str], headers: dict[str, str], tally: Tally
) -> list[asyncio.Task[None]]:
    left = len(urls)
    all_ready = asyncio.Event()

    def ready() -> None:
        nonlocal left
        left -= 1
        if left == 0:
            all_ready.set()

    tasks = [asyncio.create_task(subscribe(session, u, headers, ready, tally)) for u in urls]
    async with asyncio.timeout(60):
        await all_ready.wait()
    return tasks


async def close_streams(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def post_messages(
    api: aiohttp.ClientSession,
    base: str,
    headers: dict[str, str],
    targets: list[tuple[str, str]],
    tally: Tally,
    concurrency: int,
) -> None:
    """Post each `(chat, text)`; the clock for latency starts just before each POST."""

    def job(chat: str, text: str) -> Callable[[], Awaitable[None]]:
        async def send() -> None:
            tally.posted[text] = time.perf_counter()
            url = f"{base}/v1/spaces/{SPACE}/chats/{chat}/messages"
            async with api.post(url, json={"text": text}, headers=headers) as resp:
                assert resp.status == 201, await resp.text()

        return send

    tally.first_post = time.perf_counter()
    await in_parallel([job(c, t) for c, t in targets], concurrency)
    async with asyncio.timeout(60):
        await tally.done.wait()


# ---------------------------------------------------------------- scenarios


def row(name: str, subs: int, posted: int, tally: Tally) -> tuple[Any, ...]:
    lat = sorted(tally.latencies)
    rate = len(lat) / (tally.last_receive - tally.first_post)
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    return name, subs, posted, len(lat), rate, statistics.median(lat) * 1e3, p99 * 1e3


async def fan_out(
    sse: aiohttp.ClientSession,
    api: aiohttp.ClientSession,
    base: str,
    h: dict[str, str],
    chat: str,
    subscribers: int,
    messages: int,
) -> tuple[Any, ...]:
    tally = Tally(subscribers * messages)
    url = f"{base}/v1/spaces/{SPACE}/chats/{chat}/stream"
    tasks = await open_streams(sse, [url] * subscribers, h, tally)
    try:
        texts = [(chat, f"fan{subscribers}-{i}") for i in range(messages)]
        await post_messages(api, base, h, texts, tally, concurrency=4)
    finally:
        await close_streams(tasks)
    return row(f"fan-out to {subscribers}", subscribers, messages, tally)


async def many_chats(
    sse: aiohttp.ClientSession,
    api: aiohttp.ClientSession,
    base: str,
    h: dict[str, str],
    chats: int,
    per_chat: int,
) -> tuple[Any, ...]:
    ids = []
    for i in range(chats):
        async with api.post(
            f"{base}/v1/spaces/{SPACE}/chats", json={"name": f"c{i}"}, headers=h
        ) as r:
            ids.append((await r.json())["objectId"])
    tally = Tally(chats * per_chat)
    urls = [f"{base}/v1/spaces/{SPACE}/chats/{c}/stream" for c in ids]
    tasks = await open_streams(sse, urls, h, tally)
    try:
        texts = [(c, f"{c}-{k}") for k in range(per_chat) for c in ids]
        await post_messages(api, base, h, texts, tally, concurrency=20)
    finally:
        await close_streams(tasks)
    return row(f"{chats:,} chats, 1 stream each", chats, len(texts), tally)


async def fire_claims(
    api: aiohttp.ClientSession, base: str, h: dict[str, str], claims: int
) -> tuple[Any, ...]:
    record = {
        "name": "bench",
        "kind": "cron",
        "spec": {"expr": "* * * * *"},
        "program": "bench@v1",
        "owner": PEER,
    }
    async with api.post(f"{base}/v1/spaces/{SPACE}/triggers", json=record, headers=h) as r:
        assert r.status == 201, await r.text()
        tid = (await r.json())["id"]
    latencies: list[float] = []

    def job(i: int) -> Callable[[], Awaitable[None]]:
        async def claim() -> None:
            body = {"triggerId": tid, "key": f"2026-12-01T{i:08d}Z", "term": 0, "peer": PEER}
            t0 = time.perf_counter()
            async with api.post(f"{base}/v1/spaces/{SPACE}/fires", json=body, headers=h) as r:
                assert r.status == 201, await r.text()
            latencies.append(time.perf_counter() - t0)

        return claim

    start = time.perf_counter()
    await in_parallel([job(i) for i in range(claims)], concurrency=20)
    elapsed = time.perf_counter() - start
    lat = sorted(latencies)
    p99 = lat[int(len(lat) * 0.99)]
    return (
        "fire claims (201)",
        20,
        claims,
        claims,
        claims / elapsed,
        statistics.median(lat) * 1e3,
        p99 * 1e3,
    )


# ---------------------------------------------------------------- main


async def bench(quick: bool) -> list[tuple[Any, ...]]:
    scale = 0.25 if quick else 1.0
    with tempfile.TemporaryDirectory() as tmp:
        proc, base, h = await start_server(Path(tmp))
        sse = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        api = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=50))
        try:
            async with api.post(f"{base}/v1/spaces", json={"id": SPACE}, headers=h) as r:
                chat = (await r.json())["generalChat"]
            rows = []
            for subs, msgs in ((1, 2000), (10, 1000), (100, 200)):
                rows.append(await fan_out(sse, api, base, h, chat, subs, int(msgs * scale)))
            rows.append(await many_chats(sse, api, base, h, 1000, 2))
            rows.append(await fire_claims(api, base, h, int(2000 * scale)))
            return rows
        finally:
            await sse.close()
            await api.close()
            await stop_server(proc)


def print_table(rows: list[tuple[Any, ...]]) -> None:
    head = ("scenario", "conc/subs", "posted", "delivered", "per s", "p50 ms", "p99 ms")
    print(
        f"{head[0]:<26}{head[1]:>10}{head[2]:>8}{head[3]:>11}{head[4]:>9}{head[5]:>8}{head[6]:>8}"
    )
    for name, subs, posted, got, rate, p50, p99 in rows:
        print(f"{name:<26}{subs:>10}{posted:>8}{got:>11}{rate:>9.0f}{p50:>8.1f}{p99:>8.1f}")


def main() -> None:
    start = time.perf_counter()
    print_table(asyncio.run(bench(quick="--quick" in sys.argv)))
    print(f"total {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
