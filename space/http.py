"""Request/answer plumbing of the space API: refusals as exceptions, bodies decoded by msgspec.

Owns `Refusal` (a refusal that becomes the house error body), `read_body`
(size-limited JSON decoded into a msgspec type, the path of a bad field in
`detail`), the bounds every request is held to whatever its bytes (JSON nested
at most `MAX_DEPTH` deep, integers within 64 bits in bodies, query strings and
headers: `int64`, `check_tree`), integer query parameters (`int_query`), route
registration by its name in `core.routes` with its documentation, and the
middleware that turns every refusal — ours and aiohttp's (404, 405, 413) —
into `{"error", "detail"}`.
Must not know any table.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from core import bounds
from core.routes import PREFIX, ROUTES
from space.appstate import CLOCK, ROUTE_DOCS, SETTINGS, RouteDoc
from space.errors import error_response

T = TypeVar("T")
log = logging.getLogger("baton.space")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_encoder = msgspec.json.Encoder()

INT64_MAX, MAX_DEPTH = bounds.INT64_MAX, bounds.MAX_DEPTH
_INT64_DIGITS = len(str(INT64_MAX))


class Refusal(Exception):
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


def int64(text: str) -> int | None:
    """`text` as a non-negative decimal integer within 64 bits; None if it is anything else.

    Only ASCII digits: `int()` would take `²`, `٣`, `_`, spaces and signs, and a
    few thousand digits would cost it a ValueError of its own."""
    if not (text.isascii() and text.isdigit()) or len(text.lstrip("0")) > _INT64_DIGITS:
        return None
    value = int(text)
    return value if value <= INT64_MAX else None


def int_query(
    request: web.Request,
    name: str,
    default: int,
    *,
    low: int = 0,
    high: int | None = None,
    clamp: bool = True,
) -> int:
    """Query `name` as a decimal integer; `default` when absent.

    Anything but ASCII digits, or a value beyond 64 bits, is a 400 `invalid_query`.
    A value outside `[low, high]` is brought inside when `clamp`, else refused the
    same way.
    """
    raw = request.query.get(name)
    if raw is None:
        return default
    value = int64(raw)
    if value is not None and (clamp or (low <= value and (high is None or value <= high))):
        return max(low, value if high is None else min(value, high))
    bound = f"between {low} and {high}" if high is not None else f"at least {low}"
    detail = f"query `{name}` must be an integer {bound}, got {raw!r}"
    raise Refusal(400, "invalid_query", detail)


async def raw_body(request: web.Request) -> bytes:
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        limit = request.app[SETTINGS].max_body_bytes
        raise Refusal(413, "body_too_large", f"request body over {limit} bytes") from None


def check_tree(obj: Any, code: str = "invalid_body") -> None:
    """Refuse JSON nested deeper than `MAX_DEPTH` or holding an integer beyond 64 bits
    (`core.bounds`); the detail names the path."""
    problem = bounds.beyond(obj)
    if problem is not None:
        raise Refusal(400, code, problem)


def parse_json(data: bytes, code: str = "invalid_body") -> Any:
    """`data` as JSON within the bounds of `check_tree`; 400 `code` otherwise."""
    if not data.strip():
        raise Refusal(400, code, "request body is empty, expected JSON")
    try:
        tree = msgspec.json.decode(data)
    except RecursionError:
        raise Refusal(400, code, f"JSON nested deeper than {MAX_DEPTH} levels") from None
    except msgspec.DecodeError as exc:
        raise Refusal(400, code, f"not JSON: {exc}") from None
    check_tree(tree, code)
    return tree


Free = Callable[[Any], Iterable[tuple[str, int, Any]]]
"""The free-form parts of a decoded body (typed `Any`), with their paths and depths in it:
`("$[0].result", 2, …)`."""


def decode(data: bytes, typ: type[T], *, code: str = "invalid_body", free: Free | None = None) -> T:
    """`data` as `typ`: bounded first (`parse_json`), then msgspec's typed decode and its path.

    With `free`, the typed decode comes first and only the parts `free` names are walked
    for the bounds (the rest is bounded by its type); a body that fails the typed decode
    is then bounded whole, so a bound's refusal still comes before the type's."""
    if free is None:
        parse_json(data, code)
    try:
        body = msgspec.json.decode(data, type=typ)
    except (msgspec.DecodeError, RecursionError) as exc:
        if free is not None:
            parse_json(data, code)
        if isinstance(exc, msgspec.ValidationError):
            raise Refusal(400, code, str(exc)) from None
        raise Refusal(400, code, f"not JSON: {exc}") from None
    for path, depth, part in free(body) if free is not None else ():
        problem = bounds.beyond(part, path, depth)
        if problem is not None:
            raise Refusal(400, code, problem)
    return body


async def read_body(request: web.Request, typ: type[T], *, code: str = "invalid_body") -> T:
    return decode(await raw_body(request), typ, code=code)


def add_route(app: web.Application, name: str, handler: Handler, summary: str, **doc: Any) -> None:
    """Serve route `name` of the one route table (`core.routes`) with `handler`, documented."""
    route = ROUTES[name]
    method, path = route.method, PREFIX + route.path
    app.router.add_route(method, path, handler)
    app[ROUTE_DOCS].append(RouteDoc(method=method, path=path, summary=summary, **doc))


_AIOHTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}


@web.middleware
async def refusals(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except Refusal as exc:
        return exc.response()
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        code = _AIOHTTP_CODES.get(exc.status, "http_error")
        return error_response(exc.status, code, exc.reason)
    except ConnectionResetError:  # the client went away mid-request: nobody reads an answer
        log.info(
            "%s %s: the client went away before its request was read", request.method, request.path
        )
        return error_response(400, "connection_lost", "the connection closed mid-request")
    except Exception as exc:  # a bug: still the house error body, and logged
        log.exception("%s %s failed", request.method, request.path)
        return error_response(500, "internal", f"{type(exc).__name__}: the server failed")
