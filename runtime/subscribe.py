"""Our SSE subscription loop: one stream URL, followed across drops, without loss or repeats.

Owns the life of one subscription: connecting with `Last-Event-ID`, parsing with
`runtime.sse` (a new parser per connection), delivering `hello`, `message`,
`gap` (and any other named event) to the caller's async callback, deduplicating
by integer event id, noticing a silently dead stream by a read timeout longer
than the server's heartbeat, and reconnecting with capped full-jitter backoff
slept through the injected `Clock`.

Failures are classified: a 4xx other than 408/429 is permanent (`Permanent` is
raised, carrying status, code and detail, e.g. 404 for an unknown chat);
everything else (5xx, 408, 429, 204, refused connections, abrupt drops, a clean
end of stream, a read timeout, an unparseable stream) is transient and retried.
It must not decide what an event means (that is the caller's) and never sleeps
except through the Clock.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import datetime

import aiohttp
import msgspec

from programs.routes import ApiError, error_from
from runtime.clock import Clock
from runtime.sse import EventTooLarge, SseEvent, SseParser

OnEvent = Callable[[SseEvent], Awaitable[None]]
RETRYABLE_4XX = frozenset({408, 429})


class ConnectionState(enum.StrEnum):
    CONNECTING = "connecting"
    LIVE = "live"
    BACKOFF = "backoff"
    FAILED = "failed"
    STOPPED = "stopped"


class Backoff(msgspec.Struct, frozen=True, kw_only=True):
    base: float = 0.5
    cap: float = 30.0

    def delay(self, attempt: int, draw: float, retry_after: float | None = None) -> float:
        """Full jitter: `draw` (in [0, 1)) of min(cap, base·2^(attempt-1)); at least Retry-After."""
        jittered = draw * min(self.cap, self.base * 2 ** max(0, attempt - 1))
        if retry_after is None:
            return jittered
        return max(jittered, min(retry_after, self.cap))


DEFAULT_BACKOFF = Backoff()


class SubscriptionStatus(msgspec.Struct, frozen=True, kw_only=True):
    state: ConnectionState
    since: datetime  # when this state began (the Clock's wall time)
    attempt: int  # failed connections since the last good one
    connections: int  # connections opened so far
    last_id: int | None
    last_error: str = ""


class Permanent(ApiError):
    """The server refused the stream for good (a 4xx other than 408/429)."""


class _Retry(Exception):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


class _CallerFailed(Exception):
    """The caller's callback raised: re-raised as itself, never retried as a network error."""


_TRANSIENT = (aiohttp.ClientError, OSError, EventTooLarge, _Retry)  # OSError ⊃ TimeoutError


def sse_session(connect_timeout: float = 10.0) -> aiohttp.ClientSession:
    """A session for streams: no connection cap (one stream per chat) and no total timeout."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout),
    )


class Subscription:
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
        self._backoff = backoff
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout, sock_read=read_timeout
        )
        self._draw = draw
        self._on_status = on_status
        self._last_id = last_id
        self._attempt = 0
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
            session = self._session or await stack.enter_async_context(sse_session())
            try:
                await self._follow(session, on_event)
            except _CallerFailed as exc:
                raise exc.__cause__ from None  # type: ignore[misc]
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
                retry_after = exc.retry_after if isinstance(exc, _Retry) else None
            await self._pause(retry_after)

    async def _pause(self, retry_after: float | None) -> None:
        self._attempt += 1
        self._set(ConnectionState.BACKOFF)
        await self._clock.sleep(self._backoff.delay(self._attempt, self._draw(), retry_after))

    async def _connect(self, session: aiohttp.ClientSession, on_event: OnEvent) -> None:
        self._connections += 1
        self._set(ConnectionState.CONNECTING)
        async with session.get(self.url, headers=self._headers(), timeout=self._timeout) as resp:
            await _check(resp)
            self._set(ConnectionState.LIVE)
            parser = SseParser()
            async for chunk in resp.content.iter_any():
                for event in parser.feed(chunk):
                    await self._deliver(event, on_event)

    async def _deliver(self, event: SseEvent, on_event: OnEvent) -> None:
        if event.event == "hello":
            self._attempt = 0
            if self._last_id is None:
                self._last_id = _hello_cursor(event)
        elif event.event != "gap" and self._seen(event.seq):
            return
        try:
            await on_event(event)
        except Exception as exc:
            raise _CallerFailed() from exc
        if event.event != "hello" and event.seq is not None:
            self._last_id = event.seq  # a gap's id may go back: the stream goes on from there
            self._attempt = 0

    def _seen(self, seq: int | None) -> bool:
        return seq is not None and self._last_id is not None and seq <= self._last_id

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
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
            attempt=self._attempt,
            connections=self._connections,
            last_id=self._last_id,
            last_error=self._error,
        )


async def _check(resp: aiohttp.ClientResponse) -> None:
    """Accept a 200 event stream; otherwise raise `Permanent` or `_Retry`."""
    kind = resp.headers.get("Content-Type", "")
    if resp.status == 200 and kind.startswith("text/event-stream"):
        return
    if resp.status == 200:
        raise _Retry(f"200 with Content-Type {kind!r}, not an event stream")
    error = error_from(resp.status, await resp.content.read(65536))
    if 400 <= resp.status < 500 and resp.status not in RETRYABLE_4XX:
        raise Permanent(error.status, error.code, error.detail)
    raise _Retry(str(error), _retry_after(resp.headers.get("Retry-After")))


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (the HTTP-date form is not honoured: backoff applies)."""
    if value is None or not value.strip().isdigit():
        return None
    return float(value.strip())


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
