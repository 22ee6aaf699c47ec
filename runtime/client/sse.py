"""One SSE connection through aiohttp-sse-client: the event it delivers, what its refusals mean.

Owns the value (`SseEvent`: name, data, and the id given *in that event*, never the last
one seen, so an event without an id is not mistaken for a repeat) and the package's
wrapping: a session that traces each response (`sse_session`), its `EventSource` as the
parser of ONE connection (`OneConnection`, its own reconnect stopped), and what it raises:
a 4xx other than 408/429 is `Permanent`, any other refused status a `Transient` carrying
`Retry-After`. Must not reconnect, sleep or deliver events: `runtime.client.stream` owns
the loop.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from typing import Any

import aiohttp
import msgspec
from aiohttp_sse_client import client as sse_client

from core.routes import ApiError, error_from

RETRYABLE_4XX = frozenset({408, 429})
_STATUS_IN_MESSAGE = re.compile(r" failed(?: with wrong response status)?: (\d{3})$")
_ERROR_BODY_LIMIT = 65536


class SseEvent(msgspec.Struct, frozen=True, kw_only=True):
    event: str = "message"
    data: str = ""
    id: str | None = None

    @property
    def seq(self) -> int | None:
        """The id as an integer cursor, or None when there is no integer id."""
        if self.id is None or not self.id.isascii() or not self.id.isdigit():
            return None
        return int(self.id)

    def json(self) -> Any:
        """The data, decoded as JSON (ValueError if it is not JSON)."""
        return json.loads(self.data)


class Permanent(ApiError):
    """The server refused the stream for good (a 4xx other than 408/429)."""


class Transient(Exception):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


class StreamEnded(Exception):
    """The server ended the stream cleanly (raised to stop the package's own reconnect)."""


def sse_session(connect_timeout: float = 10.0) -> aiohttp.ClientSession:
    """A session for streams: no connection cap (one stream per chat) and no total timeout.

    It also hands each stream request's response to `TracedResponse` (aiohttp tracing),
    so an error answer's body and `Retry-After`, which the package hides, stay readable.
    """
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout),
        trace_configs=[_answer_trace()],
    )


class TracedResponse:
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
    if isinstance(ctx.trace_request_ctx, TracedResponse):
        ctx.trace_request_ctx.response = params.response


class OneConnection(sse_client.EventSource):
    """aiohttp-sse-client's `EventSource`, used as the parser of ONE connection.

    `max_connect_retry=0` and `on_error` raising `StreamEnded` in CONNECTING (only the
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
        answer: TracedResponse,
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
            raise StreamEnded("the stream ended")

    def _dispatch_event(self) -> sse_client.MessageEvent | None:
        try:
            return super()._dispatch_event()
        finally:
            self._event_id = ""


async def refusal(exc: ConnectionError, response: aiohttp.ClientResponse | None) -> None:
    """Raise `Permanent` or `Transient` for a status the package refused; return for anything else.

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
    raise Transient(str(error), _retry_after(headers.get("Retry-After"))) from None


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
