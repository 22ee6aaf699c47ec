"""Devices of a space: heartbeats and who is live, by the server's clock.

Owns the `devices` table. A heartbeat stores `lastSeen` (server time) and, when
the device was not live before, starts a new `liveSince`. `live` means seen
within the configured window. Must not touch the lease.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import msgspec
import sqlite_utils
from aiohttp import web

from space.appstate import SETTINGS
from space.auth import require_peer
from space.clock import iso
from space.db import DB, transaction
from space.http import ApiError, add_route, answer, decode, now_of, raw_body
from space.spaces import require_space

PEER_MAX = 200  # characters of a peer name

SCHEMA = """
CREATE TABLE IF NOT EXISTS devices (space TEXT NOT NULL, peer TEXT NOT NULL, name TEXT NOT NULL,
  priority INTEGER NOT NULL, last_seen REAL NOT NULL, live_since REAL NOT NULL,
  status TEXT NOT NULL DEFAULT '{}', PRIMARY KEY (space, peer));
"""


class HeartbeatIn(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: Annotated[str, msgspec.Meta(max_length=200)] | None = None
    priority: int | None = None
    status: dict[str, Any] | None = None  # what the device reports of itself, for `baton status`


class DeviceOut(msgspec.Struct, frozen=True, kw_only=True):
    peer: str
    name: str
    priority: int
    lastSeen: str
    liveSince: str
    live: bool
    status: dict[str, Any] = {}


class DeviceList(msgspec.Struct, frozen=True, kw_only=True):
    devices: list[DeviceOut]


def ensure_schema(db: sqlite_utils.Database) -> None:
    db.executescript(SCHEMA)


def _out(row: dict[str, Any], now: datetime, window: timedelta) -> dict[str, Any]:
    seen = datetime.fromtimestamp(row["last_seen"], UTC)
    return {
        "peer": row["peer"],
        "name": row["name"],
        "priority": row["priority"],
        "lastSeen": iso(seen),
        "liveSince": iso(datetime.fromtimestamp(row["live_since"], UTC)),
        "live": now - seen <= window,
        "status": msgspec.json.decode(row.get("status") or "{}"),
    }


def heartbeat(
    db: sqlite_utils.Database, space: str, peer: str, body: HeartbeatIn, now: float, window: float
) -> None:
    with transaction(db):
        rows = list(db.query("SELECT * FROM devices WHERE space = ? AND peer = ?", [space, peer]))
        old = (
            rows[0]
            if rows
            else {"name": peer, "priority": 0, "last_seen": 0.0, "live_since": now, "status": "{}"}
        )
        live_since = old["live_since"] if now - old["last_seen"] <= window else now
        name = body.name if body.name is not None else old["name"]
        priority = body.priority if body.priority is not None else old["priority"]
        status = (
            msgspec.json.encode(body.status).decode() if body.status is not None else old["status"]
        )
        db.execute(
            "INSERT OR REPLACE INTO devices VALUES (?, ?, ?, ?, ?, ?, ?)",
            [space, peer, name, priority, now, live_since, status],
        )


async def put_device(request: web.Request) -> web.Response:
    space = require_space(request)
    peer = request.match_info["peer"]
    if not 1 <= len(peer) <= PEER_MAX:
        raise ApiError(400, "invalid_peer", f"peer must be 1 to {PEER_MAX} characters")
    require_peer(request, peer)
    data = await raw_body(request)
    body = decode(data, HeartbeatIn) if data.strip() else HeartbeatIn()  # empty: a bare beat
    now, window = now_of(request), request.app[SETTINGS].live_seconds
    heartbeat(request.app[DB], space, peer, body, now.timestamp(), window)
    row = next(
        request.app[DB].query("SELECT * FROM devices WHERE space = ? AND peer = ?", [space, peer])
    )
    return answer(_out(row, now, timedelta(seconds=window)))


async def list_devices(request: web.Request) -> web.Response:
    space = require_space(request)
    now, window = now_of(request), timedelta(seconds=request.app[SETTINGS].live_seconds)
    rows = request.app[DB].query("SELECT * FROM devices WHERE space = ? ORDER BY peer", [space])
    return answer({"devices": [_out(r, now, window) for r in rows]})


def setup(app: web.Application) -> None:
    ensure_schema(app[DB])
    base = "/v1/spaces/{space}/devices"
    add_route(
        app,
        "PUT",
        base + "/{peer}",
        put_device,
        "Heartbeat (`name`, `priority`, `status` optional)",
        body=HeartbeatIn,
        answer=DeviceOut,
    )
    add_route(
        app, "GET", base, list_devices, "Devices with `lastSeen` and `live`", answer=DeviceList
    )
