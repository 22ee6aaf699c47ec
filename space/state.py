"""Program state: one JSON value per (trigger, key), e.g. a program's cursor.

Owns the `state` table. A run token reads and writes only its own trigger's
state (checked by the auth middleware). Must not know records.
"""

from __future__ import annotations

import json

import sqlite_utils
from aiohttp import web

from core.wire import StateIn, StateOut
from space.db import transaction
from space.dbthread import db_call
from space.http import Refusal, add_route, answer, now_of, read_body
from space.servertime import iso
from space.spaces import require_space

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
    row = await db_call(request.app, _row, space, tid, key)
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
    at = iso(now_of(request))
    await db_call(request.app, _put, [space, tid, key, json.dumps(body.value), at])
    return answer({"triggerId": tid, "key": key, "value": body.value, "updatedAt": at})


def _row(db: sqlite_utils.Database, space: str, tid: str, key: str) -> tuple[str, str] | None:
    row: tuple[str, str] | None = db.execute(
        "SELECT value, updated_at FROM state WHERE space = ? AND trigger_id = ? AND key = ?",
        [space, tid, key],
    ).fetchone()
    return row


def _put(db: sqlite_utils.Database, row: list[str]) -> None:
    with transaction(db):
        db.execute("INSERT OR REPLACE INTO state VALUES (?, ?, ?, ?, ?)", row)


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
