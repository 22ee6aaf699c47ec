"""Server-sent event streams for aiohttp handlers, and the registry that ends them at shutdown.

Owns the server's side of the SSE wire: headers, framing, heartbeats while idle, a bounded
queue per stream (a full one closes it), noticing a client that left, and closing streams
at shutdown or on demand. Deadlines are the `clock`'s. How to build a stream for a feed is
in docs/architecture.md, "Module notes". Must not touch storage, know any route, or know
what is queued.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable, Hashable
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

from aiohttp import web

from core.clock import Clock, SystemClock

DEFAULT_HEARTBEAT = 15.0
DEFAULT_QUEUE_SIZE = 1000
DEFAULT_SEND_TIMEOUT = 60.0
_SYSTEM = SystemClock()
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_FIELD_BAD = re.compile(r"[\r\n\0]")

K = TypeVar("K", bound=Hashable)
log = logging.getLogger("baton.space")


def frame(data: str, *, id: str | int | None = None, event: str | None = None) -> bytes:
    """One SSE event on the wire; `id` and `event` must not hold CR, LF or NUL."""
    lines = []
    if id is not None:
        lines.append(f"id: {_field('id', str(id))}")
    if event is not None:
        lines.append(f"event: {_field('event', event)}")
    lines.extend(f"data: {line}" for line in _LINE_BREAK.split(data))
    return ("\n".join(lines) + "\n\n").encode()


def _field(name: str, value: str) -> str:
    if _FIELD_BAD.search(value):
        raise ValueError(f"SSE `{name}` must not contain CR, LF or NUL: {value!r}")
    return value


def last_event_id(request: web.BaseRequest) -> str | None:
    """The `Last-Event-ID` the client resumes from, if it sent one."""
    return request.headers.get("Last-Event-ID")


class EventStream:
    """One open SSE response: write events to it, iterate what producers queued for it."""

    def __init__(
        self,
        request: web.BaseRequest,
        *,
        heartbeat: float = DEFAULT_HEARTBEAT,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        send_timeout: float = DEFAULT_SEND_TIMEOUT,
        clock: Clock | None = None,
    ) -> None:
        self.request = request
        self.clock = clock or _SYSTEM
        self.heartbeat = heartbeat
        self.send_timeout = send_timeout
        self.response = web.StreamResponse(headers=_HEADERS)
        self.closed_reason: str | None = None
        self._queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=queue_size)
        self._wake = asyncio.Event()
        self._nudged = False  # a nudge is queued and nothing was taken since

    @classmethod
    @asynccontextmanager
    async def open(cls, request: web.Request, **options: Any) -> AsyncIterator[EventStream]:
        """Prepare the response and keep the stream in the app's registry while open."""
        stream = cls(request, **options)
        await stream.response.prepare(request)
        registry = request.app[STREAMS]
        registry.add(stream)
        try:
            yield stream
        except Exception:  # after the 200 no second response may follow: end this stream only
            log.exception("%s %s: event stream failed", request.method, request.path)
            stream.close("error")
        finally:
            registry.discard(stream)
            stream.close("done")

    @property
    def closed(self) -> bool:
        return self.closed_reason is not None

    def push(self, item: Any) -> bool:
        """Queue `item` without blocking; a full queue closes the stream. False if not queued."""
        if self.closed:
            return False
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            self.close("overflow")
            return False
        self._wake.set()
        return True

    def nudge(self, item: Any) -> bool:
        """Queue `item`, a wake to re-read from the stream's cursor, unless one is queued and
        nothing was taken since: that one reads after this wake too (a burst, one read)."""
        if self._nudged and not self.closed:
            return True
        self._nudged = self.push(item)
        return self._nudged

    def close(self, reason: str = "closed") -> None:
        """End the stream: iteration stops at once, later sends are dropped."""
        if self.closed_reason is None:
            self.closed_reason = reason
        self._wake.set()

    async def send(
        self, data: str, *, id: str | int | None = None, event: str | None = None
    ) -> bool:
        """Write one event; False (and the stream closed) if the client is gone."""
        return await self._write(frame(data, id=id, event=event))

    async def comment(self, text: str = "ping") -> bool:
        return await self._write(f": {_field('comment', text)}\n\n".encode())

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Any:
        while not self.closed:
            if not self._queue.empty():
                self._nudged = False
                return self._queue.get_nowait()
            await self._idle()
        raise StopAsyncIteration

    async def _idle(self) -> None:
        """Wait for an item or a close; on a quiet heartbeat, probe the client with a ping."""
        self._wake.clear()
        if not self._queue.empty() or self.closed:
            return
        try:
            async with self.clock.timeout(self.heartbeat):
                await self._wake.wait()
        except TimeoutError:
            await self.comment()

    async def _write(self, data: bytes) -> bool:
        if self.closed:
            return False
        if self.request.transport is None:
            self.close("disconnected")
            return False
        try:
            async with self.clock.timeout(self.send_timeout):
                await self.response.write(data)
        except (ConnectionError, RuntimeError):
            self.close("disconnected")
        except TimeoutError:
            self._abort()
        return not self.closed

    def _abort(self) -> None:
        """A client that stopped reading: cut the connection rather than wait on it."""
        self.close("send_timeout")
        transport = self.request.transport
        if transport is not None:
            transport.abort()


_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "Connection": "keep-alive",
    "X-Accel-Buffering": "no",
}


class StreamRegistry:
    """Every open stream of one app, so shutdown can end them all."""

    def __init__(self) -> None:
        self._streams: set[EventStream] = set()

    def __len__(self) -> int:
        return len(self._streams)

    def add(self, stream: EventStream) -> None:
        self._streams.add(stream)

    def streams(self) -> list[EventStream]:
        """The open streams now (for metrics)."""
        return list(self._streams)

    def discard(self, stream: EventStream) -> None:
        self._streams.discard(stream)

    def close_all(self, reason: str = "shutdown") -> None:
        self.close_where(lambda _: True, reason)

    def close_where(self, which: Callable[[EventStream], bool], reason: str) -> int:
        """End the open streams `which` picks (e.g. those of a revoked token); how many."""
        picked = [stream for stream in self._streams if which(stream)]
        for stream in picked:
            stream.close(reason)
        return len(picked)


STREAMS = web.AppKey("sse_streams", StreamRegistry)


def install(app: web.Application) -> None:
    """Give `app` its stream registry and the shutdown hook that ends every stream; idempotent."""
    if STREAMS in app:
        return
    app[STREAMS] = StreamRegistry()
    app.on_shutdown.append(_close_streams)


async def _close_streams(app: web.Application) -> None:
    app[STREAMS].close_all()


class Fanout(Generic[K]):
    """Streams subscribed by topic key; `publish` pushes one item to each, never blocking."""

    def __init__(self) -> None:
        self._topics: dict[K, set[EventStream]] = {}

    def add(self, key: K, stream: EventStream) -> None:
        self._topics.setdefault(key, set()).add(stream)

    def discard(self, key: K, stream: EventStream) -> None:
        streams = self._topics.get(key)
        if streams is None:
            return
        streams.discard(stream)
        if not streams:
            del self._topics[key]

    def keys(self) -> list[K]:
        return list(self._topics)

    def nudge(self, key: K, item: Any) -> int:
        """`EventStream.nudge` each stream on `key` with `item`; the number that hold one."""
        return sum(stream.nudge(item) for stream in list(self._topics.get(key, ())))

    def count(self, key: K) -> int:
        return len(self._topics.get(key, ()))

    def publish(self, key: K, item: Any) -> int:
        """Push `item` to every stream on `key`; the number that took it."""
        return sum(stream.push(item) for stream in list(self._topics.get(key, ())))


__all__ = [
    "STREAMS",
    "EventStream",
    "Fanout",
    "StreamRegistry",
    "frame",
    "install",
    "last_event_id",
]
