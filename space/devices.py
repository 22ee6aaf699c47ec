"""Devices of a space: heartbeats, who is live and since when, by the store's clock.

Owns the `devices` table on SQLite; the routes go through the store seam, and `beaten` is
the rule both stores write by. A heartbeat stores `lastSeen`. `upSince` is the start of the
device's current unbroken run of heartbeats: it restarts when the device was not live
before, and when the heartbeat names a new `instance` (a restarted process, a machine back
from sleep), so it never reaches back into time the device was down (SPEC "Failover loses
nothing, downtime replays nothing"). `live`: seen within the window and not signed off
(`stopped: true`, a clean stop, ends it at once). A device's own status is shown while it is
live; once not, its subscriptions no longer show `live`. Must not touch the lease.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import sqlite_utils
from aiohttp import web

from core.peerwire import DeviceList, DeviceOut, HeartbeatIn
from space import history, oddrows
from space.appstate import SETTINGS
from space.auth import require_peer
from space.db import add_columns, transaction
from space.http import Refusal, add_route, answer, decode, raw_body
from space.servertime import iso
from space.spaces import require_space
from space.store import STORE

PEER_MAX = 200  # characters of a peer name

SCHEMA = """
CREATE TABLE IF NOT EXISTS devices (space TEXT NOT NULL, peer TEXT NOT NULL, name TEXT NOT NULL,
  priority INTEGER NOT NULL, last_seen REAL NOT NULL, live_since REAL NOT NULL,
  status TEXT NOT NULL DEFAULT '{}', PRIMARY KEY (space, peer));
"""
ADDED_COLUMNS = {"instance": "TEXT NOT NULL DEFAULT ''", "stopped": "INTEGER NOT NULL DEFAULT 0"}


def ensure_schema(db: sqlite_utils.Database) -> None:
    db.executescript(SCHEMA)
    add_columns(db, "devices", ADDED_COLUMNS)


def view(row: dict[str, Any], now: datetime, window: timedelta) -> dict[str, Any]:
    seen = datetime.fromtimestamp(row["last_seen"], UTC)
    live = now - seen <= window and not row["stopped"]
    status = msgspec.json.decode(row.get("status") or "{}")
    if not isinstance(status, dict) or not isinstance(row["priority"], int):
        raise TypeError("status is not a JSON object, or priority not an integer")
    return {
        "peer": row["peer"],
        "name": row["name"],
        "priority": row["priority"],
        "lastSeen": iso(seen),
        "upSince": iso(datetime.fromtimestamp(row["live_since"], UTC)),
        "live": live,
        "stopped": bool(row["stopped"]),
        "status": status if live else _gone(status),
    }


def _gone(status: Any) -> Any:
    """A device that is not live follows no chat: its subscriptions show `stopped`."""
    subs = status.get("subscriptions") if isinstance(status, dict) else None
    if not isinstance(subs, list):
        return status
    stopped = [{**s, "state": "stopped"} if isinstance(s, dict) else s for s in subs]
    return {**status, "subscriptions": stopped}


def heartbeat(
    db: sqlite_utils.Database, space: str, peer: str, body: HeartbeatIn, now: float, window: float
) -> None:
    with transaction(db):
        new = beaten(row(db, space, peer), peer, body, now, window)
        db.execute(
            "INSERT OR REPLACE INTO devices "
            "(space, peer, name, priority, last_seen, live_since, status, instance, stopped) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [space, peer, *new[:-1], int(new[-1])],
        )
        history.beat(
            db,
            space,
            peer,
            new[3],
            now,
            stopped=body.stopped,
            slept=body.sleptSeconds,
            applied=body.appliedSeq,
            offset_ms=body.offsetMs,
        )


def beaten(
    old: dict[str, Any] | None, peer: str, body: HeartbeatIn, now: float, window: float
) -> tuple[str, int, float, float, str, str, bool]:
    """The device's row after a heartbeat at `now` (either store): `(name, priority,
    last_seen, live_since, status, instance, stopped)`; what the beat leaves out is kept."""
    was_live = old is not None and now - old["last_seen"] <= window and not old["stopped"]
    instance = body.instance if body.instance is not None else (old or {}).get("instance", "")
    same_run = was_live and old is not None and old["instance"] == instance
    up_since = old["live_since"] if same_run and old is not None else now
    name = body.name if body.name is not None else (old["name"] if old else peer)
    priority = body.priority if body.priority is not None else (old["priority"] if old else 0)
    status = (
        msgspec.json.encode(body.status).decode()
        if body.status is not None
        else (old["status"] if old else "{}")
    )
    return name, priority, now, up_since, status, instance, body.stopped


def row(db: sqlite_utils.Database, space: str, peer: str) -> dict[str, Any] | None:
    rows = list(db.query("SELECT * FROM devices WHERE space = ? AND peer = ?", [space, peer]))
    return rows[0] if rows else None


def rows(db: sqlite_utils.Database, space: str) -> list[dict[str, Any]]:
    return list(db.query("SELECT * FROM devices WHERE space = ? ORDER BY peer", [space]))


def last_seen(
    db: sqlite_utils.Database, space: str, peer: str, now: datetime, window: float
) -> tuple[bool, str | None]:
    """Whether `peer` is live now (seen within `window` seconds, not stopped), and when it
    was last seen (None: never)."""
    row = db.execute(
        "SELECT last_seen, stopped FROM devices WHERE space = ? AND peer = ?", [space, peer]
    ).fetchone()
    if row is None or not isinstance(row[0], int | float):
        return False, None
    seen = datetime.fromtimestamp(row[0], UTC)
    return now - seen <= timedelta(seconds=window) and not row[1], iso(seen)


async def put_device(request: web.Request) -> web.Response:
    space = require_space(request)
    peer = request.match_info["peer"]
    if not 1 <= len(peer) <= PEER_MAX:
        raise Refusal(400, "invalid_peer", f"peer must be 1 to {PEER_MAX} characters")
    require_peer(request, peer)
    data = await raw_body(request)
    body = decode(data, HeartbeatIn) if data.strip() else HeartbeatIn()  # empty: a bare beat
    window = request.app[SETTINGS].live_seconds
    stored, now = await request.app[STORE].heartbeat(space, peer, body, window)
    return answer(view(stored, now, timedelta(seconds=window)))


async def list_devices(request: web.Request) -> web.Response:
    space = require_space(request)
    window = timedelta(seconds=request.app[SETTINGS].live_seconds)
    stored, now = await request.app[STORE].devices(space)
    found, odd = oddrows.each(
        stored, lambda r: view(r, now, window), lambda r: r["peer"], "devices"
    )
    return answer({"devices": found, **({"odd": odd} if odd else {})})


def setup(app: web.Application) -> None:
    add_route(
        app,
        "device_put",
        put_device,
        "Heartbeat (`name`, `priority`, `status`, `instance`, `stopped` optional)",
        body=HeartbeatIn,
        answer=DeviceOut,
    )
    add_route(
        app,
        "devices",
        list_devices,
        "Devices with `lastSeen`, `upSince` and `live`",
        answer=DeviceList,
    )
