"""Our SSE subscription loop: one stream URL, followed across drops, without loss or repeats.

Owns the life of one subscription: connecting with `Last-Event-ID` (aiohttp-sse-client's
`EventSource` for one connection only), delivering named events as `SseEvent`s, dedup by
event id (an `update` has none of its own: never a repeat), a read timeout past the
server's heartbeat, reconnecting with backoff on the Clock; and the classing of failures:
a 4xx other than 408/429 is `Permanent`, anything else is retried. Must not decide what an
event means, and never sleeps but through the Clock.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import datetime
from typing import TypedDict

import aiohttp
import msgspec
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp_sse_client import client as sse_client

from core.aio import Backoff
from core.clock import Clock
from runtime.client.sse import (
    OneConnection,
    Permanent,
    SseEvent,
    StreamEnded,
    TracedResponse,
    Transient,
    refusal,
    sse_session,
)

OnEvent = Callable[[SseEvent], Awaitable[None]]


class ConnectionState(enum.StrEnum):
    CONNECTING = "connecting"
    LIVE = "live"
    BACKOFF = "backoff"
    FAILED = "failed"
    STOPPED = "stopped"


DEFAULT_BACKOFF = Backoff(base=0.5, cap=30.0)  # full jitter, at least a Retry-After
UNPLACED = "update"  # an event that is no new position in the stream (SSE: no `id` field)


class SubscriptionStatus(msgspec.Struct, frozen=True, kw_only=True):
    state: ConnectionState
    since: datetime  # when this state began (the Clock's wall time)
    attempt: int  # failed connections since the last good one
    connections: int  # connections opened so far
    last_id: int | None
    last_error: str = ""


# OSError covers TimeoutError and the package's ConnectionError family; UnicodeDecodeError
# is its strict UTF-8 decoding, HttpProcessingError aiohttp's LineTooLong (a line > 512 KiB).
_TRANSIENT = (aiohttp.ClientError, OSError, HttpProcessingError, UnicodeDecodeError, Transient)
# The package's status errors: "fetch <url> failed: 503", "… wrong response status: 204".


class _CallerFailed(Exception):
    """The caller's callback raised: re-raised as itself, never retried as a network error."""

    def __init__(self, raised: Exception) -> None:
        super().__init__()
        self.raised = raised


class StreamOptions(TypedDict, total=False):
    """How a part's subscriptions reconnect (the `Stream` options it may set)."""

    backoff: Backoff
    read_timeout: float
    connect_timeout: float


class Stream:
    """Follows one SSE URL until cancelled or permanently refused."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        clock: Clock,
        session: aiohttp.ClientSession | None = None,
        backoff: Backoff = DEFAULT_BACKOFF,
        read_timeout: float = 45.0,
        connect_timeout: float = 10.0,
        last_id: int | None = None,
        draw: Callable[[], float] = random.random,
        on_status: Callable[[SubscriptionStatus], None] | None = None,
    ) -> None:
        self.url = url
        self._token = token
        self._clock = clock
        self._session = session
        self._retry = backoff.streak(draw)
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout, sock_read=read_timeout
        )
        self._on_status = on_status
        self._last_id = last_id
        self._connections = 0
        self._error = ""
        self._status = self._make_status(ConnectionState.CONNECTING)

    @property
    def status(self) -> SubscriptionStatus:
        return self._status

    @property
    def last_id(self) -> int | None:
        return self._last_id

    async def run(self, on_event: OnEvent) -> None:
        """Deliver events to `on_event` until cancelled; raise `Permanent` when refused for good."""
        async with AsyncExitStack() as stack:
            session = self._session
            if session is None:
                session = await stack.enter_async_context(sse_session())
            try:
                await self._follow(session, on_event)
            except _CallerFailed as exc:
                raise exc.raised from None
            finally:
                if self._status.state != ConnectionState.FAILED:
                    self._set(ConnectionState.STOPPED)

    async def _follow(self, session: aiohttp.ClientSession, on_event: OnEvent) -> None:
        while True:
            retry_after = None
            try:
                await self._connect(session, on_event)
                self._error = "the stream ended"
            except Permanent as exc:
                self._error = str(exc)
                self._set(ConnectionState.FAILED)
                raise
            except _TRANSIENT as exc:
                self._error = _describe(exc)
                retry_after = exc.retry_after if isinstance(exc, Transient) else None
            await self._pause(retry_after)

    async def _pause(self, retry_after: float | None) -> None:
        delay = self._retry.failed(retry_after)
        self._set(ConnectionState.BACKOFF)
        await self._clock.sleep(delay)

    async def _connect(self, session: aiohttp.ClientSession, on_event: OnEvent) -> None:
        """One connection: returns when the server ends the stream, raises on anything else."""
        self._connections += 1
        self._set(ConnectionState.CONNECTING)
        answer = TracedResponse()
        source = OneConnection(
            self.url,
            session=session,
            headers=self._headers(),
            timeout=self._timeout,
            answer=answer,
        )
        try:
            async with source:
                self._set(ConnectionState.LIVE)
                async for message in source:
                    await self._deliver(_event(message), on_event)
        except StreamEnded:
            return
        except ConnectionError as exc:
            await refusal(exc, answer.response)
            raise
        finally:
            answer.close()

    async def _deliver(self, event: SseEvent, on_event: OnEvent) -> None:
        if event.event == "hello":
            self._retry.reset()
            if self._last_id is None:
                self._last_id = _hello_cursor(event)
        elif event.event not in ("gap", UNPLACED) and self._seen(event.seq):
            return
        try:
            await on_event(event)
        except Exception as exc:
            raise _CallerFailed(exc) from exc
        if event.event not in ("hello", UNPLACED) and event.seq is not None:
            self._last_id = event.seq  # a gap's id may go back: the stream goes on from there
            self._retry.reset()

    def _seen(self, seq: int | None) -> bool:
        return seq is not None and self._last_id is not None and seq <= self._last_id

    def _headers(self) -> dict[str, str]:
        """A new dict per connection (the package adds Accept and Cache-Control to it)."""
        headers: dict[str, str] = {}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        if self._last_id is not None:
            headers["Last-Event-ID"] = str(self._last_id)
        return headers

    def _set(self, state: ConnectionState) -> None:
        self._status = self._make_status(state)
        if self._on_status is not None:
            self._on_status(self._status)

    def _make_status(self, state: ConnectionState) -> SubscriptionStatus:
        return SubscriptionStatus(
            state=state,
            since=self._clock.wall(),
            attempt=self._retry.failures,
            connections=self._connections,
            last_id=self._last_id,
            last_error=self._error,
        )


def _event(message: sse_client.MessageEvent) -> SseEvent:
    return SseEvent(
        event=message.type or "message", data=message.data, id=message.last_event_id or None
    )


def _hello_cursor(event: SseEvent) -> int | None:
    """The cursor a `hello` carries: `data.cursor`, else its integer id."""
    try:
        cursor = event.json().get("cursor")
    except (ValueError, AttributeError):
        cursor = None
    if isinstance(cursor, int) and not isinstance(cursor, bool):
        return cursor
    return event.seq


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
