"""Token routes: mint device tokens (admin) and run tokens (admin, or the device that won the
fire); list and revoke tokens and rotate the admin token (admin).

Owns the HTTP side of credentials. A device token is bound to one space and one
peer. A device mints a run token only for a fire it claimed (`key`), and the
token dies at the run's timeout plus `run_token_margin_seconds` at the latest
(and when its run is recorded, see `runs`). The fire path gets its token with the
claim instead (`fires`, `run`); this route stays for manual runs and other callers.
The answer is the only time a token is shown; listings show ids, never secrets.
Storage goes through the store seam (`app[STORE]`, `token_store` on SQLite), scope rules
are `auth`'s; this module must not check route scopes itself.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from core.wire import Answer, Body, Name, RunTokenIn, TokenOut
from space import fires, token_store, trigger_store
from space.appstate import ADMIN_TOKEN_PATH, SETTINGS
from space.auth import Principal, Role, end_streams, principal
from space.http import Refusal, add_route, answer, read_body
from space.servertime import iso
from space.spaces import SPACE_ID, require_space
from space.store import STORE


class DeviceTokenIn(Body, frozen=True, kw_only=True):
    peer: Name
    space: Name


class TokenInfo(Answer, frozen=True, kw_only=True):
    id: str
    role: str
    state: str  # live | revoked | expired
    peer: str | None
    space: str | None
    triggerId: str | None
    runId: str | None
    createdAt: str
    expiresAt: str | None
    lastUsedAt: str | None
    revokedAt: str | None


class TokenList(Answer, frozen=True, kw_only=True):
    tokens: list[TokenInfo]


async def post_device_token(request: web.Request) -> web.Response:
    body = await read_body(request, DeviceTokenIn)
    if not SPACE_ID.fullmatch(body.space):
        raise Refusal(
            400,
            "invalid_body",
            f"space id {body.space!r} must match [a-z0-9][a-z0-9_-]{{0,63}} - at `$.space`",
        )
    if not await request.app[STORE].space_exists(body.space):  # create the space first
        raise Refusal(404, "unknown_space", f"no space {body.space!r} - at `$.space`")
    who = Principal(role=Role.DEVICE, peer=body.peer, space=body.space)
    token = await request.app[STORE].mint_token(who)
    out = {"token": token, "id": token_store.token_id(token), "peer": body.peer}
    return answer({**out, "space": body.space}, status=201)


async def post_run_token(request: web.Request) -> web.Response:
    space = require_space(request)
    body = await read_body(request, RunTokenIn)
    ttl = min(body.ttlSeconds, await _allowed_ttl(request, space, body))
    minter = principal(request).peer  # a device's; None for the admin
    store = request.app[STORE]
    token, expires = await store.mint_run_token(space, body.triggerId, body.runId, ttl, minter)
    out = {"token": token, "id": token_store.token_id(token), "expiresAt": iso(expires)}
    return answer(out, status=201)


async def _allowed_ttl(request: web.Request, space: str, body: RunTokenIn) -> float:
    """The longest life this caller may give the token; for a device, only for a fire it
    claimed, and no longer than the record's timeout plus the margin."""
    settings, who = request.app[SETTINGS], principal(request)
    if who.role is Role.ADMIN:
        return settings.max_run_token_seconds
    if body.key is None:
        raise Refusal(
            400,
            "invalid_body",
            "a device mints a run token for a fire: `key` is required - at `$.key`",
        )
    store = request.app[STORE]
    claim = await store.fire_claim(space, body.triggerId, body.key)
    if claim is None or claim[0] != who.peer:
        detail = (
            f"{body.triggerId}@{body.key} was not claimed by {who.peer!r}; a device "
            "mints run tokens only for its own fires - at `$.key`"
        )
        raise Refusal(403, "not_claimed", detail)
    row = await store.record_row(space, body.triggerId)
    _, record = trigger_store.parsed(space, body.triggerId, row)
    return fires.run_timeout(record) + settings.run_token_margin_seconds


async def list_tokens(request: web.Request) -> web.Response:
    everything = request.query.get("all", "") in ("1", "true")
    found = await request.app[STORE].list_tokens(everything=everything)
    return answer({"tokens": [_wire(t) for t in found]})


def _wire(entry: dict[str, Any]) -> dict[str, Any]:
    """Instants as RFC 3339 (the store keeps unix seconds)."""

    def at(value: float | None) -> str | None:
        return None if value is None else iso(datetime.fromtimestamp(value, UTC))

    times = ("createdAt", "expiresAt", "lastUsedAt", "revokedAt")
    return {**entry, **{name: at(entry[name]) for name in times}}


async def delete_token(request: web.Request) -> web.Response:
    tid = request.match_info["id"]
    try:
        revoked = await request.app[STORE].revoke_token(tid)
    except token_store.LastAdminToken:
        raise Refusal(
            409,
            "last_admin_token",
            "this is the only admin token; rotate it instead (POST /v1/tokens/admin/rotate)",
        ) from None
    if revoked is None:
        raise Refusal(404, "unknown_token", f"no token with id {tid!r}")
    end_streams(request.app, lambda who: who.id == tid)
    return answer(_wire(revoked))


async def post_rotate_admin(request: web.Request) -> web.Response:
    path = request.app.get(ADMIN_TOKEN_PATH)
    token = await request.app[STORE].rotate_admin(path)
    new = token_store.token_id(token)
    end_streams(request.app, lambda who: who.role is Role.ADMIN and who.id != new)
    out = {"token": token, "id": new, "file": str(path or "")}
    return answer(out, status=201)


def setup(app: web.Application) -> None:
    doc = {"answer": TokenOut}
    add_route(
        app,
        "token_device",
        post_device_token,
        "Mint a device token bound to one space and one peer (shown once)",
        body=DeviceTokenIn,
        **doc,
    )
    add_route(
        app,
        "token_run",
        post_run_token,
        "Mint a run token for one trigger and run (a device: only for a fire it claimed; "
        "a claim can also answer one, `run` on POST …/fires)",
        body=RunTokenIn,
        **doc,
    )
    add_route(
        app,
        "tokens",
        list_tokens,
        "Tokens without their secrets; `?all=1` adds revoked and expired ones",
        answer=TokenList,
    )
    add_route(
        app,
        "token_revoke",
        delete_token,
        "Revoke a token by its id (the only admin token cannot be revoked: rotate it)",
        answer=TokenInfo,
    )
    add_route(
        app,
        "token_rotate_admin",
        post_rotate_admin,
        "A new admin token; every other admin token is revoked, the token file rewritten",
        **doc,
    )
