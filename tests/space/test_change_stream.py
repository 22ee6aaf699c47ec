"""The change feed as SSE: `hello` with the cursor, then every record change with `id: <seq>`."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from space_support import SPACE, Api

BOTH_STORES = True  # the feed answers from the store seam: SQLite and PostgreSQL

C = f"/v1/spaces/{SPACE}/changes"


async def next_event(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    """One SSE event (comments skipped) as {id, event, data}."""
    event: dict[str, Any] = {}
    async with asyncio.timeout(5):
        while True:
            line = (await resp.content.readline()).decode().rstrip("\n")
            if not line:
                if "data" in event:
                    return {**event, "data": json.loads(event["data"])}
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(": ")
            event[name] = value


async def open_stream(api: Api, path: str, **headers: str) -> aiohttp.ClientResponse:
    h = {"Authorization": f"Bearer {api.token}", **headers}
    return await api.client.get(path, headers=h)


async def test_stream_sends_hello_then_each_change_live(api: Api) -> None:
    resp = await open_stream(api, C + "/stream")
    try:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        hello = await next_event(resp)
        assert hello["event"] == "hello" and hello["data"] == {"cursor": 0}
        record = await api.create_trigger()
        change = await next_event(resp)
        assert change["event"] == "change" and change["data"]["op"] == "create"
        assert change["data"]["record"]["id"] == record["id"]
        assert change["id"] == str(change["data"]["seq"])
        await api.patch(f"/spaces/{SPACE}/triggers/{record['id']}", {"name": "x"})
        update = await next_event(resp)
        assert update["data"]["op"] == "update" and int(update["id"]) > int(change["id"])
    finally:
        resp.close()


async def test_accept_header_and_last_event_id_resume(api: Api) -> None:
    first = await api.create_trigger()
    second = await api.create_trigger()
    _, page = await api.get(f"/spaces/{SPACE}/changes")
    seq_first = page["changes"][0]["seq"]
    resp = await open_stream(
        api, C, Accept="text/event-stream", **{"Last-Event-ID": str(seq_first)}
    )
    try:
        hello = await next_event(resp)
        assert hello["data"] == {"cursor": seq_first}
        replayed = await next_event(resp)
        assert replayed["data"]["triggerId"] == second["id"] != first["id"]
    finally:
        resp.close()


async def test_non_ascii_digit_last_event_id_replays_from_the_start(api: Api) -> None:
    record = await api.create_trigger()
    resp = await open_stream(api, C + "/stream", **{"Last-Event-ID": "²"})
    try:
        assert resp.status == 200
        hello = await next_event(resp)
        assert hello["data"] == {"cursor": 0}
        replayed = await next_event(resp)
        assert replayed["data"]["triggerId"] == record["id"]
    finally:
        resp.close()
