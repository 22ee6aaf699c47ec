"""`Idempotency-Key`: a write retried within a day answers its first result, stores nothing new.

Owns the `idempotency` table and the middleware (inside authentication) that, for a
POST, PUT, PATCH or DELETE carrying the header, keys the request by (token, key):
the first answer below 500 is stored with a digest of the method, path and body; a
retry with the same key and request answers that stored answer (header
`Idempotent-Replayed: true`) without running the handler; the same key on another
request is 422 `idempotency_key_reused`. A retry arriving while the first is still being
answered waits for it (on this server by `IN_FLIGHT`, on another by the store's reservation
of the key, `Store.kept_answer`). A 5xx (a storage fault) is not stored: the retry runs
afresh. Keys older than `KEEP_S` go with the history prune. Must not know any other table.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging

import sqlite_utils
from aiohttp import web

from space.auth import PRINCIPAL
from space.http import Handler, Refusal, raw_body
from space.storage import STORE_FAULTS
from space.store import STORE, Store
from space.store.logwire import Kept

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


def stored(db: sqlite_utils.Database, owner: str, key: str) -> Kept | None:
    """The answer kept under `(owner, key)`, or None."""
    row = db.execute(
        "SELECT digest, status, content_type, headers, body FROM idempotency "
        "WHERE owner = ? AND key = ?",
        [owner, key],
    ).fetchone()
    if row is None:
        return None
    digest, status, content_type, headers, body = row
    return Kept(
        digest=digest, status=status, content_type=content_type, headers=headers, body=bytes(body)
    )


def insert(db: sqlite_utils.Database, owner: str, key: str, kept: Kept, at: float) -> None:
    db.execute(
        "INSERT OR REPLACE INTO idempotency VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [owner, key, kept.digest, kept.status, kept.content_type, kept.headers, kept.body, at],
    )


def replayed(kept: Kept, key: str, digest: str) -> web.Response:
    """The kept answer again; 422 `idempotency_key_reused` if it answered another request."""
    if kept.digest != digest:
        detail = f"`{HEADER}` {key!r} was used for another request; use a new key for this one"
        raise Refusal(422, "idempotency_key_reused", detail)
    headers = {**json.loads(kept.headers), REPLAYED: "true"}
    return web.Response(
        status=kept.status, body=kept.body, content_type=kept.content_type, headers=headers
    )


async def _store(store: Store, owner: str, key: str, digest: str, answer: web.Response) -> bool:
    """Keep a first answer below 500; whether it was kept."""
    if answer.status >= 500 or not isinstance(answer.body, bytes):
        return False
    kept = {h: answer.headers[h] for h in _KEPT_HEADERS if h in answer.headers}
    ct, headers = answer.content_type, json.dumps(kept)
    row = Kept(
        digest=digest, status=answer.status, content_type=ct, headers=headers, body=answer.body
    )
    try:
        await store.keep_answer(owner, key, row)
    except STORE_FAULTS as exc:  # the write committed: answer it, a retry may repeat
        log.warning("idempotency key %r not stored: %s", key, exc)
        return False
    return True


@web.middleware
async def replay(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer a retried write from its first answer; store a first answer below 500."""
    key = _key_of(request)
    if key is None:
        return await handler(request)
    owner, digest = _owner(request), await _digest(request)
    in_flight, store = request.app[IN_FLIGHT], request.app[STORE]
    while (busy := in_flight.get((owner, key))) is not None:
        await busy.wait()  # the first is still being answered: its answer is the retry's
    in_flight[(owner, key)] = done = asyncio.Event()  # before the lookup: a retry waits
    reserved = False  # the key is this request's to answer (or to give up)
    try:
        first = await store.kept_answer(owner, key, digest)
        if first is not None:
            return replayed(first, key, digest)
        reserved = True
        try:
            answer = await handler(request)
        except Refusal as exc:
            answer = exc.response()
        if isinstance(answer, web.Response) and await _store(store, owner, key, digest, answer):
            reserved = False
        return answer
    finally:
        if reserved:
            await _give_up(store, owner, key)
        del in_flight[(owner, key)]
        done.set()


async def _give_up(store: Store, owner: str, key: str) -> None:
    """No answer kept: the key is free for a retry (on another server too)."""
    try:
        await store.drop_key(owner, key)
    except STORE_FAULTS as exc:  # the reservation lapses by itself (`pg_idempotency`)
        log.warning("idempotency key %r not freed: %s", key, exc)


def setup(app: web.Application) -> None:
    app[IN_FLIGHT] = {}
