"""The runner that serves the space app: aiohttp's own protocol refusals in the house error body.

A request aiohttp cannot parse never reaches the app: `SpaceRunner` answers those refusals
with `{"error", "detail"}` (`bad_request`, `header_too_large`, …) and one INFO line, not
aiohttp's text and traceback (a 5xx keeps its own handling). It also closes connections
past the server's room (`space.pressure`: descriptors in reserve) and those whose headers
take over `HEADER_TIMEOUT_S` (slowloris). Used wherever the app is served; its stop waits at
most `SHUTDOWN_GRACE_S` for requests in flight. Must not hold route logic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from core.clock import Clock, SystemClock
from space import pressure
from space.errors import error_response

log = logging.getLogger("baton.space")

HEADER_TIMEOUT_S = 10.0  # a request's headers must be in within this of its first byte
SHUTDOWN_GRACE_S = 2.0  # what a stop waits for requests in flight before cancelling them
_CODES = {400: "bad_request", 413: "body_too_large", 431: "header_too_large"}


class _JsonRefusals(RequestHandler):
    """aiohttp's protocol, answering a request it refuses with the house error body; a
    connection past the server's room is closed at once, and one whose request's headers
    are not all in within `header_timeout` of its start (slowloris) is closed."""

    __slots__ = ("_headers_since",)
    _headers_since: float | None  # since when this connection owes a request's headers

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        server = self._manager
        self._headers_since = server.clock.monotonic() if isinstance(server, _Server) else None
        super().connection_made(transport)
        if isinstance(server, _Server) and len(server.connections) > server.room:
            log.warning(
                "refusing connections: %d open, room for %d", len(server.connections), server.room
            )
            self.force_close()

    def data_received(self, data: bytes) -> None:
        before, idle = self._request_count, self._waiter is not None
        super().data_received(data)
        server = self._manager
        if self._request_count > before:  # a request's headers are in
            self._headers_since = None
        elif idle and self._headers_since is None and isinstance(server, _Server):
            self._headers_since = server.clock.monotonic()  # the first bytes of a next request

    def late(self, now: float, timeout: float) -> bool:
        """Close the connection if its request's headers are overdue; whether it did."""
        if self._headers_since is None or now - self._headers_since < timeout:
            return False
        self._headers_since = None
        self.force_close()  # closes its transport
        return True

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500 or request.writer.output_size > 0:
            return super().handle_error(request, status, exc, message)
        detail = _detail(exc, message, status)
        log.info("refused %d from %s: %s", status, request.remote, detail)
        response = error_response(status, _CODES.get(status, "bad_request"), detail)
        response.force_close()
        return response


def _detail(exc: BaseException | None, message: str | None, status: int) -> str:
    text = message or (str(exc) if exc is not None else "") or f"HTTP {status}"
    first = text.strip().splitlines()[0] if text.strip() else f"HTTP {status}"
    return first[:300]


class _Server(web.Server):
    room: int = 1 << 20  # connections open at once (`pressure.connection_room`)
    header_timeout: float = HEADER_TIMEOUT_S
    clock: Clock = SystemClock()

    async def sweep(self) -> None:
        """Close the connections whose headers are overdue, looking a few times a timeout."""
        while True:
            await self.clock.sleep(min(1.0, self.header_timeout / 4))
            now, late = self.clock.monotonic(), 0
            for handler in list(self.connections):
                if isinstance(handler, _JsonRefusals):
                    late += handler.late(now, self.header_timeout)
            if late:
                log.info("closed %d connections whose request headers took too long", late)

    def __call__(self) -> RequestHandler:
        return _JsonRefusals(self, loop=self._loop, **self._kwargs)


class SpaceRunner(web.AppRunner):
    """`web.AppRunner` for the space app; protocol refusals answer `{"error", "detail"}`.

    Its cleanup gives requests in flight `SHUTDOWN_GRACE_S` (aiohttp's default is 60 s),
    then cancels them: a client that holds a half-sent body cannot hold up a SIGTERM."""

    def __init__(
        self, app: web.Application, *, header_timeout: float = HEADER_TIMEOUT_S, **kwargs: Any
    ) -> None:
        kwargs.setdefault("shutdown_timeout", SHUTDOWN_GRACE_S)
        super().__init__(app, **kwargs)
        self._header_timeout = header_timeout
        self._sweeper: asyncio.Task[None] | None = None

    async def _make_server(self) -> web.Server:
        pressure.raise_file_limit()
        pressure.quiet_repeats()
        server = await super()._make_server()
        server.__class__ = _Server  # the same object, built by aiohttp; only `__call__` differs
        assert isinstance(server, _Server)
        server.room, server.header_timeout = pressure.connection_room(), self._header_timeout
        self._sweeper = asyncio.create_task(server.sweep(), name="slow headers")
        return server

    async def shutdown(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        await super().shutdown()


def runner(app: web.Application, **kwargs: Any) -> SpaceRunner:
    return SpaceRunner(app, **kwargs)
