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

from collections.abc import Iterator, Mapping
from typing import Any

import msgspec
import sqlite_utils
from aiohttp import web

from core.vocab import RunStatus
from core.wire import RollupList, RunIn, RunList, RunResult
from space import auth, changes, duties, logtable, metrics, oddrows, run_writes
from space.appstate import SETTINGS
from space.changes import notify
from space.http import Refusal, add_route, answer, decode, int_query, raw_body
from space.spaces import require_space
from space.store import STORE
from space.store.logwire import LogQuery, Poster

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


def runs_query(query: Mapping[str, str], limit: int) -> LogQuery:
    """Oldest first: from `since` on if given, else the latest `limit` runs."""
    filters = {}
    if "trigger" in query:
        filters["trigger_id"] = query["trigger"]
    if "status" in query:
        filters["status"] = _status(query["status"])
    since = logtable.instant(query["since"]) if "since" in query else None
    return LogQuery(filters=filters, since=since, limit=limit)


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
    return rolled(db.execute(sql + " ORDER BY trigger_id, status", params).fetchall())


def rolled(rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Rows `(trigger_id, status, count, last_run_at)` by trigger and status as the API
    answers them (either store)."""
    out: dict[str, dict[str, Any]] = {}
    good, _ = oddrows.each(rows, _rollup_row, lambda r: f"{r[0]}/{r[1]}", "run_rollups")
    for tid, status, count, last in good:
        entry = out.setdefault(tid, {"triggerId": tid, "runs": 0, "counts": {}, "lastRunAt": None})
        entry["runs"] += count
        entry["counts"][status] = count
        entry["lastRunAt"] = max(filter(None, [entry["lastRunAt"], last]), default=None)
    return list(out.values())


def _rollup_row(row: tuple[Any, ...]) -> tuple[str, str, int, str | None]:
    tid, status, count, last = row
    if not (isinstance(count, int) and isinstance(status, str)):
        raise TypeError(f"count {count!r} is not an integer")
    return tid, status, count, last if isinstance(last, str) else None


RUN_BODY: Any = RunIn | list[RunIn]  # one run or a list (a union is no `type[T]` to mypy)


def free_parts(body: RunIn | list[RunIn]) -> Iterator[tuple[str, int, Any]]:
    """What of posted runs no type bounds: each run's `result`, its stamps' dicts."""
    listed = isinstance(body, list)
    for n, run in enumerate(body if isinstance(body, list) else [body]):
        at, depth = (f"$[{n}]", 1) if listed else ("$", 0)
        yield f"{at}.result", depth + 1, run.result
        if run.stamps is not None:
            for name in ("breaker", "rollup"):
                yield f"{at}.stamps.{name}", depth + 2, getattr(run.stamps, name)


async def post_run(request: web.Request) -> web.Response:
    """One run (its answer: the run as stored), or a list of them (one result each),
    each with the trigger's `stamps` if it carries them: one seam call, one transaction."""
    space = require_space(request)
    body: RunIn | list[RunIn] = decode(
        await raw_body(request), RUN_BODY, code="invalid_run", free=free_parts
    )
    app, store, keep = request.app, request.app[STORE], request.app[SETTINGS].retention
    if isinstance(body, list):
        by = Poster(who=duties.device(request), keep=keep, writer=changes.writer(request))
        posted = await store.post_runs(space, body, by)
        _end_streams(app, space, set(posted.ended))
        _written(request, space, body, posted.results)
        return answer({"runs": [msgspec.to_builtins(r) for r in posted.results]})
    one = await store.post_run(space, body, Poster(who=duties.device(request), keep=keep))
    if one.refusal is not None:
        if one.ended:
            _end_streams(app, space, {body.runId})
        raise one.refusal
    assert one.run is not None
    run, added = one.run, one.added
    _end_streams(app, space, {run.runId})
    _written(
        request,
        space,
        [body],
        [
            RunResult(
                runId=run.runId, status=201 if added else 200, stamps=200 if body.stamps else None
            )
        ],
    )
    return answer(run_writes.wire(run), status=201 if added else 200)


def _end_streams(app: web.Application, space: str, run_ids: set[str]) -> None:
    """The open event streams of the tokens of runs just ended (on the loop)."""
    if run_ids:
        auth.end_streams(app, lambda who: who.space == space and who.run_id in run_ids)


def _written(request: web.Request, space: str, runs: list[RunIn], results: list[RunResult]) -> None:
    """After the commit: count the new runs, wake the feeds if stamps were applied."""
    for run, result in zip(runs, results, strict=True):
        if result.status == 201:
            metrics.run_seen(request.app, space, run.status.value, run.lateMs)
    if any(r.stamps == 200 for r in results):
        notify(request.app, space)


async def get_runs(request: web.Request) -> web.Response:
    space = require_space(request)
    limit = int_query(request, "limit", 100, low=1, high=1000)
    found = await request.app[STORE].runs_page(space, runs_query(request.query, limit))
    return answer({"runs": found})


async def get_run(request: web.Request) -> web.Response:
    space = require_space(request)
    run_id = request.match_info["runId"]
    found = await request.app[STORE].run_body(space, run_id)
    if found is None:
        raise Refusal(404, "unknown_run", f"no run {run_id!r} in space {space!r}")
    return answer(found)


async def get_rollups(request: web.Request) -> web.Response:
    space = require_space(request)
    found = await request.app[STORE].rollups(space, request.query.get("trigger"))
    return answer({"rollups": found})


def setup(app: web.Application) -> None:
    add_route(
        app,
        "run_create",
        post_run,
        "Record a run (201, idempotent by `runId`) or a list of runs (200, one result "
        "each); `stamps` writes the trigger's runtime stamps with it",
        body=RunIn | list[RunIn],
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
    add_route(  # after `runs/rollup`, which a run id would otherwise shadow
        app, "run_get", get_run, "One run record by its `runId` (404 `unknown_run`)", answer=RunIn
    )
