"""Program state: one JSON value per (trigger, key), e.g. a program's cursor.

Owns the `state` table on SQLite and the state routes, which go through the store seam: a
PUT replaces the value whole (the last write wins), stamped by the store's clock. A run
token reads and writes only its own trigger's state (checked by the auth middleware).
Must not know records.
"""

from __future__ import annotations

import json

import sqlite_utils
from aiohttp import web

from core.wire import StateIn, StateOut
from space.db import transaction
from space.http import Refusal, add_route, answer, read_body
from space.spaces import require_space
from space.store import STORE

MAX_KEY = 200

SCHEMA = """
CREATE TABLE IF NOT EXISTS state (space TEXT NOT NULL, trigger_id TEXT NOT NULL,
  key TEXT NOT NULL, value TEXT NOT NULL, updated_at TEXT NOT NULL,
  PRIMARY KEY (space, trigger_id, key));
"""


def ensure_schema(db: sqlite_utils.Database) -> None:
    db.executescript(SCHEMA)


def _names(request: web.Request) -> tuple[str, str]:
    tid, key = request.match_info["triggerId"], request.match_info["key"]
    if len(key) > MAX_KEY or len(tid) > MAX_KEY:
        raise Refusal(400, "invalid_key", f"trigger id and key are at most {MAX_KEY} characters")
    return tid, key


async def get_state(request: web.Request) -> web.Response:
    space = require_space(request)
    tid, key = _names(request)
    row = await request.app[STORE].state(space, tid, key)
    if row is None:
        raise Refusal(404, "unknown_state", f"no state {key!r} for trigger {tid!r}")
    try:
        value = json.loads(row[0])
    except (TypeError, ValueError) as exc:  # a row written past the API: shown, never rewritten
        detail = f"the stored value of {key!r} is not JSON ({exc}); PUT a new one"
        raise Refusal(422, "odd_row", detail) from None
    return answer({"triggerId": tid, "key": key, "value": value, "updatedAt": str(row[1])})


async def put_state(request: web.Request) -> web.Response:
    space = require_space(request)
    tid, key = _names(request)
    body = await read_body(request, StateIn)
    at = await request.app[STORE].put_state(space, tid, key, json.dumps(body.value))
    return answer({"triggerId": tid, "key": key, "value": body.value, "updatedAt": at})


def row(db: sqlite_utils.Database, space: str, tid: str, key: str) -> tuple[str, str] | None:
    found: tuple[str, str] | None = db.execute(
        "SELECT value, updated_at FROM state WHERE space = ? AND trigger_id = ? AND key = ?",
        [space, tid, key],
    ).fetchone()
    return found


def put(db: sqlite_utils.Database, space: str, tid: str, key: str, value: str, at: str) -> None:
    with transaction(db):
        db.execute(
            "INSERT OR REPLACE INTO state VALUES (?, ?, ?, ?, ?)", [space, tid, key, value, at]
        )


def setup(app: web.Application) -> None:
    add_route(app, "state_get", get_state, "A trigger's state value", answer=StateOut)
    add_route(
        app,
        "state_put",
        put_state,
        "Set a trigger's state value",
        body=StateIn,
        answer=StateOut,
    )
