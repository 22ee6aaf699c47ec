"""Request/answer plumbing of the space API: refusals as exceptions, bodies decoded by msgspec.

Owns `ApiError` (a refusal that becomes the house error body), `read_body`
(size-limited JSON decoded into a msgspec type, the path of a bad field in
`detail`), route registration with its documentation, and the middleware that
turns every refusal — ours and aiohttp's (404, 405, 413) — into
`{"error", "detail"}`. Must not know any table.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from runtime.space.appstate import CLOCK, ROUTE_DOCS, SETTINGS, RouteDoc
from runtime.space.errors import error_response

T = TypeVar("T")
log = logging.getLogger("baton.space")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_encoder = msgspec.json.Encoder()


class ApiError(Exception):
    """A refusal: HTTP `status` with the error body; `extra` adds fields (e.g. the `rev`)."""

    def __init__(self, status: int, code: str, detail: str, **extra: object) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status, self.code, self.detail, self.extra = status, code, detail, extra

    def response(self) -> web.Response:
        return error_response(self.status, self.code, self.detail, **self.extra)


def now_of(request: web.Request) -> datetime:
    """The server's clock: the only time the space API goes by."""
    return request.app[CLOCK]()


def answer(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=_encoder.encode(data),
        status=status,
        content_type="application/json",
        headers=headers,
    )


async def raw_body(request: web.Request) -> bytes:
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        limit = request.app[SETTINGS].max_body_bytes
        raise ApiError(413, "body_too_large", f"request body over {limit} bytes") from None


def decode(data: bytes, typ: type[T], *, code: str = "invalid_body") -> T:
    if not data.strip():
        raise ApiError(400, code, "request body is empty, expected JSON")
    try:
        return msgspec.json.decode(data, type=typ)
    except msgspec.ValidationError as exc:
        raise ApiError(400, code, str(exc)) from None
    except msgspec.DecodeError as exc:
        raise ApiError(400, code, f"not JSON: {exc}") from None


async def read_body(request: web.Request, typ: type[T], *, code: str = "invalid_body") -> T:
    return decode(await raw_body(request), typ, code=code)


def add_route(
    app: web.Application, method: str, path: str, handler: Handler, summary: str, **doc: Any
) -> None:
    app.router.add_route(method, path, handler)
    app[ROUTE_DOCS].append(RouteDoc(method=method, path=path, summary=summary, **doc))


_AIOHTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}


@web.middleware
async def refusals(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return exc.response()
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        code = _AIOHTTP_CODES.get(exc.status, "http_error")
        return error_response(exc.status, code, exc.reason)
    except Exception as exc:  # a bug: still the house error body, and logged
        log.exception("%s %s failed", request.method, request.path)
        return error_response(500, "internal", f"{type(exc).__name__}: the server failed")
