"""Fire claims: the one guard against double fires, and the fence of the election.

Owns the `fires` table: `(space, triggerId, key)` is claimed at most once, in one
`BEGIN IMMEDIATE` transaction; `stale_term` and `not_owner` fence it; a resent `claimId` is
answered as claimed; a claim may ask for its run's token, minted in its transaction; a list
claims each in a savepoint of its own. Details in docs/architecture.md, "Module notes".
Must not change the lease or the records.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

import sqlite_utils
from aiohttp import web

from core.vocab import canonical_key
from core.wire import FireIn, FireList, FireOut
from space import fence, history, metrics, token_store
from space.appstate import SETTINGS
from space.auth import require_peer
from space.db import DB, transaction
from space.http import Refusal, add_route, answer, int_query, now_of, read_body
from space.servertime import iso
from space.spaces import require_space
from space.store import Claimed, Taken
from triggers import records
from triggers.bounds import MAX_TIMEOUT_SECONDS

log = logging.getLogger("baton.space")
DEFAULT_TIMEOUT_S = records.Limits().timeout_seconds  # a record without `limits.timeoutSeconds`

SCHEMA = """
CREATE TABLE IF NOT EXISTS fires (space TEXT NOT NULL, trigger_id TEXT NOT NULL,
  key TEXT NOT NULL, term INTEGER NOT NULL, peer TEXT NOT NULL, claimed_at TEXT NOT NULL,
  PRIMARY KEY (space, trigger_id, key));
"""
CLAIM_ID_COLUMN = "ALTER TABLE fires ADD COLUMN claim_id TEXT NOT NULL DEFAULT ''"


# a claim of an older build, its key's instant not yet in the one format (`…:00Z`)
OLD_KEY = (
    "key GLOB '*[0-9]T[0-9]*' "
    "AND key NOT GLOB '*T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z*'"
)


def ensure_schema(db: sqlite_utils.Database) -> None:
    db.executescript(SCHEMA)
    if "claim_id" not in {column.name for column in db["fires"].columns}:
        db.execute(CLAIM_ID_COLUMN)  # a store written by an older build
    _canonical_keys(db)


def _canonical_keys(db: sqlite_utils.Database) -> None:
    """The keys an older build claimed, in the one format: a slot it claimed is claimed
    for this build too (a takeover's bridge right after an upgrade never runs it again)."""
    db.conn.create_function("canonical_key", 1, canonical_key, deterministic=True)
    with transaction(db):
        db.execute(f"UPDATE OR IGNORE fires SET key = canonical_key(key) WHERE {OLD_KEY}")


def claim_one(
    db: sqlite_utils.Database, space: str, fire: FireIn, now: datetime, margin: float
) -> dict[str, Any]:
    """Check the fence and claim; raise `Refusal` (404/409) if refused. Inside a transaction.

    With `run`, the answer carries the run's token, living at most the record's timeout
    plus `margin` seconds."""
    record = fence.record_to_claim(db, space, fire, now)
    claimed = _insert(db, space, fire, now)
    if fire.run is None:
        return claimed
    return {**claimed, **_run_token(db, space, fire, record, now, margin)}


def _insert(db: sqlite_utils.Database, space: str, fire: FireIn, now: datetime) -> dict[str, Any]:
    """The key claimed by this claim (one statement when it is new), else a `Refusal`."""
    outcome = take(db, space, fire, iso(now))
    if isinstance(outcome, Claimed):
        return {**_out(fire), "claimedAt": outcome.claimed_at}
    raise Refusal(
        409,
        "already_claimed",
        f"{fire.triggerId}@{fire.key} was claimed by {outcome.peer!r} at term {outcome.term}",
        peer=outcome.peer,
        claimedAt=outcome.claimed_at,
    )


def take(db: sqlite_utils.Database, space: str, fire: FireIn, at: str) -> Claimed | Taken:
    """Insert the claim of `fire`'s key at `at`: `Claimed` when it is new or this very
    claim sent again (`claimId`), else `Taken` by the claim that has it."""
    inserted = db.conn.execute(
        "INSERT INTO fires (space, trigger_id, key, term, peer, claimed_at, claim_id) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (space, trigger_id, key) DO NOTHING",
        [space, fire.triggerId, fire.key, fire.term, fire.peer, at, fire.claimId or ""],
    ).rowcount
    if inserted == 1:
        return Claimed(at)
    row = db.execute(
        "SELECT term, peer, claimed_at, claim_id FROM fires "
        "WHERE space = ? AND trigger_id = ? AND key = ?",
        [space, fire.triggerId, fire.key],
    ).fetchone()
    if fire.claimId and row[3] == fire.claimId:
        return Claimed(row[2])
    return Taken(peer=row[1], term=row[0], claimed_at=row[2])


def _run_token(
    db: sqlite_utils.Database,
    space: str,
    fire: FireIn,
    record: dict[str, Any],
    now: datetime,
    margin: float,
) -> dict[str, str]:
    """The token of the run the claim asked for: `{token, expiresAt}`."""
    assert fire.run is not None
    ttl = min(fire.run.ttlSeconds, run_timeout(record) + margin, MAX_TIMEOUT_SECONDS + margin)
    expires = now + timedelta(seconds=ttl)
    token = token_store.mint_run(
        db, space, fire.triggerId, fire.run.runId, now.timestamp(), expires.timestamp(), fire.peer
    )
    return {"token": token, "expiresAt": iso(expires)}


def run_timeout(record: dict[str, Any]) -> float:
    """The record's `limits.timeoutSeconds`, or the default when it has none: how long its
    run may take. Read off the stored body (a claim decodes no whole record for it); a
    value out of bounds (written past the API) is held to the bound, so its token's
    expiry stays an instant."""
    limits = record.get("limits")
    value = limits.get("timeoutSeconds") if isinstance(limits, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        return DEFAULT_TIMEOUT_S
    return min(float(value), MAX_TIMEOUT_SECONDS)


def claim_of(db: sqlite_utils.Database, space: str, tid: str, key: str) -> tuple[str, int] | None:
    """Who claimed `(tid, key)` and at which term, or None if nobody did."""
    row = db.execute(
        "SELECT peer, term FROM fires WHERE space = ? AND trigger_id = ? AND key = ?",
        [space, tid, key],
    ).fetchone()
    return (row[0], row[1]) if row is not None else None


def last_claimer(db: sqlite_utils.Database, space: str, tid: str) -> str | None:
    """The peer of the latest claim of trigger `tid`, or None if it was never fired."""
    row = db.execute(
        "SELECT peer FROM fires WHERE space = ? AND trigger_id = ? ORDER BY rowid DESC LIMIT 1",
        [space, tid],
    ).fetchone()
    return row[0] if row is not None else None


def _out(fire: FireIn) -> dict[str, Any]:
    return {"triggerId": fire.triggerId, "key": fire.key, "term": fire.term, "peer": fire.peer}


def _result(
    db: sqlite_utils.Database, space: str, fire: FireIn, now: datetime, margin: float
) -> dict[str, Any]:
    base = {"triggerId": fire.triggerId, "key": fire.key}
    try:
        with transaction(db):  # a savepoint: a claim that fails half-way leaves nothing
            claimed = claim_one(db, space, fire, now, margin)
    except Refusal as exc:
        _refused(db, space, fire, now, exc)
        return {**base, "status": exc.status, "error": exc.code, "detail": exc.detail}
    except (ValueError, TypeError, OverflowError, KeyError) as exc:  # an odd stored record
        log.warning("claim %s@%s refused: %r", fire.triggerId, fire.key, exc)
        detail = f"the record cannot be claimed: {type(exc).__name__}: {exc}"
        return {**base, "status": 422, "error": "invalid_record", "detail": detail}
    minted: dict[str, Any] = {n: claimed[n] for n in ("token", "expiresAt") if n in claimed}
    return {**base, "status": 201, "claimedAt": claimed["claimedAt"], **minted}


def _refused(
    db: sqlite_utils.Database, space: str, fire: FireIn, now: datetime, exc: Refusal
) -> None:
    """A refusal of the fence or of a key claimed before goes into the claim ledger."""
    if exc.status == 409:
        who = (fire.triggerId, fire.key, fire.peer, fire.term)
        history.refused(db, space, who, now.timestamp(), exc.code, exc.detail)


async def post_fires(request: web.Request) -> web.Response:
    space = require_space(request)
    body = await read_body(request, FireIn | list[FireIn])  # type: ignore[arg-type]  # a union
    batch = body if isinstance(body, list) else [body]
    for fire in batch:
        require_peer(request, fire.peer)
    db, now = request.app[DB], now_of(request)
    margin = request.app[SETTINGS].run_token_margin_seconds
    if isinstance(body, list):
        with transaction(db):
            results = [_result(db, space, f, now, margin) for f in body]
        for r in results:
            metrics.claim_seen(request.app, space, r["key"], r.get("error") or "claimed", now)
        return answer({"claims": results})
    refusal = None
    with transaction(db):
        try:
            claimed = claim_one(db, space, body, now, margin)
        except Refusal as exc:
            refusal = exc
            _refused(db, space, body, now, exc)
    if refusal is not None:
        metrics.claim_seen(request.app, space, body.key, refusal.code, now)
        raise refusal
    metrics.claim_seen(request.app, space, body.key, "claimed", now)
    return answer(claimed, status=201)


async def get_fires(request: web.Request) -> web.Response:
    space = require_space(request)
    limit = int_query(request, "limit", 100, low=1, high=1000)
    sql = "SELECT trigger_id, key, term, peer, claimed_at FROM fires WHERE space = ?"
    params: list[Any] = [space]
    if "trigger" in request.query:
        sql += " AND trigger_id = ?"
        params.append(request.query["trigger"])
    rows = request.app[DB].execute(sql + " ORDER BY rowid DESC LIMIT ?", [*params, limit])
    keys = ("triggerId", "key", "term", "peer", "claimedAt")
    return answer({"fires": [dict(zip(keys, r, strict=True)) for r in reversed(rows.fetchall())]})


def setup(app: web.Application) -> None:
    ensure_schema(app[DB])
    add_route(
        app,
        "fires_claim",
        post_fires,
        "Claim a fire (201) or a list of fires (200, one result each); `run` asks for the "
        "run's token with it",
        body=FireIn | list[FireIn],
        answer=FireOut,
    )
    add_route(
        app,
        "fires",
        get_fires,
        "Recent claims, oldest first: `?trigger=&limit=`",
        answer=FireList,
    )
