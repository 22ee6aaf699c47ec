"""Forgetting history past its retention (`--history-days`), a small batch at a time.

Owns the pruning of the `history_*` tables, of the claim ledger (`fires`) and of
`Idempotency-Key`s past a day: every `every` seconds, rows older than the retention (by the
store's clock) go in batches of `BATCH` rows, each its own short transaction through the
store seam (`Store.prune_history`; this module holds SQLite's), so a claim goes between.
A revision stays while it is the latest of its record before the cutoff (it says how the
record stood at the start of the kept history). Claims stay at least `CLAIMS_FLOOR_DAYS`
(past the longest grace a slot may still be fired in), so the guard against double fires
never forgets a key that could come again. Must not write facts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import sqlite_utils
from aiohttp import web

from space import idempotency
from space.appstate import SETTINGS
from space.db import transaction
from space.servertime import iso
from space.store import STORE

log = logging.getLogger("baton.space")
BATCH = 500
CLAIMS_FLOOR_DAYS = 8.0  # a cron `latest` grace or a once's grace is at most 7 days

# table → (the column of its instant, unix seconds or the wire text)
_BY_ROWID = {
    "history_refusals": "at",
    "history_applied": "at",
    "history_offsets": "at",
    "fires": "claimed_at",
}
_SCANNED = {
    "history_terms": "ended",
    "history_windows": "last_seen",
    "history_subscriptions": "COALESCE(ended, began)",  # one left open by a crash goes too
}
_REVISIONS = """
DELETE FROM history_revisions WHERE rowid IN (
  SELECT r.rowid FROM history_revisions r WHERE r.at < :cutoff AND (
    r.rev < (SELECT MAX(k.rev) FROM history_revisions k WHERE k.space = r.space
             AND k.trigger_id = r.trigger_id AND k.at < :cutoff)
    OR EXISTS (SELECT 1 FROM history_revisions d WHERE d.space = r.space
               AND d.trigger_id = r.trigger_id AND d.op = 'delete' AND d.at < :cutoff))
  LIMIT :batch)
"""


def prune_batch(
    db: sqlite_utils.Database, cutoff: float, claims_cutoff: float, now: float | None = None
) -> int:
    """One batch of each table (with `now`, of the idempotency keys too); how many rows went
    (0: nothing is left to forget)."""
    gone = 0
    with transaction(db):
        for table, column in _BY_ROWID.items():
            limit: object = iso_of(claims_cutoff) if table == "fires" else cutoff
            gone += db.execute(
                f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM (SELECT rowid, "
                f"{column} AS at FROM {table} ORDER BY rowid LIMIT ?) WHERE at < ?)",
                [BATCH, limit],
            ).rowcount
        for table, column in _SCANNED.items():
            gone += db.execute(
                f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} "
                f"WHERE {column} < ? LIMIT ?)",
                [cutoff, BATCH],
            ).rowcount
        gone += db.execute(_REVISIONS, {"cutoff": cutoff, "batch": BATCH}).rowcount
        if now is not None:
            gone += idempotency.prune_batch(db, now, BATCH)
    return gone


def iso_of(unix: float) -> str:
    return iso(datetime.fromtimestamp(unix, UTC))


def cutoffs(now: datetime, days: float, claims_days: float) -> tuple[float, float]:
    """The instants (unix) before which history, and claims, are forgotten at `now`."""
    return (now - timedelta(days=days)).timestamp(), (now - timedelta(days=claims_days)).timestamp()


async def prune(app: web.Application) -> int:
    """Forget everything past the retention now (the store's clock), batch by batch; rows
    forgotten."""
    days = app[SETTINGS].history_days
    total = 0
    while (gone := await app[STORE].prune_history(days, max(days, CLAIMS_FLOOR_DAYS))) > 0:
        total += gone
    return total


async def _pruner(app: web.Application) -> AsyncIterator[None]:
    async def loop() -> None:
        while True:
            try:
                gone = await prune(app)
                if gone:
                    days = app[SETTINGS].history_days
                    log.info("history: %d rows past %g days forgotten", gone, days)
            except Exception as exc:  # a storage fault: the next round tries again
                log.warning("history: prune failed: %s", exc)
            await asyncio.sleep(app[SETTINGS].prune_every_seconds)

    task = asyncio.create_task(loop(), name="history-prune")
    yield
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def setup(app: web.Application) -> None:
    if app[SETTINGS].prune_every_seconds > 0:
        app.cleanup_ctx.append(_pruner)
