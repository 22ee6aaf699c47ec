"""Run records of a space, their pruning, and per-trigger rollups that pruning never changes.

Owns the `runs` and `run_rollups` tables. A run is posted once by the device
that ran it (re-posting the same record is a no-op, another one under the same
`runId` is 409). Runs are pruned by age and by count per trigger, failures
(`error`, `timeout`, `crashed`, `rejected`) kept longer than the rest; the
rollup counts are bumped in the same transaction as the insert and never
pruned. Posting a run record ends the run's tokens and their open event
streams (SPEC: a run token lives as long as its run). A device posts runs only
as its own peer, and a run that ran only of a fire it claimed (`duties`). Must
not touch records or claims.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec
import sqlite_utils
from aiohttp import web

from core.vocab import KEPT_LONGER, RunStatus
from core.wire import RollupList, RunIn, RunList
from space import auth, duties, logtable, metrics, token_store
from space.appstate import SETTINGS, RunRetention
from space.clock import iso
from space.db import DB, transaction
from space.http import Refusal, add_route, answer, decode, int_query, now_of, raw_body
from space.spaces import require_space

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (seq INTEGER PRIMARY KEY AUTOINCREMENT, space TEXT NOT NULL,
  run_id TEXT NOT NULL, trigger_id TEXT NOT NULL, status TEXT NOT NULL,
  started_at REAL NOT NULL, failure INTEGER NOT NULL, body TEXT NOT NULL,
  UNIQUE (space, run_id));
CREATE INDEX IF NOT EXISTS runs_by_trigger ON runs (space, trigger_id, failure, started_at);
CREATE INDEX IF NOT EXISTS runs_by_time ON runs (space, started_at);
CREATE TABLE IF NOT EXISTS run_rollups (space TEXT NOT NULL, trigger_id TEXT NOT NULL,
  status TEXT NOT NULL, count INTEGER NOT NULL, last_run_at TEXT,
  PRIMARY KEY (space, trigger_id, status));
"""
_encoder = msgspec.json.Encoder()


def ensure_schema(db: sqlite_utils.Database) -> None:
    db.executescript(SCHEMA)


def add_run(
    db: sqlite_utils.Database, space: str, run: RunIn, keep: RunRetention, now: datetime
) -> bool:
    """Insert `run` and bump its rollup; False if this exact run was there already."""
    body = _body(run)
    with transaction(db):
        row = db.execute(
            "SELECT body FROM runs WHERE space = ? AND run_id = ?", [space, run.runId]
        ).fetchone()
        if row is not None:
            if row[0] != body:
                raise Refusal(409, "run_exists", f"run {run.runId!r} exists with other content")
            return False
        failure = run.status in KEPT_LONGER  # the column `failure`: kept longer
        db.execute(
            "INSERT INTO runs (space, run_id, trigger_id, status, started_at, failure, "
            "body) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                space,
                run.runId,
                run.triggerId,
                run.status.value,
                run.startedAt.timestamp(),
                failure,
                body,
            ],
        )
        _bump(db, space, run)
        logtable.prune(db, "runs", "trigger_id", space, run.triggerId, failure, keep, now)
    return True


def wire(run: RunIn) -> dict[str, Any]:
    """The run as stored and answered: its instants in the one wire format (milliseconds)."""
    data = msgspec.to_builtins(run)
    data["startedAt"] = iso(run.startedAt)
    if run.finishedAt is not None:
        data["finishedAt"] = iso(run.finishedAt)
    return data


def _body(run: RunIn) -> str:
    return _encoder.encode(wire(run)).decode()


def _bump(db: sqlite_utils.Database, space: str, run: RunIn) -> None:
    at = iso(run.startedAt)
    db.execute(
        "INSERT INTO run_rollups VALUES (?, ?, ?, 1, ?) ON CONFLICT DO UPDATE SET "
        "count = count + 1, last_run_at = MAX(COALESCE(last_run_at, ''), excluded.last_run_at)",
        [space, run.triggerId, run.status.value, at],
    )


def query_runs(
    db: sqlite_utils.Database, space: str, query: dict[str, str], limit: int
) -> list[dict[str, Any]]:
    """Oldest first: from `since` on if given, else the latest `limit` runs."""
    filters = {}
    if "trigger" in query:
        filters["trigger_id"] = query["trigger"]
    if "status" in query:
        filters["status"] = _status(query["status"])
    return logtable.query(db, "runs", space, filters, query.get("since"), limit)


def _status(text: str) -> str:
    try:
        return RunStatus(text).value
    except ValueError:
        raise Refusal(
            400,
            "invalid_query",
            f"`status` must be one of {', '.join(s.value for s in RunStatus)}, got {text!r}",
        ) from None


def rollups(db: sqlite_utils.Database, space: str, trigger: str | None) -> list[dict[str, Any]]:
    sql, params = (
        "SELECT trigger_id, status, count, last_run_at FROM run_rollups WHERE space = ?",
        [space],
    )
    if trigger is not None:
        sql, params = sql + " AND trigger_id = ?", [*params, trigger]
    out: dict[str, dict[str, Any]] = {}
    for tid, status, count, last in db.execute(sql + " ORDER BY trigger_id", params).fetchall():
        entry = out.setdefault(tid, {"triggerId": tid, "runs": 0, "counts": {}, "lastRunAt": None})
        entry["runs"] += count
        entry["counts"][status] = count
        entry["lastRunAt"] = max(filter(None, [entry["lastRunAt"], last]), default=None)
    return list(out.values())


async def post_run(request: web.Request) -> web.Response:
    space = require_space(request)
    run = decode(await raw_body(request), RunIn, code="invalid_run")
    run = msgspec.structs.replace(run, peer=duties.own_peer(request, run.peer))
    fire = (run.triggerId, run.key)
    duties.require_claimed(request, space, fire, run.peer, run.term, run.status.value)
    now = now_of(request)
    token_store.revoke_run(request.app[DB], space, run.runId, now.timestamp())  # its run is over
    auth.end_streams(request.app, lambda who: (who.space, who.run_id) == (space, run.runId))
    settings = request.app[SETTINGS]
    added = add_run(request.app[DB], space, run, settings.retention, now)
    if added:
        metrics.run_seen(request.app, space, run.status.value, run.lateMs)
    return answer(wire(run), status=201 if added else 200)


async def get_runs(request: web.Request) -> web.Response:
    space = require_space(request)
    limit = int_query(request, "limit", 100, low=1, high=1000)
    return answer({"runs": query_runs(request.app[DB], space, dict(request.query), limit)})


async def get_rollups(request: web.Request) -> web.Response:
    space = require_space(request)
    return answer({"rollups": rollups(request.app[DB], space, request.query.get("trigger"))})


def setup(app: web.Application) -> None:
    ensure_schema(app[DB])
    add_route(
        app,
        "run_create",
        post_run,
        "Record a run (idempotent by `runId`)",
        body=RunIn,
        answer=RunIn,
    )
    add_route(
        app,
        "runs",
        get_runs,
        "Runs oldest first: `?trigger=&status=&since=<RFC 3339>&limit=`",
        answer=RunList,
    )
    add_route(
        app,
        "runs_rollup",
        get_rollups,
        "Per-trigger counts by status, never pruned: `?trigger=`",
        answer=RollupList,
    )
