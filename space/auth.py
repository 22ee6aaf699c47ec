"""Who is calling, and what each role may do: the middleware and the scope rules.

Owns authenticating every `/v1` request (the bearer token, looked up through the store seam) and
the route scopes of each role: `Role.ADMIN` everything, `Role.DEVICE` its own space acting
as its peer, `Role.RUN` one run's narrow reach (see docs/architecture.md, "Module notes").
Handlers refine with `require_peer` and `limit_patch`; `end_streams` ends a revoked token's
streams. Must not know any table: tokens are the store's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from space import token_store
from space.history import NOTE_MAX, Author
from space.http import Handler, Refusal
from space.store import STORE
from space.streams import STREAMS, EventStream
from space.token_store import Principal, Role, mint_token, token_hash

__all__ = ["PRINCIPAL", "Principal", "Role", "mint_token", "principal", "token_hash"]

PRINCIPAL = web.RequestKey("principal", Principal)
SPACE_FOUND = web.RequestKey("space_found", bool)  # the route's `{space}` exists (`spaces`)

ADMIN_ONLY = {
    ("POST", "/v1/spaces"),
    ("POST", "/v1/tokens/device"),
    ("GET", "/v1/tokens"),
    ("DELETE", "/v1/tokens/{id}"),
    ("POST", "/v1/tokens/admin/rotate"),
}
ANY_TOKEN = {("GET", "/v1/openapi.json")}
DEVICE_LISTS = {("GET", "/v1/spaces")}  # a device sees its own space only (`spaces`)
RUN_PATCHABLE = ("owner", "enabled")
_RUN_RULES: tuple[tuple[frozenset[str], re.Pattern[str]], ...] = (
    (frozenset({"GET"}), re.compile(r"/triggers(/\{[^}]+\}(/why)?)?|/changes(/stream)?")),
    (frozenset({"PATCH"}), re.compile(r"/triggers/\{[^}]+\}")),
    (frozenset({"GET"}), re.compile(r"/chats(/.*)?")),
    (frozenset({"POST"}), re.compile(r"/chats/\{[^}]+\}/messages")),
    (frozenset({"GET"}), re.compile(r"/programs(/\{[^}]+\})?")),
    (frozenset({"GET", "PUT"}), re.compile(r"/state/\{triggerId\}/\{key\}")),
)
SPACE_PREFIX = "/v1/spaces/{space}"


def bearer(request: web.Request) -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Refusal(401, "unauthorized", "missing `Authorization: Bearer <token>` header")
    if not header.isascii() or not header.isprintable():  # no token we mint is anything else
        raise Refusal(401, "unauthorized", "the bearer token is not printable ASCII")
    return token.strip()


def run_may(method: str, canonical: str) -> bool:
    if not canonical.startswith(SPACE_PREFIX + "/"):
        return False
    rest = canonical[len(SPACE_PREFIX) :]
    return any(method in methods and rx.fullmatch(rest) for methods, rx in _RUN_RULES)


def roles_for(method: str, canonical: str) -> list[str]:
    """Which roles may use a route (for the OpenAPI document); `run` may be further limited."""
    if (method, canonical) in ANY_TOKEN:
        return [r.value for r in Role]
    if (method, canonical) in ADMIN_ONLY:
        return [Role.ADMIN.value]
    if run_may(method, canonical):
        return [r.value for r in Role]
    return [Role.ADMIN.value, Role.DEVICE.value]


def authorize(request: web.Request, who: Principal) -> None:
    """Raise 403 if `who` may not use the matched route."""
    route = request.match_info.route
    canonical = route.resource.canonical if route.resource is not None else ""
    key = (request.method, canonical)
    if who.role is Role.ADMIN or key in ANY_TOKEN:
        return
    if key in ADMIN_ONLY:
        raise Refusal(403, "forbidden", f"{request.method} {canonical} needs the admin token")
    if who.role is Role.RUN and not run_may(request.method, canonical):
        raise Refusal(403, "forbidden", f"a run token may not use {request.method} {canonical}")
    if who.role is Role.DEVICE and key in DEVICE_LISTS:
        return
    _own_space(request, who, canonical)
    tid = request.match_info.get("triggerId")
    if who.role is Role.RUN and "/state/" in canonical and tid != who.trigger_id:
        raise Refusal(403, "forbidden", f"this run token may use state of {who.trigger_id!r} only")


def _own_space(request: web.Request, who: Principal, canonical: str) -> None:
    space = request.match_info.get("space")
    if space is None or not canonical.startswith(SPACE_PREFIX):
        raise Refusal(403, "forbidden", f"a {who.role} token may not use {canonical}")
    if space != who.space:
        bound = f"space {who.space!r}" if who.space else "no space (mint a new one)"
        raise Refusal(403, "forbidden", f"this {who.role} token is bound to {bound}")


def principal(request: web.Request) -> Principal:
    return request[PRINCIPAL]


def require_peer(request: web.Request, peer: str, field: str = "peer") -> None:
    """A device token acts only as its own peer; admin acts as any; run tokens never."""
    who = principal(request)
    if who.role is Role.ADMIN:
        return
    if who.role is Role.DEVICE and who.peer == peer:
        return
    detail = f"this token is for peer {who.peer!r}, it may not act as {peer!r} - at `$.{field}`"
    raise Refusal(403, "forbidden", detail)


NOTE_HEADER = "Baton-Note"


def author(request: web.Request) -> Author:
    """Who writes a record (`admin`, `device:<peer>`, `run:<runId>`) and the note of the
    `Baton-Note` header (UTF-8, percent-encoded; at most `NOTE_MAX` characters)."""
    who = principal(request)
    if who.role is Role.RUN:
        actor = f"run:{who.run_id}"
    elif who.role is Role.DEVICE:
        actor = f"device:{who.peer}"
    else:
        actor = "admin"
    raw = request.headers.get(NOTE_HEADER, "")
    try:
        note = unquote(raw, errors="strict")
    except UnicodeDecodeError:
        note = "\n"  # not UTF-8: refused below
    if len(note) > NOTE_MAX or not note.isprintable():
        detail = f"{NOTE_HEADER} must be printable text of at most {NOTE_MAX} characters"
        raise Refusal(400, "invalid_header", detail)
    return Author(actor, note)


def limit_patch(request: web.Request, changes: dict[str, Any]) -> None:
    """A run token may change a record's `owner` and `enabled` only (repin, pause)."""
    if principal(request).role is not Role.RUN:
        return
    for name in changes:
        if name not in RUN_PATCHABLE:
            detail = (
                f"a run token may change only `owner` and `enabled`; `{name}` needs a "
                f"device or admin token - at `$.{name}`"
            )
            raise Refusal(403, "forbidden", detail)


def end_streams(app: web.Application, which: Callable[[Principal], bool]) -> int:
    """Close the open event streams of the tokens `which` picks (they were just revoked):
    a stream opened before the revocation must not go on. How many were closed."""
    registry = app.get(STREAMS)
    if registry is None:
        return 0

    def picked(stream: EventStream) -> bool:
        who = stream.request.get(PRINCIPAL)
        return who is not None and which(who)

    return registry.close_where(picked, "token_revoked")


async def identify(request: web.Request) -> Principal:
    """Whose bearer token this request carries (by the store's clock); 401 for none, an
    unknown, a revoked or an expired one. For a route with `{space}`, whether it exists
    too (`SPACE_FOUND`), in the same call of the store."""
    token, space = bearer(request), request.match_info.get("space")
    try:
        if space is None:
            return await request.app[STORE].lookup_token(token)
        who, request[SPACE_FOUND] = await request.app[STORE].identify(token, space)
    except token_store.TokenError as exc:
        raise Refusal(401, exc.code, exc.detail) from None
    return who


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not request.path.startswith("/v1/") or request.match_info.http_exception is not None:
        return await handler(request)
    who = await identify(request)
    authorize(request, who)
    request[PRINCIPAL] = who
    return await handler(request)
