"""`Idempotency-Key`: a write retried within a day answers its first result, stores nothing new.

Owns the `idempotency` table and the middleware (inside authentication) that, for a
POST, PUT, PATCH or DELETE carrying the header, keys the request by (token, key):
the first answer below 500 is stored with a digest of the method, path and body; a
retry with the same key and request answers that stored answer (header
`Idempotent-Replayed: true`) without running the handler; the same key on another
request is 422 `idempotency_key_reused`. A retry arriving while the first is still being
answered waits for it. A 5xx (a storage fault) is not stored: the retry runs afresh.
Keys older than `KEEP_S` go with the history prune. Must not know any other table.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import sqlite3

import sqlite_utils
from aiohttp import web

from space.appstate import CLOCK
from space.auth import PRINCIPAL
from space.dbthread import db_call
from space.http import Handler, Refusal, raw_body
from space.storage import Stalled

HEADER = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"
KEEP_S = 24 * 3600.0
MAX_KEY = 255
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_KEPT_HEADERS = ("ETag", "Location", "Retry-After")
SCHEMA = """
CREATE TABLE IF NOT EXISTS idempotency (owner TEXT NOT NULL, key TEXT NOT NULL,
  digest TEXT NOT NULL, status INTEGER NOT NULL, content_type TEXT NOT NULL,
  headers TEXT NOT NULL, body BLOB NOT NULL, at REAL NOT NULL, PRIMARY KEY (owner, key));
CREATE INDEX IF NOT EXISTS idempotency_at ON idempotency (at);
"""
log = logging.getLogger("baton.space")
IN_FLIGHT: web.AppKey[dict[tuple[str, str], asyncio.Event]] = web.AppKey("idempotency_in_flight")


def ensure_schema(db: sqlite_utils.Database) -> None:
    db.executescript(SCHEMA)


def prune_batch(db: sqlite_utils.Database, now: float, batch: int) -> int:
    """Forget up to `batch` keys older than `KEEP_S`; how many went."""
    return db.execute(
        "DELETE FROM idempotency WHERE rowid IN "
        "(SELECT rowid FROM idempotency WHERE at < ? LIMIT ?)",
        [now - KEEP_S, batch],
    ).rowcount


def _key_of(request: web.Request) -> str | None:
    key = request.headers.get(HEADER)
    if key is None or request.method not in _WRITES or PRINCIPAL not in request:
        return None
    if not key or len(key) > MAX_KEY or not (key.isascii() and key.isprintable()):
        detail = f"header `{HEADER}` must be 1 to {MAX_KEY} printable ASCII characters"
        raise Refusal(400, "invalid_header", detail)
    return key


def _owner(request: web.Request) -> str:
    who = request[PRINCIPAL]
    return f"{who.role}:{who.id}"


async def _digest(request: web.Request) -> str:
    body = await raw_body(request) if request.can_read_body else b""
    seen = hashlib.sha256(f"{request.method} {request.rel_url}\n".encode())
    seen.update(body)
    return seen.hexdigest()


def _stored(db: sqlite_utils.Database, owner: str, key: str, digest: str) -> web.Response | None:
    row = db.execute(
        "SELECT digest, status, content_type, headers, body FROM idempotency "
        "WHERE owner = ? AND key = ?",
        [owner, key],
    ).fetchone()
    if row is None:
        return None
    if row[0] != digest:
        detail = f"`{HEADER}` {key!r} was used for another request; use a new key for this one"
        raise Refusal(422, "idempotency_key_reused", detail)
    headers = {**json.loads(row[3]), REPLAYED: "true"}
    return web.Response(status=row[1], body=row[4], content_type=row[2], headers=headers)


async def _store(
    request: web.Request, owner: str, key: str, digest: str, answer: web.Response
) -> None:
    if answer.status >= 500 or not isinstance(answer.body, bytes):
        return
    kept = {h: answer.headers[h] for h in _KEPT_HEADERS if h in answer.headers}
    row = [owner, key, digest, answer.status, answer.content_type, json.dumps(kept), answer.body]
    try:
        await db_call(request.app, _insert, [*row, request.app[CLOCK]().timestamp()])
    except (sqlite3.Error, Stalled) as exc:  # the write committed: answer it, a retry may repeat
        log.warning("idempotency key %r not stored: %s", key, exc)


def _insert(db: sqlite_utils.Database, row: list[object]) -> None:
    db.execute("INSERT OR REPLACE INTO idempotency VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)


@web.middleware
async def replay(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer a retried write from its first answer; store a first answer below 500."""
    key = _key_of(request)
    if key is None:
        return await handler(request)
    owner, digest = _owner(request), await _digest(request)
    in_flight = request.app[IN_FLIGHT]
    while (busy := in_flight.get((owner, key))) is not None:
        await busy.wait()  # the first is still being answered: its answer is the retry's
    in_flight[(owner, key)] = done = asyncio.Event()  # before the lookup: a retry waits
    try:
        first = await db_call(request.app, _stored, owner, key, digest)
        if first is not None:
            return first
        try:
            answer = await handler(request)
        except Refusal as exc:
            answer = exc.response()
        if isinstance(answer, web.Response):
            await _store(request, owner, key, digest, answer)
        return answer
    finally:
        del in_flight[(owner, key)]
        done.set()


def setup(app: web.Application) -> None:
    app[IN_FLIGHT] = {}
