"""History read back on PostgreSQL: the twins of `recall`'s queries and of the prune's.

Owns the SQL of `why`'s reads on the PostgreSQL store (schema v9 adds what v1–v6 lacked):
each read answers the rows SQLite's would, and `recall`'s pure conversions make the facts,
so `triggers.why` reasons from the same values on either store; one slot's facts are read
in one repeatable-read transaction. The prune deletes each table's oldest rows past the
retention by the database's clock, a batch at a time, skipping rows another server's prune
holds (`FOR UPDATE SKIP LOCKED`). A backfill reads, judges and stamps in one transaction.
Must not decide anything (that is `triggers.why`) nor know HTTP.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg

from space import recall, trigger_store
from space.forget import BATCH
from space.recall import AROUND, SCAN, SlotHistory, TriggerHistory
from space.servertime import iso
from space.store import BackfillSlots, BackfillStamp
from space.store.pg_records import Instant, _write
from triggers import facts as f

_UNIX = "extract(epoch FROM clock_timestamp())::float8"
_CLAIM = (
    "SELECT peer, term, claimed_at, run_id, status, reason, started_at, late_ms, key FROM fires "
    "WHERE space = $1 AND trigger_id = $2"
)
_EPOCH = "extract(epoch FROM {0})::float8"
_TERMS = (
    f"SELECT term, holder, {_EPOCH.format('began')}, {_EPOCH.format('ended')}, how "
    "FROM history_terms WHERE space = $1 AND began <= to_timestamp($2) "
    "AND (ended IS NULL OR ended >= to_timestamp($3)) ORDER BY term"
)
_WINDOWS_NEAR = (
    "SELECT peer, began, last_seen, stopped, slept FROM history_windows WHERE space = $1 "
    "AND began <= $2 AND last_seen >= $3 ORDER BY began"
)
_WINDOWS_EARLIER = (  # each device's last window before the hour around the slot
    "SELECT DISTINCT ON (peer) peer, began, last_seen, stopped, slept FROM history_windows "
    "WHERE space = $1 AND last_seen < $2 ORDER BY peer, last_seen DESC"
)
_APPLIED_LAST = (
    "SELECT DISTINCT ON (peer) peer, at, seq FROM history_applied WHERE space = $1 "
    "AND at <= $2 ORDER BY peer, at DESC"
)
_APPLIED_AFTER = (
    "SELECT peer, at, seq FROM history_applied WHERE space = $1 AND at > $2 AND at <= $3 "
    "ORDER BY at"
)
_OFFSETS_BEFORE = (
    "SELECT DISTINCT ON (peer) peer, at, offset_ms FROM history_offsets WHERE space = $1 "
    "AND at < $2 ORDER BY peer, at DESC"
)
_OFFSETS_NEAR = (
    "SELECT peer, at, offset_ms FROM history_offsets WHERE space = $1 AND at >= $2 "
    "AND at <= $3 ORDER BY at"
)
_PRUNE = (
    "DELETE FROM {t} WHERE ctid = ANY(ARRAY("
    "SELECT ctid FROM {t} WHERE {c} LIMIT {n} FOR UPDATE SKIP LOCKED))"
)
_PRUNED = {  # table → which of its rows are past the retention ($1: the cutoff, unix seconds)
    "history_refusals": "at < $1",
    "history_applied": "at < $1",
    "history_offsets": "at < $1",
    "history_terms": "ended < to_timestamp($1)",
    "history_windows": "last_seen < $1",
    "history_subscriptions": "coalesce(ended, began) < $1",  # one left open by a crash too
    "history_revisions": (  # but the latest of its record before the cutoff, unless deleted
        "at < $1 AND (rev < (SELECT max(k.rev) FROM history_revisions k WHERE k.space = "
        "history_revisions.space AND k.trigger_id = history_revisions.trigger_id AND k.at < $1) "
        "OR EXISTS (SELECT 1 FROM history_revisions d WHERE d.space = history_revisions.space "
        "AND d.trigger_id = history_revisions.trigger_id AND d.op = 'delete' AND d.at < $1))"
    ),
}


class PgHistory:
    """The history operations of `PostgresStore` (its pool)."""

    pool: asyncpg.Pool

    async def stream_began(self, space: str, peer: str, object_id: str, resumed: bool) -> int:
        row = await self.pool.fetchval(
            "INSERT INTO history_subscriptions (space, peer, object_id, began, resumed) "
            f"VALUES ($1, $2, $3, {_UNIX}, $4) RETURNING id",
            space,
            peer,
            object_id,
            resumed,
        )
        return int(row)

    async def stream_ended(self, row: int) -> None:
        await self.pool.execute(
            f"UPDATE history_subscriptions SET ended = {_UNIX} WHERE id = $1", row
        )

    async def trigger_history(self, space: str, tid: str) -> TriggerHistory:
        async with self.pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
            since = await conn.fetchval("SELECT value FROM history_meta WHERE name = 'since'")
            now: datetime = await conn.fetchval("SELECT clock_timestamp()")
            rows = await conn.fetch(
                "SELECT rev, seq, at, op, actor, note, changes, record FROM history_revisions "
                "WHERE space = $1 AND trigger_id = $2 ORDER BY rev",
                space,
                tid,
            )
            row = await conn.fetchrow(
                "SELECT rev, body FROM triggers WHERE space = $1 AND id = $2", space, tid
            )
        return TriggerHistory(
            began=datetime.fromtimestamp(float(since or 0.0), UTC),
            now=now,
            revisions=recall.revisions_of(rows),
            stored=None if row is None else (row["rev"], row["body"]),
        )

    async def slot_history(
        self, space: str, tid: str, key: str, slot: float, bridge: float
    ) -> SlotHistory:
        low, high = slot - AROUND, slot + AROUND
        async with self.pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
            claimed = await conn.fetchrow(f"{_CLAIM} AND key = $3", space, tid, key)
            claim = None if claimed is None else recall.claim_of(claimed)
            terms = await conn.fetch(_TERMS, space, slot + bridge, low)
            earlier = await conn.fetch(_WINDOWS_EARLIER, space, low)
            near = await conn.fetch(_WINDOWS_NEAR, space, high, low)
            applied = await conn.fetch(_APPLIED_LAST, space, slot)
            after = await conn.fetch(_APPLIED_AFTER, space, slot, high)
            before = await conn.fetch(_OFFSETS_BEFORE, space, low)
            offsets = await conn.fetch(_OFFSETS_NEAR, space, low, high)
            retries = await conn.fetch(  # the keys that begin `<key>#`, in byte order
                f'{_CLAIM} AND key COLLATE "C" > $3 AND key COLLATE "C" < $4',
                space,
                tid,
                key + "#",
                key + "$",
            )
            refusals = await conn.fetch(
                "SELECT at, peer, term, code, detail FROM history_refusals "
                "WHERE space = $1 AND trigger_id = $2 AND key = $3 ORDER BY at",
                space,
                tid,
                key,
            )
            run = await _run(conn, space, tid, key, None if claim is None else claim.run_id, slot)
        return SlotHistory(
            terms=recall.terms_of(terms),
            windows=recall.windows_of([*earlier, *near]),
            applied=recall.applied_of([*applied, *after]),
            offsets=recall.offsets_of([*before, *offsets]),
            claim=claim,
            refusals=recall.refusals_of(refusals),
            retries=recall.retries_of(retries),
            run=run,
        )

    async def chat_message(
        self, object_id: str, at: float, message_id: str | None
    ) -> f.MessageFact | None:
        columns = "SELECT message_id, created_ts, body FROM chat_messages"
        if message_id is not None:
            row = await self.pool.fetchrow(f"{columns} WHERE message_id = $1", message_id)
        else:
            row = await self.pool.fetchrow(
                f"{columns} WHERE object_id = $1 AND created_ts <= $2 ORDER BY seq DESC LIMIT 1",
                object_id,
                at,
            )
        return recall.message_of(row)

    async def chat_streams(self, space: str, object_id: str, at: float) -> list[f.Subscription]:
        rows = await self.pool.fetch(
            "SELECT peer, began, ended, resumed FROM history_subscriptions WHERE space = $1 "
            "AND object_id = $2 AND began <= $3 AND (ended IS NULL OR ended >= $4) ORDER BY began",
            space,
            object_id,
            at + AROUND,
            at - AROUND,
        )
        return recall.subscriptions_of(rows)

    async def chat_turn(
        self, space: str, object_id: str, message_id: str, accepted: float
    ) -> dict[str, Any] | None:
        rows = await self.pool.fetch(
            "SELECT body FROM agent_turns WHERE space = $1 AND object_id = $2 "
            "AND started_at >= $3 AND started_at <= $4 ORDER BY seq LIMIT 200",
            space,
            object_id,
            accepted - 1,
            accepted + SCAN,
        )
        return recall.first_of(rows, lambda doc: message_id in (doc.get("messageIds") or []))

    async def done_at(self, space: str, tid: str, max_runs: int) -> datetime | None:
        started = await self.pool.fetchval(
            "SELECT started_at FROM fires WHERE space = $1 AND trigger_id = $2 AND status = 'ok' "
            "AND started_at IS NOT NULL ORDER BY started_at LIMIT 1 OFFSET $3",
            space,
            tid,
            max_runs - 1,
        )
        return None if started is None else datetime.fromtimestamp(started, UTC)

    async def prune_history(self, days: float, claims_days: float) -> int:
        gone = 0
        async with self.pool.acquire() as conn, conn.transaction():
            now = float(await conn.fetchval(f"SELECT {_UNIX}"))
            cutoff, claims = now - days * 86400, now - claims_days * 86400
            for table, which in _PRUNED.items():
                sql = _PRUNE.format(t=table, c=which, n=BATCH)
                gone += _count(await conn.execute(sql, cutoff))
            sql = _PRUNE.format(t="fires", c="claimed_at < to_timestamp($1)", n=BATCH)
            gone += _count(await conn.execute(sql, claims))
        return gone

    async def backfill(
        self, space: str, tid: str, slots: BackfillSlots, stamp: BackfillStamp
    ) -> tuple[list[str], int]:
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                "SELECT rev, body FROM triggers WHERE space = $1 AND id = $2 FOR UPDATE", space, tid
            )
            rev, record = trigger_store.parsed(space, tid, None if row is None else tuple(row))
            now: datetime = await conn.fetchval("SELECT clock_timestamp()")
            keys = slots(record, now)
            claimed = await conn.fetch(
                "SELECT key FROM fires WHERE space = $1 AND trigger_id = $2 AND key = ANY($3)",
                space,
                tid,
                keys,
            )
            taken = {r["key"] for r in claimed}
            fresh = [k for k in keys if k not in taken]
            stamps = stamp(fresh, now)
            new = None if stamps is None else trigger_store.stamped(tid, rev, record, stamps)
            if new is not None:
                text = iso(now)
                await _write(conn, space, new, "stamp", Instant(text, _unix(text)))
        return fresh, len(keys) - len(fresh)


async def _run(
    conn: asyncpg.Connection, space: str, tid: str, key: str, run_id: str | None, slot: float
) -> dict[str, Any] | None:
    """As `recall.run`: by its run id, else looked for after the slot."""
    if run_id is not None:
        rows = await conn.fetch(
            "SELECT body FROM runs WHERE space = $1 AND run_id = $2", space, run_id
        )
    else:
        rows = await conn.fetch(
            "SELECT body FROM runs WHERE space = $1 AND trigger_id = $2 "
            "AND started_at >= $3 AND started_at <= $4 ORDER BY seq LIMIT 100",
            space,
            tid,
            slot - 1,
            slot + SCAN,
        )
    return recall.first_of(rows, lambda doc: doc.get("key") == key)


def _unix(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def _count(status: str) -> int:
    return int(status.rsplit(" ", 1)[-1])
