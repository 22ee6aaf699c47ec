"""The embedded store's units of work for history, spaces and the scrape: sync, on the thread.

Owns what the seam's history calls (`why`'s reads, the prune, a backfill), the spaces'
calls and a `/metrics` scrape do on the SQLite file: each one unit, run whole on the app's
database thread (`space.dbthread`). The SQL stays in the area modules (`recall`, `forget`,
`spaces`, `scrape`, `trigger_store`, `fires`). Must not be called on the event loop.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlite_utils

from space import chat_store, fires, forget, history, recall, scrape, trigger_store
from space.db import transaction
from space.recall import SlotHistory, TriggerHistory
from space.servertime import ServerClock, iso
from space.store import BackfillSlots, BackfillStamp
from triggers import facts as f


class HistoryWork:
    """The history, spaces and scrape calls of `SqliteStore` as units of work."""

    def __init__(self, clock: ServerClock) -> None:
        self.clock = clock

    def trigger_history(self, db: sqlite_utils.Database, space: str, tid: str) -> TriggerHistory:
        return TriggerHistory(
            began=datetime.fromtimestamp(history.began(db), UTC),
            now=self.clock(),
            revisions=recall.revisions(db, space, tid),
            stored=trigger_store.stored_row(db, space, tid),
        )

    def slot_history(
        self, db: sqlite_utils.Database, space: str, tid: str, key: str, slot: float, bridge: float
    ) -> SlotHistory:
        found = recall.claim(db, space, tid, key)
        return SlotHistory(
            terms=recall.terms(db, space, slot, bridge),
            windows=recall.windows(db, space, slot),
            applied=recall.applied(db, space, slot),
            offsets=recall.offsets(db, space, slot),
            claim=found,
            refusals=recall.refusals(db, space, tid, key),
            retries=recall.retries(db, space, tid, key),
            run=recall.run(db, space, tid, key, None if found is None else found.run_id, slot),
        )

    def chat_message(
        self, db: sqlite_utils.Database, object_id: str, at: float, message_id: str | None
    ) -> f.MessageFact | None:
        return recall.message(db, object_id, at, message_id)

    def chat_streams(
        self, db: sqlite_utils.Database, space: str, object_id: str, at: float
    ) -> list[f.Subscription]:
        return recall.subscriptions(db, space, object_id, at)

    def chat_turn(
        self, db: sqlite_utils.Database, space: str, object_id: str, message_id: str, at: float
    ) -> dict[str, Any] | None:
        return recall.turn(db, space, object_id, message_id, at)

    def done_at(
        self, db: sqlite_utils.Database, space: str, tid: str, max_runs: int
    ) -> datetime | None:
        return recall.done_at(db, space, tid, max_runs)

    def prune_history(self, db: sqlite_utils.Database, days: float, claims_days: float) -> int:
        now = self.clock()
        cutoff, claims = forget.cutoffs(now, days, claims_days)
        return forget.prune_batch(db, cutoff, claims, now.timestamp())

    def backfill(
        self,
        db: sqlite_utils.Database,
        space: str,
        tid: str,
        slots: BackfillSlots,
        stamp: BackfillStamp,
    ) -> tuple[list[str], int]:
        now = self.clock()
        with transaction(db):
            keys = slots(trigger_store.current(db, space, tid)[1], now)
            fresh = [k for k in keys if fires.claim_of(db, space, tid, k) is None]
            stamps = stamp(fresh, now)
            if stamps is not None:
                trigger_store.stamp(db, space, tid, stamps, iso(now))
        return fresh, len(keys) - len(fresh)

    def scrape(self, db: sqlite_utils.Database) -> scrape.Scrape:
        return scrape.read(db, self.clock())

    def messages_accepted(
        self, db: sqlite_utils.Database, message_ids: list[str]
    ) -> dict[str, str | None]:
        return {key: chat_store.created_at(db, key) for key in message_ids}

    def stream_began(
        self, db: sqlite_utils.Database, space: str, peer: str, object_id: str, resumed: bool
    ) -> int:
        with transaction(db):
            return history.subscribed(db, space, peer, object_id, self.clock().timestamp(), resumed)

    def stream_ended(self, db: sqlite_utils.Database, row: int) -> None:
        with transaction(db):
            history.unsubscribed(db, row, self.clock().timestamp())
