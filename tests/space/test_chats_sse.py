"""The generic SSE helper the chat stream is built on: framing, the bounded queue, fan-out."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer, make_mocked_request

from core.clock import FakeClock
from space import streams
from space.streams import EventStream, Fanout, frame


@pytest.mark.parametrize(
    ("data", "kw", "wire"),
    [
        ("{}", {}, b"data: {}\n\n"),
        ("x", {"id": 7, "event": "message"}, b"id: 7\nevent: message\ndata: x\n\n"),
        ("a\nb\r\nc\rd", {}, b"data: a\ndata: b\ndata: c\ndata: d\n\n"),
        ("", {"event": "hello"}, b"event: hello\ndata: \n\n"),
        ("line\u2028sep", {}, "data: line\u2028sep\n\n".encode()),
    ],
)
def test_frame(data: str, kw: dict, wire: bytes) -> None:
    assert frame(data, **kw) == wire


@pytest.mark.parametrize("kw", [{"id": "1\n2"}, {"event": "a\rb"}, {"id": "x\0"}])
def test_frame_refuses_line_breaks_in_fields(kw: dict) -> None:
    with pytest.raises(ValueError, match="must not contain"):
        frame("x", **kw)


def stream(queue_size: int = 2) -> EventStream:
    return EventStream(make_mocked_request("GET", "/stream"), queue_size=queue_size)


async def test_a_subscriber_that_falls_behind_is_cut_not_waited_for() -> None:
    s = stream(queue_size=2)
    assert s.push(1) and s.push(2)
    assert s.push(3) is False
    assert s.closed_reason == "overflow"
    assert [item async for item in s] == []
    assert s.push(4) is False


async def test_queued_items_come_out_in_order_until_closed() -> None:
    s = stream()
    s.push("a")
    s.push("b")
    assert await s.__anext__() == "a"
    assert await s.__anext__() == "b"
    s.close("shutdown")
    assert [item async for item in s] == []
    assert await s.send("late") is False


async def test_fanout_pushes_to_the_key_only_and_forgets_empty_keys() -> None:
    topics: Fanout[str] = Fanout()
    a, b, other = stream(), stream(), stream()
    topics.add("chat", a)
    topics.add("chat", b)
    topics.add("else", other)
    assert topics.publish("chat", 1) == 2
    assert topics.publish("none", 1) == 0
    topics.discard("chat", a)
    topics.discard("chat", b)
    assert topics.count("chat") == 0
    assert [await a.__anext__(), await b.__anext__()] == [1, 1]
    assert other.push("x") and await other.__anext__() == "x"


async def test_the_heartbeat_is_the_clocks_deadline() -> None:
    """A quiet stream pings when the stream's clock reaches its heartbeat, not before."""
    clock = FakeClock()

    async def handler(request: web.Request) -> web.StreamResponse:
        async with EventStream.open(request, heartbeat=15.0, clock=clock) as s:
            await s.send("{}", event="hello")
            async for _ in s:
                pass
        return s.response

    app = web.Application()
    streams.install(app)
    app.router.add_get("/stream", handler)
    async with (
        TestServer(app) as server,
        aiohttp.ClientSession() as session,
        session.get(server.make_url("/stream")) as resp,
    ):
        assert (await resp.content.readuntil(b"\n\n")).startswith(b"event: hello")
        await asyncio.wait_for(clock.wait_for_sleepers(1), 5)
        clock.advance(14.9)
        assert clock.sleepers == 1, "the heartbeat's deadline passed early"
        clock.advance(0.1)
        assert await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 5) == b": ping\n\n"


async def test_a_fake_clock_timeout_ends_the_block_at_its_deadline() -> None:
    clock = FakeClock()
    blocked = asyncio.Event()

    async def stuck() -> None:
        async with clock.timeout(60.0):
            blocked.set()
            await asyncio.Event().wait()

    task = asyncio.ensure_future(stuck())
    await asyncio.wait_for(blocked.wait(), 5)
    clock.advance(59.0)
    assert clock.sleepers == 1 and not task.done()
    clock.advance(1.0)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(task, 5)
    assert clock.sleepers == 0
