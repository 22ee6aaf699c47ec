"""Spaces: create (with the general chat) and list; `require_space` for every space route.

Owns the `spaces` table (SQLite's SQL; through the store seam); a device token lists its
own space alone. A space's
general chat is created through `space.chat_store.create_chat`; this module must not
know chat tables, nor import `space.chats` (which imports this module).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import sqlite_utils
from aiohttp import web

from core.wire import Body, Space, SpaceList
from space import auth, chat_store
from space.db import transaction
from space.http import Refusal, add_route, answer, read_body
from space.servertime import epoch, iso
from space.store import STORE

SPACE_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
GENERAL_CHAT_NAME = "general"

SCHEMA = """
CREATE TABLE IF NOT EXISTS spaces (
  id TEXT PRIMARY KEY, name TEXT NOT NULL, general_chat TEXT, created_at TEXT NOT NULL
);
"""


class SpaceIn(Body, frozen=True, kw_only=True):
    id: str
    name: str = ""


def ensure_schema(db: sqlite_utils.Database) -> None:
    db.executescript(SCHEMA)


def _space(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "name": row["name"],
        "generalChat": row["general_chat"],
        "createdAt": row["created_at"],
    }


def space_exists(db: sqlite_utils.Database, space: str) -> bool:
    return bool(list(db.query("SELECT 1 FROM spaces WHERE id = ?", [space])))


def require_space(request: web.Request) -> str:
    """The `{space}` of the route; 404 `unknown_space` if there is no such space (looked up
    with the token, `auth.identify`, in one unit of work)."""
    space = request.match_info["space"]
    if not request[auth.SPACE_FOUND]:
        raise Refusal(404, "unknown_space", f"no space {space!r}")
    return space


def create_space(db: sqlite_utils.Database, body: SpaceIn, now: datetime) -> dict[str, Any]:
    """The space and its general chat (`Refusal` 409 if it exists); its row."""
    check_id(body.id)
    with transaction(db):  # the space and its general chat, all or nothing
        if space_exists(db, body.id):
            raise Refusal(409, "space_exists", f"space {body.id!r} already exists")
        chat = chat_store.create_chat(db, body.id, GENERAL_CHAT_NAME, now=epoch(now)).objectId
        db.execute(
            "INSERT INTO spaces VALUES (?, ?, ?, ?)",
            [body.id, body.name or body.id, chat, iso(now)],
        )
    return next(db.query("SELECT * FROM spaces WHERE id = ?", [body.id]))


async def post_space(request: web.Request) -> web.Response:
    body = await read_body(request, SpaceIn)
    check_id(body.id)
    return answer(_space(await request.app[STORE].create_space(body.id, body.name)), status=201)


def check_id(space: str) -> None:
    if not SPACE_ID.fullmatch(space):
        raise Refusal(
            400,
            "invalid_body",
            f"space id {space!r} must match [a-z0-9][a-z0-9_-]{{0,63}} - at `$.id`",
        )


def rows(db: sqlite_utils.Database, space: str | None = None) -> list[dict[str, Any]]:
    if space is None:
        return list(db.query("SELECT * FROM spaces ORDER BY id"))
    return list(db.query("SELECT * FROM spaces WHERE id = ?", [space]))


async def list_spaces(request: web.Request) -> web.Response:
    """Every space for the admin; a device's own space alone for a device token."""
    found = await request.app[STORE].space_rows()
    who = auth.principal(request)
    every = who.role is auth.Role.ADMIN
    return answer({"spaces": [_space(r) for r in found if every or r["id"] == who.space]})


async def get_space(request: web.Request) -> web.Response:
    space = require_space(request)
    return answer(_space((await request.app[STORE].space_rows(space))[0]))


def setup(app: web.Application) -> None:
    add_route(
        app,
        "space_create",
        post_space,
        "Create a space with its general chat",
        body=SpaceIn,
        answer=Space,
    )
    add_route(app, "spaces", list_spaces, "List spaces", answer=SpaceList)
    add_route(app, "space_get", get_space, "One space", answer=Space)
