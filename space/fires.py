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
from space.db import transaction
from space.http import Refusal, add_route, answer, int_query, now_of, read_body
from space.servertime import iso
from space.spaces import require_space
from space.store import STORE, Claimed, Taken
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
        return claimed_out(fire, outcome.claimed_at)
    raise taken(fire, outcome)


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
    expires = run_token_expiry(fire, record, now, margin)
    token = token_store.mint_run(
        db, space, fire.triggerId, fire.run.runId, now.timestamp(), expires.timestamp(), fire.peer
    )
    return {"token": token, "expiresAt": iso(expires)}


def run_token_expiry(
    fire: FireIn, record: dict[str, Any], now: datetime, margin: float
) -> datetime:
    """When the token of the run `fire` asks for dies at the latest (either store)."""
    assert fire.run is not None
    ttl = min(fire.run.ttlSeconds, run_timeout(record) + margin, MAX_TIMEOUT_SECONDS + margin)
    return now + timedelta(seconds=ttl)


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


def claimed_out(fire: FireIn, claimed_at: str) -> dict[str, Any]:
    """The answer to a claim that claimed its key (either store)."""
    return {**_out(fire), "claimedAt": claimed_at}


def taken(fire: FireIn, outcome: Taken) -> Refusal:
    """The refusal of a claim whose key another claim has (either store)."""
    return Refusal(
        409,
        "already_claimed",
        f"{fire.triggerId}@{fire.key} was claimed by {outcome.peer!r} at term {outcome.term}",
        peer=outcome.peer,
        claimedAt=outcome.claimed_at,
    )


def listed(fire: FireIn, claimed: dict[str, Any] | Refusal | Exception) -> dict[str, Any]:
    """One result of a list of claims (either store): claimed, refused, or an odd record."""
    base = {"triggerId": fire.triggerId, "key": fire.key}
    if isinstance(claimed, Refusal):
        return {**base, "status": claimed.status, "error": claimed.code, "detail": claimed.detail}
    if isinstance(claimed, Exception):
        log.warning("claim %s@%s refused: %r", fire.triggerId, fire.key, claimed)
        detail = f"the record cannot be claimed: {type(claimed).__name__}: {claimed}"
        return {**base, "status": 422, "error": "invalid_record", "detail": detail}
    minted: dict[str, Any] = {n: claimed[n] for n in ("token", "expiresAt") if n in claimed}
    return {**base, "status": 201, "claimedAt": claimed["claimedAt"], **minted}


ODD_RECORD = (ValueError, TypeError, OverflowError, KeyError)  # a claim of an odd stored record


def refusal_row(
    space: str, fire: FireIn, at: float, exc: Refusal
) -> tuple[str, str, str, float, str, int, str, str] | None:
    """The claim ledger's row of a refusal (either store): the fence's or a key claimed
    before (409s); None for others (an unknown trigger)."""
    if exc.status != 409:
        return None
    return (space, fire.triggerId, fire.key, at, fire.peer, fire.term, exc.code, exc.detail)


def _result(
    db: sqlite_utils.Database, space: str, fire: FireIn, now: datetime, margin: float
) -> dict[str, Any]:
    try:
        with transaction(db):  # a savepoint: a claim that fails half-way leaves nothing
            claimed = claim_one(db, space, fire, now, margin)
    except Refusal as exc:
        _refused(db, space, fire, now, exc)
        return listed(fire, exc)
    except ODD_RECORD as exc:
        return listed(fire, exc)
    return listed(fire, claimed)


def _refused(
    db: sqlite_utils.Database, space: str, fire: FireIn, now: datetime, exc: Refusal
) -> None:
    """A refusal of the fence or of a key claimed before goes into the claim ledger."""
    if exc.status == 409:
        who = (fire.triggerId, fire.key, fire.peer, fire.term)
        history.refused(db, space, who, now.timestamp(), exc.code, exc.detail)


def claim_single(
    db: sqlite_utils.Database, space: str, fire: FireIn, now: datetime, margin: float
) -> dict[str, Any]:
    """One claim in a transaction of its own; a refusal is kept in the ledger, then raised."""
    refusal = None
    with transaction(db):
        try:
            claimed = claim_one(db, space, fire, now, margin)
        except Refusal as exc:
            refusal = exc
            _refused(db, space, fire, now, exc)
    if refusal is not None:
        raise refusal
    return claimed


def claim_list(
    db: sqlite_utils.Database, space: str, batch: list[FireIn], now: datetime, margin: float
) -> list[dict[str, Any]]:
    """A list of claims in one transaction, each in a savepoint: one result each."""
    with transaction(db):
        return [_result(db, space, f, now, margin) for f in batch]


async def post_fires(request: web.Request) -> web.Response:
    space = require_space(request)
    body = await read_body(request, FireIn | list[FireIn])  # type: ignore[arg-type]  # a union
    batch = body if isinstance(body, list) else [body]
    for fire in batch:
        require_peer(request, fire.peer)
    store, now = request.app[STORE], now_of(request)
    margin = request.app[SETTINGS].run_token_margin_seconds
    if isinstance(body, list):
        results = await store.claim_list(space, body, margin)
        seen = [(r["key"], r.get("error") or "claimed") for r in results]
        await metrics.claim_seen(request.app, space, seen, now)
        return answer({"claims": results})
    try:
        claimed = await store.claim_fire(space, body, margin)
    except Refusal as refusal:
        await metrics.claim_seen(request.app, space, [(body.key, refusal.code)], now)
        raise
    await metrics.claim_seen(request.app, space, [(body.key, "claimed")], now)
    return answer(claimed, status=201)


async def get_fires(request: web.Request) -> web.Response:
    space = require_space(request)
    limit = int_query(request, "limit", 100, low=1, high=1000)
    found = await request.app[STORE].fires_page(space, request.query.get("trigger"), limit)
    return answer({"fires": found})


def recent(
    db: sqlite_utils.Database, space: str, trigger: str | None, limit: int
) -> list[dict[str, Any]]:
    """The latest `limit` claims (of `trigger`, if given), oldest first."""
    sql = "SELECT trigger_id, key, term, peer, claimed_at FROM fires WHERE space = ?"
    params: list[Any] = [space]
    if trigger is not None:
        sql += " AND trigger_id = ?"
        params.append(trigger)
    rows = db.execute(sql + " ORDER BY rowid DESC LIMIT ?", [*params, limit]).fetchall()
    return [dict(zip(FIRE_KEYS, r, strict=True)) for r in reversed(rows)]


FIRE_KEYS = ("triggerId", "key", "term", "peer", "claimedAt")


def setup(app: web.Application) -> None:
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
