"""Our SSE subscription loop: one stream URL, followed across drops, without loss or repeats.

Owns the life of one subscription: connecting with `Last-Event-ID`, parsing with
aiohttp-sse-client's `EventSource` used for ONE connection only (a new one per
connection, its own reconnect stopped), delivering `hello`, `message`, `gap` (and
any other named event) to the caller's async callback as `SseEvent`s,
deduplicating by integer event id, noticing a silently dead stream by a read
timeout longer than the server's heartbeat, and reconnecting with capped
full-jitter backoff slept through the injected `Clock`.

Failures are classified here, not by the package: a 4xx other than 408/429 is
permanent (`Permanent` is raised, carrying status, code and detail, e.g. 404
`unknown_chat`); everything else (5xx, 408, 429, 204, refused connections, abrupt
drops, a clean end of stream, a read timeout, an unparseable stream) is transient
and retried. It must not decide what an event means (that is the caller's) and
never sleeps except through the Clock.
"""

from __future__ import annotations

import enum
import random
import re
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import datetime
from types import SimpleNamespace

import aiohttp
import msgspec
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp_sse_client import client as sse_client

from programs.routes import ApiError, error_from
from runtime.clock import Clock
from runtime.sse import SseEvent

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


class _StreamEnded(Exception):
    """The server ended the stream cleanly (raised to stop the package's own reconnect)."""


# OSError covers TimeoutError and the package's ConnectionError family; UnicodeDecodeError
# is its strict UTF-8 decoding, HttpProcessingError aiohttp's LineTooLong (a line > 512 KiB).
_TRANSIENT = (aiohttp.ClientError, OSError, HttpProcessingError, UnicodeDecodeError, _Retry)
# The package's status errors: "fetch <url> failed: 503", "… wrong response status: 204".
_STATUS_IN_MESSAGE = re.compile(r" failed(?: with wrong response status)?: (\d{3})$")
_ERROR_BODY_LIMIT = 65536


def sse_session(connect_timeout: float = 10.0) -> aiohttp.ClientSession:
    """A session for streams: no connection cap (one stream per chat) and no total timeout.

    It also hands each stream request's response to `_Answer` (aiohttp request tracing),
    so an error answer's body and `Retry-After`, which the package hides, stay readable.
    """
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout),
        trace_configs=[_answer_trace()],
    )


class _Answer:
    """The response to one connection's request, when the session traces it (else None)."""

    def __init__(self) -> None:
        self.response: aiohttp.ClientResponse | None = None

    def close(self) -> None:
        """The package never releases an error response: close whatever was answered."""
        if self.response is not None:
            self.response.close()


def _answer_trace() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_request_end.append(_keep_answer)
    return trace


async def _keep_answer(
    _session: aiohttp.ClientSession, ctx: SimpleNamespace, params: aiohttp.TraceRequestEndParams
) -> None:
    if isinstance(ctx.trace_request_ctx, _Answer):
        ctx.trace_request_ctx.response = params.response


class _OneConnection(sse_client.EventSource):
    """aiohttp-sse-client's `EventSource`, used as the parser of ONE connection.

    `max_connect_retry=0` and `on_error` raising `_StreamEnded` in CONNECTING (only the
    package's clean-end path calls it in that state) leave every reconnect to our loop;
    a new instance per connection drops an event left incomplete by a stream's end. An
    event's id is the one given in that event: the package would stamp an id-less event
    with the last id seen, which dedupe would then take for a repeat.
    """

    def __init__(
        self,
        url: str,
        *,
        session: aiohttp.ClientSession,
        headers: dict[str, str],
        timeout: aiohttp.ClientTimeout,
        answer: _Answer,
    ) -> None:
        super().__init__(
            url,
            session=session,
            max_connect_retry=0,
            on_error=self._stop_at_end,
            headers=headers,
            timeout=timeout,
            trace_request_ctx=answer,
        )

    def _stop_at_end(self) -> None:
        if self.ready_state == sse_client.READY_STATE_CONNECTING:
            raise _StreamEnded("the stream ended")

    def _dispatch_event(self) -> sse_client.MessageEvent | None:
        try:
            return super()._dispatch_event()
        finally:
            self._event_id = ""


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
            session = self._session
            if session is None:
                session = await stack.enter_async_context(sse_session())
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
        """One connection: returns when the server ends the stream, raises on anything else."""
        self._connections += 1
        self._set(ConnectionState.CONNECTING)
        answer = _Answer()
        source = _OneConnection(
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
        except _StreamEnded:
            return
        except ConnectionError as exc:
            await _refusal(exc, answer.response)
            raise
        finally:
            answer.close()

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
            attempt=self._attempt,
            connections=self._connections,
            last_id=self._last_id,
            last_error=self._error,
        )


def _event(message: sse_client.MessageEvent) -> SseEvent:
    return SseEvent(
        event=message.type or "message", data=message.data, id=message.last_event_id or None
    )


async def _refusal(exc: ConnectionError, response: aiohttp.ClientResponse | None) -> None:
    """Raise `Permanent` or `_Retry` for a status the package refused; return for anything else.

    The status comes from the package's message; the body and `Retry-After` from the traced
    response when there is one, else the message stands in for the detail.
    """
    found = _STATUS_IN_MESSAGE.search(str(exc))
    if found is None:
        return  # a wrong Content-Type or a socket error: transient as raised
    status = int(found.group(1))
    body = await _body(response) if response is not None else str(exc).encode()
    error = error_from(status, body)
    if 400 <= status < 500 and status not in RETRYABLE_4XX:
        raise Permanent(error.status, error.code, error.detail) from None
    headers = response.headers if response is not None else {}
    raise _Retry(str(error), _retry_after(headers.get("Retry-After"))) from None


async def _body(response: aiohttp.ClientResponse) -> bytes:
    try:
        return await response.content.read(_ERROR_BODY_LIMIT)
    except (aiohttp.ClientError, OSError):
        return b""


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
