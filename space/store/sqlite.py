"""The embedded store behind the seam: today's SQLite tables and code, by the server's clock.

Owns adapting the sync area modules (`leases`, `fires`, `trigger_store`, `chat_store`)
to `Store`; the SQL stays in those modules, so the routes that still use them directly
answer the same. Each call is one unit of work (`_Work`) run whole on the app's database
thread (`space.dbthread`), one `BEGIN IMMEDIATE` transaction (a savepoint inside an open
one); the async method is a one-line wrapper of it. Must not hold SQL of its own.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec
import sqlite_utils

from core.chatwire import Message, MessageIn
from core.wire import FireIn
from space import change_log, chat_store, fires, leases, trigger_store
from space.chat_store import Chat
from space.db import transaction
from space.dbthread import DbThread
from space.history import Author
from space.servertime import ServerClock, iso
from space.store import Claimed, ClaimIn, LeaseChange, LeaseStep, Stale, Taken
from space.trigger_store import Record


class _Work:
    """The store's calls as units of work, each run whole on the database thread."""

    def __init__(self, clock: ServerClock) -> None:
        self.clock = clock

    def lease(self, db: sqlite_utils.Database, space: str) -> tuple[leases.Lease, datetime]:
        return leases.load(db, space), self.clock()

    def change_lease(self, db: sqlite_utils.Database, space: str, step: LeaseStep) -> LeaseChange:
        now = self.clock()
        with transaction(db):
            lease = leases.load(db, space)
            try:
                new: leases.Lease | None = step(lease, now)
            except leases.Conflict:
                new = None
            if new is not None:
                leases.store(db, space, new)
                leases.remember(db, space, lease, new, now)
        return LeaseChange(lease, new, now)

    def claim(self, db: sqlite_utils.Database, claim: ClaimIn) -> Claimed | Taken | Stale:
        now = self.clock()
        fire = FireIn(
            triggerId=claim.trigger_id,
            key=claim.key,
            term=claim.term,
            peer=claim.peer,
            claimId=claim.claim_id or None,
        )
        with transaction(db):
            if claim.floating:
                lease = leases.load(db, claim.space)
                if not leases.holds(lease, claim.peer, claim.term, now):
                    return Stale(lease, now)
            return fires.take(db, claim.space, fire, iso(now))

    def claim_fire(
        self, db: sqlite_utils.Database, space: str, fire: FireIn, margin: float
    ) -> dict[str, Any]:
        return fires.claim_single(db, space, fire, self.clock(), margin)

    def claim_list(
        self, db: sqlite_utils.Database, space: str, batch: list[FireIn], margin: float
    ) -> list[dict[str, Any]]:
        return fires.claim_list(db, space, batch, self.clock(), margin)

    def fires_page(
        self, db: sqlite_utils.Database, space: str, trigger: str | None, limit: int
    ) -> list[dict[str, Any]]:
        return fires.recent(db, space, trigger, limit)

    def append_change(
        self,
        db: sqlite_utils.Database,
        space: str,
        trigger_id: str,
        op: str,
        rev: int,
        body: str | None,
        at: str,
        writer: str = "",
    ) -> int:
        with transaction(db):
            return change_log.append(db, space, trigger_id, op, rev, body, at, writer)

    def changes_since(
        self, db: sqlite_utils.Database, space: str, since: int, limit: int, omit: str = ""
    ) -> list[dict[str, Any]]:
        return change_log.since(db, space, since, limit, omit)

    def record_row(self, db: sqlite_utils.Database, space: str, tid: str) -> tuple[int, str] | None:
        return trigger_store.stored_row(db, space, tid)

    def latest_seq(self, db: sqlite_utils.Database, space: str) -> int:
        return change_log.latest(db, space)

    def records_page(
        self, db: sqlite_utils.Database, space: str, after: str, limit: int, *, stored: bool
    ) -> tuple[list[Record | msgspec.Raw], str | None]:
        return trigger_store.listing_page(db, space, after, limit, stored=stored)

    def create_record(
        self, db: sqlite_utils.Database, space: str, body: Record, by: Author
    ) -> Record:
        return trigger_store.create(db, space, body, self._now(), by)

    def create_reserved_record(
        self, db: sqlite_utils.Database, space: str, tid: str, body: Record, by: Author
    ) -> tuple[Record, bool]:
        return trigger_store.create_reserved(db, space, tid, body, self._now(), by)

    def patch_record(
        self,
        db: sqlite_utils.Database,
        space: str,
        tid: str,
        changes: Record,
        if_match: int | None,
        by: Author,
    ) -> Record:
        return trigger_store.patch(db, space, tid, changes, self._now(), if_match, by)

    def ask_run(
        self, db: sqlite_utils.Database, space: str, tid: str, if_match: int | None, by: Author
    ) -> Record:
        return trigger_store.ask_run(db, space, tid, self._now(), if_match, by)

    def stamp_record(
        self, db: sqlite_utils.Database, space: str, tid: str, stamps: Record, if_match: int | None
    ) -> tuple[Record, bool]:
        record, seq = trigger_store.stamp(db, space, tid, stamps, self._now(), if_match)
        return record, seq > 0

    def delete_record(
        self, db: sqlite_utils.Database, space: str, tid: str, if_match: int | None, by: Author
    ) -> None:
        trigger_store.delete(db, space, tid, self._now(), if_match, by)

    def _now(self) -> str:
        return iso(self.clock())

    def create_chat(self, db: sqlite_utils.Database, space: str, name: str) -> Chat:
        return chat_store.create_chat(db, space, name, now=self.clock().timestamp())

    def add_message(
        self, db: sqlite_utils.Database, space: str, object_id: str, msg: MessageIn
    ) -> tuple[Message, bytes]:
        now = self.clock().timestamp()
        return chat_store.add_message(db, space, object_id, msg, now=now)

    def messages_since(
        self, db: sqlite_utils.Database, object_id: str, after: int, limit: int
    ) -> list[tuple[int, str]]:
        return chat_store.page(db, object_id, after, limit)


class SqliteStore:
    def __init__(self, thread: DbThread, clock: ServerClock) -> None:
        self.thread = thread
        self.clock = clock
        self._work = _Work(clock)

    async def lease(self, space: str) -> tuple[leases.Lease, datetime]:
        return await self.thread.call(self._work.lease, space)

    async def change_lease(self, space: str, step: LeaseStep) -> LeaseChange:
        return await self.thread.call(self._work.change_lease, space, step)

    async def claim(self, claim: ClaimIn) -> Claimed | Taken | Stale:
        return await self.thread.call(self._work.claim, claim)

    async def claim_fire(self, space: str, fire: FireIn, margin: float) -> dict[str, Any]:
        return await self.thread.call(self._work.claim_fire, space, fire, margin)

    async def claim_list(
        self, space: str, batch: list[FireIn], margin: float
    ) -> list[dict[str, Any]]:
        return await self.thread.call(self._work.claim_list, space, batch, margin)

    async def fires_page(self, space: str, trigger: str | None, limit: int) -> list[dict[str, Any]]:
        return await self.thread.call(self._work.fires_page, space, trigger, limit)

    async def append_change(
        self,
        space: str,
        trigger_id: str,
        op: str,
        rev: int,
        body: str | None,
        at: str,
        writer: str = "",
    ) -> int:
        return await self.thread.call(
            self._work.append_change, space, trigger_id, op, rev, body, at, writer
        )

    async def changes_since(
        self, space: str, since: int, limit: int, omit: str = ""
    ) -> list[dict[str, Any]]:
        return await self.thread.call(self._work.changes_since, space, since, limit, omit)

    async def record_row(self, space: str, tid: str) -> tuple[int, str] | None:
        return await self.thread.call(self._work.record_row, space, tid)

    async def latest_seq(self, space: str) -> int:
        return await self.thread.call(self._work.latest_seq, space)

    async def records_page(
        self, space: str, after: str, limit: int, *, stored: bool
    ) -> tuple[list[Record | msgspec.Raw], str | None]:
        return await self.thread.call(self._work.records_page, space, after, limit, stored=stored)

    async def create_record(self, space: str, body: Record, by: Author) -> Record:
        return await self.thread.call(self._work.create_record, space, body, by)

    async def create_reserved_record(
        self, space: str, tid: str, body: Record, by: Author
    ) -> tuple[Record, bool]:
        return await self.thread.call(self._work.create_reserved_record, space, tid, body, by)

    async def patch_record(
        self, space: str, tid: str, changes: Record, if_match: int | None, by: Author
    ) -> Record:
        return await self.thread.call(self._work.patch_record, space, tid, changes, if_match, by)

    async def ask_run(self, space: str, tid: str, if_match: int | None, by: Author) -> Record:
        return await self.thread.call(self._work.ask_run, space, tid, if_match, by)

    async def stamp_record(
        self, space: str, tid: str, stamps: Record, if_match: int | None
    ) -> tuple[Record, bool]:
        return await self.thread.call(self._work.stamp_record, space, tid, stamps, if_match)

    async def delete_record(self, space: str, tid: str, if_match: int | None, by: Author) -> None:
        return await self.thread.call(self._work.delete_record, space, tid, if_match, by)

    async def create_chat(self, space: str, name: str) -> Chat:
        return await self.thread.call(self._work.create_chat, space, name)

    async def add_message(
        self, space: str, object_id: str, msg: MessageIn
    ) -> tuple[Message, bytes]:
        return await self.thread.call(self._work.add_message, space, object_id, msg)

    async def messages_since(self, object_id: str, after: int, limit: int) -> list[tuple[int, str]]:
        return await self.thread.call(self._work.messages_since, object_id, after, limit)

    async def close(self) -> None:
        """The database is the app's: closed at its cleanup."""
