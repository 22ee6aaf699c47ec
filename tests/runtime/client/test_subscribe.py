"""The SSE subscription loop against a small real SSE server on 127.0.0.1.

The server (`Hub` + `hub_app`) keeps a message history with integer seqs, answers
`hello` with its cursor, replays after `Last-Event-ID`, and can be told to answer
a status, drop a stream abruptly, end it cleanly after a partial event, stall
(no heartbeat) or go away and come back. Backoff sleeps go through a FakeClock
that a driver task advances, so nothing waits on real backoff time.
"""

import asyncio
import json
from collections import deque

import aiohttp
import pytest
from aiohttp import web

from core.aio import Backoff
from core.clock import FakeClock
from runtime.client.sse import SseEvent
from runtime.client.stream import ConnectionState, Permanent, Stream, sse_session

HUB = web.AppKey("hub", object)


class Hub:
    """The world's edge: a chat's history and its live subscribers."""

    def __init__(self) -> None:
        self.history: list[tuple[int, str]] = []
        self.queues: set[asyncio.Queue] = set()
        self.statuses: deque[tuple[int, dict[str, str]]] = deque()
        self.requests: list[dict[str, str]] = []
        self.ignore_last_event_id = False
        self.endless_error_bodies = False
        self.freed = 0  # endless answers whose connection the client closed
        self.ping_every: float | None = None
        self.pings = 0
        self.changed = asyncio.Event()

    def publish(self, text: str) -> int:
        seq = len(self.history) + 1
        self.history.append((seq, text))
        self._tell(("message", seq, text))
        return seq

    def drop(self) -> None:
        self._tell(("abort",))

    def end_with_partial(self) -> None:
        self._tell(("partial-eof",))

    def stall(self) -> None:
        self._tell(("stall",))

    def send_raw(self, chunk: bytes) -> None:
        self._tell(("raw", chunk))

    def _tell(self, item: tuple) -> None:
        for queue in list(self.queues):
            queue.put_nowait(item)

    def bump(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


def frame(event: str, data: str, id: int | None = None) -> bytes:
    head = f"id: {id}\r\n" if id is not None else ""
    return f"{head}event: {event}\r\ndata: {data}\r\n\r\n".encode()


async def stream(request: web.Request) -> web.StreamResponse:
    hub: Hub = request.app[HUB]
    hub.requests.append(dict(request.headers))
    hub.bump()
    if hub.statuses:
        status, headers = hub.statuses.popleft()
        body = {"error": "not_found" if status == 404 else f"e{status}", "detail": "said so"}
        if hub.endless_error_bodies:
            return await endless_answer(request, hub, status, json.dumps(body).encode())
        if status == 200:  # a 200 that is not an event stream
            return web.json_response(body, headers=headers)
        return web.json_response(body if status != 204 else None, status=status, headers=headers)
    queue: asyncio.Queue = asyncio.Queue()
    hub.queues.add(queue)  # registered before the replay: nothing falls between
    try:
        return await serve(request, hub, queue)
    finally:
        hub.queues.discard(queue)


async def endless_answer(
    request: web.Request, hub: Hub, status: int, body: bytes
) -> web.StreamResponse:
    """An answer whose body never ends: only the client closing it frees the connection."""
    resp = web.StreamResponse(status=status, headers={"Content-Type": "application/json"})
    await resp.prepare(request)
    await resp.write(body)
    queue: asyncio.Queue = asyncio.Queue()
    hub.queues.add(queue)
    try:
        await stall_until_closed(queue)
    except asyncio.CancelledError:  # the client closed the connection
        hub.freed += 1
        hub.bump()
        raise
    finally:
        hub.queues.discard(queue)
    return resp


async def serve(request: web.Request, hub: Hub, queue: asyncio.Queue) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    last = request.headers.get("Last-Event-ID")
    floor = 0 if last is None or hub.ignore_last_event_id else int(last)
    await resp.write(frame("hello", json.dumps({"cursor": len(hub.history)})))
    if floor > len(hub.history):  # a cursor this store never gave out (it was reset)
        await resp.write(frame("gap", json.dumps({"reason": "unknown_cursor"}), len(hub.history)))
        floor = len(hub.history)
    if last is not None:
        for seq, text in hub.history:
            if seq > floor:
                await resp.write(frame("message", json.dumps({"seq": seq, "text": text}), seq))
    while True:
        item = await next_item(hub, queue)
        if item[0] == "message":
            _, seq, text = item
            await resp.write(frame("message", json.dumps({"seq": seq, "text": text}), seq))
        elif item[0] == "ping":
            await resp.write(b": ping\r\n\r\n")
            hub.pings += 1
            hub.bump()
        elif item[0] == "abort":
            await resp.write(b"id: 999\r\nevent: message\r\ndata: half")
            request.transport.abort()
            return resp
        elif item[0] == "partial-eof":
            await resp.write(b"event: zzz\r\ndata: partial\r\n")
            await resp.write_eof()
            return resp
        elif item[0] == "raw":
            await resp.write(item[1])
        elif item[0] == "stall":
            await stall_until_closed(queue)
            return resp
        elif item[0] == "close":
            return resp


async def next_item(hub: Hub, queue: asyncio.Queue) -> tuple:
    if hub.ping_every is None:
        return await queue.get()
    try:
        async with asyncio.timeout(hub.ping_every):
            return await queue.get()
    except TimeoutError:
        return ("ping",)


async def stall_until_closed(queue: asyncio.Queue) -> None:
    while (await queue.get())[0] != "close":
        pass


async def on_shutdown(app: web.Application) -> None:
    app[HUB]._tell(("close",))


def hub_app(hub: Hub) -> web.Application:
    app = web.Application()
    app[HUB] = hub
    app.router.add_get("/stream", stream)
    app.on_shutdown.append(on_shutdown)
    return app


class Collector:
    """The caller's side: every event delivered, in order, with waiting under a deadline."""

    def __init__(self) -> None:
        self.events: list[SseEvent] = []
        self._changed = asyncio.Condition()

    async def __call__(self, event: SseEvent) -> None:
        async with self._changed:
            self.events.append(event)
            self._changed.notify_all()

    @property
    def seqs(self) -> list[int]:
        return [e.json()["seq"] for e in self.events if e.event == "message"]

    async def wait_for(self, predicate, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: predicate(self))


async def wait_until(hub: Hub, predicate, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await hub.changed.wait()


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
async def drive(clock):
    """Advance the fake clock whenever the loop sleeps in backoff."""

    async def jump() -> None:
        while True:
            await clock.wait_for_sleepers()
            clock.advance_to_next()

    task = asyncio.create_task(jump())
    yield
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


@pytest.fixture
async def hub_server(aiohttp_server):
    hub = Hub()
    server = await aiohttp_server(hub_app(hub))
    return hub, server


@pytest.fixture
async def follow(clock):
    """Start a subscription in a task; cancel it at teardown."""
    tasks = []

    def start(url: str, **kw):
        kw.setdefault("read_timeout", 5.0)
        sub = Stream(url, "tok", clock=clock, **kw)
        got = Collector()
        task = asyncio.create_task(sub.run(got))
        tasks.append(task)
        return sub, got, task

    yield start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def url(server) -> str:
    return str(server.make_url("/stream"))


def hellos(got: Collector) -> int:
    return sum(1 for e in got.events if e.event == "hello")


async def test_steady_stream_delivers_in_order_with_auth(hub_server, follow):
    hub, server = hub_server
    sub, got, _ = follow(url(server))
    await got.wait_for(lambda g: hellos(g) == 1)
    for i in range(5):
        hub.publish(f"m{i}")
    await got.wait_for(lambda g: len(g.seqs) == 5)
    assert got.seqs == [1, 2, 3, 4, 5]
    assert sub.status.state == ConnectionState.LIVE
    assert sub.last_id == 5
    assert hub.requests[0]["Authorization"] == "Bearer tok"
    assert "Last-Event-ID" not in hub.requests[0]


async def test_abrupt_drop_resumes_without_loss_or_repeat(hub_server, follow, drive):
    hub, server = hub_server
    sub, got, _ = follow(url(server))
    await got.wait_for(lambda g: hellos(g) == 1)
    for round_ in range(4):
        for i in range(3):
            hub.publish(f"r{round_}-{i}")
        await got.wait_for(lambda g, n=4 * round_ + 3: len(g.seqs) == n)
        hub.drop()  # mid-event: "id: 999 … data: half" is never delivered
        hub.publish(f"r{round_}-while-down")  # live or replayed, it must arrive once
    await got.wait_for(lambda g: len(g.seqs) == 16)
    assert got.seqs == list(range(1, 17))
    assert all("half" not in e.data for e in got.events)
    assert [r.get("Last-Event-ID") for r in hub.requests[1:]][:1] == ["3"]
    assert sub.status.connections >= 5


async def test_clean_end_with_partial_event_discards_it(hub_server, follow, drive):
    hub, server = hub_server
    _, got, _ = follow(url(server))
    await got.wait_for(lambda g: hellos(g) == 1)
    hub.publish("a")
    await got.wait_for(lambda g: len(g.seqs) == 1)
    hub.end_with_partial()
    hub.publish("b")
    await got.wait_for(lambda g: len(g.seqs) == 2)
    assert got.seqs == [1, 2]
    assert [e.event for e in got.events] == ["hello", "message", "hello", "message"]
    assert all("partial" not in e.data for e in got.events)


async def test_hello_cursor_is_resumed_from_when_nothing_was_seen(hub_server, follow, drive):
    hub, server = hub_server
    hub.publish("before-1")
    hub.publish("before-2")
    sub, got, _ = follow(url(server))
    await got.wait_for(lambda g: hellos(g) == 1)
    assert sub.last_id == 2
    hub.drop()
    hub.publish("while-down")
    await got.wait_for(lambda g: len(g.seqs) == 1)
    assert got.seqs == [3]  # neither the old history nor a loss
    assert hub.requests[1]["Last-Event-ID"] == "2"


async def test_server_replaying_everything_is_deduplicated(hub_server, follow, drive):
    hub, server = hub_server
    hub.ignore_last_event_id = True
    _, got, _ = follow(url(server))
    await got.wait_for(lambda g: hellos(g) == 1)
    for i in range(3):
        hub.publish(f"m{i}")
    await got.wait_for(lambda g: len(g.seqs) == 3)
    hub.drop()
    await got.wait_for(lambda g: hellos(g) == 2)
    hub.publish("m3")
    await got.wait_for(lambda g: len(g.seqs) == 4)
    assert got.seqs == [1, 2, 3, 4]


async def test_gap_after_a_store_reset_moves_the_cursor_back(hub_server, follow, drive):
    hub, server = hub_server
    sub, got, _ = follow(url(server))
    await got.wait_for(lambda g: hellos(g) == 1)
    for i in range(3):
        hub.publish(f"m{i}")
    await got.wait_for(lambda g: len(g.seqs) == 3)
    hub.history.clear()
    hub.drop()
    await got.wait_for(lambda g: any(e.event == "gap" for e in g.events))
    hub.publish("first-after-reset")
    await got.wait_for(lambda g: len(g.seqs) == 4)
    assert got.seqs == [1, 2, 3, 1]
    assert sub.last_id == 1


async def test_stalled_stream_is_noticed_by_the_read_timeout(hub_server, follow, drive):
    hub, server = hub_server
    sub, got, _ = follow(url(server), read_timeout=0.3)
    await got.wait_for(lambda g: hellos(g) == 1)
    hub.publish("a")
    await got.wait_for(lambda g: len(g.seqs) == 1)
    hub.stall()
    hub.publish("sent-into-the-stall")
    await got.wait_for(lambda g: len(g.seqs) == 2)
    assert got.seqs == [1, 2]
    assert hub.requests[1]["Last-Event-ID"] == "1"
    assert sub.status.connections == 2
    assert "Timeout" in sub.status.last_error


async def test_heartbeats_keep_a_quiet_stream_alive(hub_server, follow):
    hub, server = hub_server
    hub.ping_every = 0.05
    sub, got, _ = follow(url(server), read_timeout=0.3)
    await got.wait_for(lambda g: hellos(g) == 1)
    await wait_until(hub, lambda: hub.pings >= 12)  # 0.6 s of silence but for pings
    assert sub.status.connections == 1
    assert sub.status.state == ConnectionState.LIVE


@pytest.mark.parametrize(
    ("status", "headers"),
    [(503, {}), (500, {}), (502, {}), (408, {}), (429, {"Retry-After": "7"}), (204, {})],
)
async def test_transient_statuses_are_retried(hub_server, follow, drive, clock, status, headers):
    hub, server = hub_server
    hub.statuses.extend([(status, headers), (status, headers)])
    hub.publish("old")
    sub, got, _ = follow(url(server))
    await got.wait_for(lambda g: hellos(g) == 1)
    hub.publish("new")
    await got.wait_for(lambda g: len(g.seqs) == 1)
    assert got.seqs == [2]
    assert sub.status.connections == 3
    assert len(clock.slept) == 2
    if "Retry-After" in headers:
        assert min(clock.slept) >= 7


@pytest.mark.parametrize("status", [404, 400, 401, 403, 410])
async def test_other_4xx_is_permanent(hub_server, clock, status):
    hub, server = hub_server
    hub.statuses.append((status, {}))
    sub = Stream(url(server), "tok", clock=clock)
    with pytest.raises(Permanent) as caught:
        async with asyncio.timeout(5):
            await sub.run(Collector())
    assert caught.value.status == status
    assert caught.value.detail == "said so"
    assert sub.status.state == ConnectionState.FAILED
    assert sub.status.connections == 1
    assert clock.slept == []
    if status == 404:
        assert caught.value.code == "not_found"


async def test_server_restart_loses_nothing(aiohttp_server, follow, drive):
    hub = Hub()
    first = await aiohttp_server(hub_app(hub))
    port = first.port
    sub, got, _ = follow(url(first))
    await got.wait_for(lambda g: hellos(g) == 1)
    hub.publish("a")
    await got.wait_for(lambda g: len(g.seqs) == 1)
    await first.close()
    hub.publish("while-the-server-was-down")
    await aiohttp_server(hub_app(hub), port=port)
    hub.publish("after")
    await got.wait_for(lambda g: len(g.seqs) == 3)
    assert got.seqs == [1, 2, 3]
    assert sub.status.state == ConnectionState.LIVE


async def test_refused_connections_back_off_with_capped_full_jitter(clock, follow):
    backoff = Backoff(base=0.5, cap=4.0)
    sub, _, _ = follow("http://127.0.0.1:9/stream", backoff=backoff, draw=lambda: 0.999)
    async with asyncio.timeout(5):
        while len(clock.slept) < 8:
            await clock.wait_for_sleepers()
            clock.advance_to_next()
    assert clock.slept[:4] == pytest.approx([0.4995, 0.999, 1.998, 3.996])
    assert max(clock.slept) <= 4.0
    assert sub.status.state in (ConnectionState.BACKOFF, ConnectionState.CONNECTING)
    assert sub.status.last_error


async def test_cancel_stops_cleanly_and_reports_stopped(hub_server, follow):
    _, server = hub_server
    states = []
    sub, got, task = follow(url(server), on_status=lambda s: states.append(s.state))
    await got.wait_for(lambda g: hellos(g) == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert states[:2] == [ConnectionState.CONNECTING, ConnectionState.LIVE]
    assert sub.status.state == ConnectionState.STOPPED


async def test_a_caller_error_is_raised_not_retried(hub_server, clock):
    _, server = hub_server

    async def broken(event: SseEvent) -> None:
        raise ConnectionResetError("the caller's own bug")

    sub = Stream(url(server), "tok", clock=clock)
    with pytest.raises(ConnectionResetError):
        async with asyncio.timeout(5):
            await sub.run(broken)
    assert sub.status.connections == 1


async def test_a_shared_session_is_left_open_for_its_owner(hub_server, clock, follow):
    _, server = hub_server
    async with sse_session() as session:
        _, got, task = follow(url(server), session=session)
        await got.wait_for(lambda g: hellos(g) == 1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert not session.closed


async def test_an_id_less_event_is_not_taken_for_a_repeat(hub_server, follow):
    hub, server = hub_server
    sub, got, _ = follow(url(server))
    await got.wait_for(lambda g: hellos(g) == 1)
    hub.publish("a")
    hub.send_raw(b"event: note\ndata: no id\n\nid: 5\n\ndata: still none\n\n")
    await got.wait_for(lambda g: len(g.events) == 4)
    assert [(e.event, e.id) for e in got.events[2:]] == [("note", None), ("message", None)]
    assert sub.last_id == 1


async def test_the_end_of_a_stream_is_reconnected_by_our_loop_only(
    hub_server, follow, clock, drive
):
    hub, server = hub_server
    sub, got, _ = follow(url(server))
    await got.wait_for(lambda g: hellos(g) == 1)
    hub.publish("a")
    await got.wait_for(lambda g: len(g.seqs) == 1)
    hub.end_with_partial()
    await got.wait_for(lambda g: hellos(g) == 2)
    assert sub.status.connections == 2
    assert len(clock.slept) == 1  # our backoff, through the Clock: not the package's sleep
    assert sub.status.last_error == "the stream ended"
    assert [r.get("Last-Event-ID") for r in hub.requests] == [None, "1"]


@pytest.mark.parametrize(
    "poison",
    [b"data: \xff\n\n", b"data: " + b"x" * (600 * 1024) + b"\n\n"],
    ids=["invalid-utf8", "line-over-512KiB"],
)
async def test_an_unreadable_event_is_a_transient_failure(hub_server, follow, drive, poison):
    hub, server = hub_server
    sub, got, _ = follow(url(server))
    await got.wait_for(lambda g: hellos(g) == 1)
    hub.publish("a")
    await got.wait_for(lambda g: len(g.seqs) == 1)
    hub.send_raw(poison)
    await got.wait_for(lambda g: hellos(g) == 2)
    hub.publish("b")
    await got.wait_for(lambda g: len(g.seqs) == 2)
    assert got.seqs == [1, 2]
    assert sub.status.connections == 2
    assert sub.status.last_error


async def test_a_200_that_is_not_an_event_stream_is_retried(hub_server, follow, drive, clock):
    hub, server = hub_server
    hub.statuses.append((200, {}))
    sub, got, _ = follow(url(server))
    await got.wait_for(lambda g: hellos(g) == 1)
    assert sub.status.connections == 2
    assert len(clock.slept) == 1


async def test_error_answers_are_closed_not_left_open(hub_server, follow, drive):
    hub, server = hub_server  # aiohttp's TestServer cancels a handler when its client leaves
    hub.endless_error_bodies = True
    hub.statuses.extend([(503, {}), (200, {}), (404, {})])
    async with sse_session() as session:  # a shared session stays open: nothing closes them
        sub, _, task = follow(url(server), session=session)
        with pytest.raises(Permanent):
            async with asyncio.timeout(5):
                await task
        await wait_until(hub, lambda: hub.freed == 3)  # the package would leave all three open
    assert sub.status.connections == 3


async def test_a_session_without_our_tracing_still_maps_statuses(hub_server, clock):
    hub, server = hub_server
    hub.statuses.append((404, {}))
    async with aiohttp.ClientSession() as session:
        sub = Stream(url(server), "tok", clock=clock, session=session)
        with pytest.raises(Permanent) as caught:
            async with asyncio.timeout(5):
                await sub.run(Collector())
    assert (caught.value.status, caught.value.code) == (404, "http_404")
    assert "404" in caught.value.detail
