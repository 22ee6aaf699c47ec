"""Agent turns of a space: the `agent_turns` log chat-watch leaves, one entry per turn.

Owns the `agent_turns` table. A turn is posted once by the device whose chat-watch
took it (re-posting the same entry is a no-op, another one under the same `turnId`
is 409); turns are not run records and have no rollup here (the chat-watch record's
`rollup` stamp counts conversation starts). They are pruned like runs, by age and by
count per chat, failed turns (any outcome but `ok`) kept longer, with the runs'
`RunRetention`. A device posts turns only as its own peer. Must not touch
records, runs or chats.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import msgspec
import sqlite_utils
from aiohttp import web

from core.vocab import TurnOutcome
from core.wire import TurnIn, TurnList, wire_builtins
from space import duties, logtable
from space.appstate import SETTINGS, RunRetention
from space.db import transaction
from space.http import Refusal, add_route, answer, decode, int_query, raw_body
from space.spaces import require_space
from space.store import STORE
from space.store.logwire import LogQuery

SCHEMA = """
CREATE TABLE IF NOT EXISTS agent_turns (seq INTEGER PRIMARY KEY AUTOINCREMENT,
  space TEXT NOT NULL, turn_id TEXT NOT NULL, object_id TEXT NOT NULL,
  started_at REAL NOT NULL, failure INTEGER NOT NULL, body TEXT NOT NULL,
  UNIQUE (space, turn_id));
CREATE INDEX IF NOT EXISTS agent_turns_by_chat
  ON agent_turns (space, object_id, failure, started_at);
CREATE INDEX IF NOT EXISTS agent_turns_by_time ON agent_turns (space, started_at);
"""
_encoder = msgspec.json.Encoder()


def ensure_schema(db: sqlite_utils.Database) -> None:
    db.executescript(SCHEMA)


def check_space(space: str, turn: TurnIn) -> None:
    if turn.space != space:
        raise Refusal(
            400,
            "invalid_turn",
            f"`space` must be the space of the path {space!r}, got {turn.space!r}",
        )


def body_of(turn: TurnIn) -> str:
    """The turn as stored and answered: its instants in the one format (either store)."""
    return _encoder.encode(wire_builtins(turn)).decode()


def add_turn(
    db: sqlite_utils.Database, space: str, turn: TurnIn, keep: RunRetention, now: datetime
) -> bool:
    """Insert `turn` and prune its chat's turns; False if this exact entry was there already."""
    body = body_of(turn)
    with transaction(db):
        if logtable.written(db, "agent_turns", "turn_id", space, turn.turnId, body):
            return False
        failure = turn.outcome is not TurnOutcome.OK
        db.execute(
            "INSERT INTO agent_turns (space, turn_id, object_id, started_at, failure, body) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [space, turn.turnId, turn.objectId, turn.startedAt.timestamp(), failure, body],
        )
        logtable.prune(db, "agent_turns", "object_id", space, turn.objectId, failure, keep, now)
    return True


def turns_query(query: Mapping[str, str], limit: int) -> LogQuery:
    """Oldest first: from `since` on if given, else the latest `limit` turns."""
    filters = {"object_id": query["chat"]} if "chat" in query else {}
    since = logtable.instant(query["since"]) if "since" in query else None
    return LogQuery(filters=filters, since=since, limit=limit)


async def post_turn(request: web.Request) -> web.Response:
    space = require_space(request)
    turn = decode(await raw_body(request), TurnIn, code="invalid_turn")
    check_space(space, turn)
    turn = msgspec.structs.replace(turn, peer=duties.own_peer(request, turn.peer))
    added = await request.app[STORE].post_turn(space, turn, request.app[SETTINGS].retention)
    return answer(wire_builtins(turn), status=201 if added else 200)


async def get_turns(request: web.Request) -> web.Response:
    space = require_space(request)
    limit = int_query(request, "limit", 100, low=1, high=1000)
    found = await request.app[STORE].turns_page(space, turns_query(request.query, limit))
    return answer({"turns": found})


def setup(app: web.Application) -> None:
    add_route(
        app,
        "turn_create",
        post_turn,
        "Record a chat-watch turn (`agent_turns`, idempotent by `turnId`)",
        body=TurnIn,
        answer=TurnIn,
    )
    add_route(
        app,
        "turns",
        get_turns,
        "Turns oldest first: `?chat=<objectId>&since=<RFC 3339>&limit=`",
        answer=TurnList,
    )
