"""Token minting over HTTP: device tokens (admin) and run tokens (admin or device).

Owns the token routes. A run token is scoped to one space and one trigger and
expires; the answer is the only time a token is shown. Storage and scope rules
live in `auth`; this module must not check scopes itself.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import msgspec
from aiohttp import web

from space.appstate import SETTINGS
from space.auth import Principal, Role, mint_token
from space.clock import iso
from space.db import DB, transaction
from space.http import add_route, answer, now_of, read_body
from space.spaces import require_space

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class DeviceTokenIn(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    peer: Name


class RunTokenIn(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    triggerId: Name
    runId: Name
    ttlSeconds: Annotated[float, msgspec.Meta(gt=0)] = 3600.0


class TokenOut(msgspec.Struct, frozen=True, kw_only=True):
    token: str
    expiresAt: str | None = None


async def post_device_token(request: web.Request) -> web.Response:
    body = await read_body(request, DeviceTokenIn)
    now = now_of(request).timestamp()
    token = mint_token(request.app[DB], Principal(role=Role.DEVICE, peer=body.peer), now)
    return answer({"token": token, "peer": body.peer}, status=201)


async def post_run_token(request: web.Request) -> web.Response:
    space = require_space(request)
    body = await read_body(request, RunTokenIn)
    now = now_of(request)
    ttl = min(body.ttlSeconds, request.app[SETTINGS].max_run_token_seconds)
    expires = now + timedelta(seconds=ttl)
    who = Principal(role=Role.RUN, space=space, trigger_id=body.triggerId, run_id=body.runId)
    db = request.app[DB]
    with transaction(db):
        db.execute(
            "DELETE FROM tokens WHERE expires_at IS NOT NULL AND expires_at <= ?", [now.timestamp()]
        )
        token = mint_token(db, who, now.timestamp(), expires.timestamp())
    return answer({"token": token, "expiresAt": iso(expires)}, status=201)


def setup(app: web.Application) -> None:
    add_route(
        app,
        "POST",
        "/v1/tokens/device",
        post_device_token,
        "Mint a device token (shown once)",
        body=DeviceTokenIn,
        answer=TokenOut,
    )
    add_route(
        app,
        "POST",
        "/v1/spaces/{space}/tokens/run",
        post_run_token,
        "Mint a run token scoped to this space and one trigger",
        body=RunTokenIn,
        answer=TokenOut,
    )
