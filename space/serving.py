"""The runner that serves the space app: aiohttp's own protocol refusals in the house error body.

A request aiohttp cannot parse (a malformed request line, a method with bad
characters, a header line over the limit, a bad chunk) never reaches the app or
its middlewares: aiohttp's protocol answers it itself, in `text/plain`, and logs
an ERROR traceback. `SpaceRunner` serves the app through a protocol that answers
those refusals with `{"error", "detail"}` (`bad_request`, `header_too_large`, …)
and logs one INFO line, since a client's garbage is not a server fault; a 5xx
keeps aiohttp's own handling and its traceback. Use it wherever the app is served
(`baton space serve`, `baton up`, tests); its stop waits at most
`SHUTDOWN_GRACE_S` for requests in flight. Must not hold route logic.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from space.errors import error_response

log = logging.getLogger("baton.space")

SHUTDOWN_GRACE_S = 2.0  # what a stop waits for requests in flight before cancelling them
_CODES = {400: "bad_request", 413: "body_too_large", 431: "header_too_large"}


class _JsonRefusals(RequestHandler):
    """aiohttp's protocol, answering a request it refuses with the house error body."""

    __slots__ = ()

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
    def __call__(self) -> RequestHandler:
        return _JsonRefusals(self, loop=self._loop, **self._kwargs)


class SpaceRunner(web.AppRunner):
    """`web.AppRunner` for the space app; protocol refusals answer `{"error", "detail"}`.

    Its cleanup gives requests in flight `SHUTDOWN_GRACE_S` (aiohttp's default is 60 s),
    then cancels them: a client that holds a half-sent body cannot hold up a SIGTERM."""

    def __init__(self, app: web.Application, **kwargs: Any) -> None:
        kwargs.setdefault("shutdown_timeout", SHUTDOWN_GRACE_S)
        super().__init__(app, **kwargs)

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _Server  # the same object, built by aiohttp; only `__call__` differs
        return server


def runner(app: web.Application, **kwargs: Any) -> SpaceRunner:
    return SpaceRunner(app, **kwargs)
