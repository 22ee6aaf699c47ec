"""The embedded store's units of work: each `SqliteStore` call, sync, taking the connection.

Owns what one call of the seam does on the SQLite file: one unit, run whole on the app's
database thread (`space.dbthread`), one `BEGIN IMMEDIATE` transaction (a savepoint inside an
open one). The SQL stays in the area modules. Must not be called on the event loop.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import sqlite_utils

from core.chatwire import Message, MessageIn
from core.peerwire import HeartbeatIn
from core.wire import FireIn
from space import (
    change_log,
    chat_store,
    devices,
    duties,
    fires,
    leases,
    programs,
    token_store,
    trigger_store,
)
from space.change_log import Change
from space.chat_store import Chat
from space.db import transaction
from space.history import Author
from space.programs import Publication
from space.servertime import ServerClock, iso
from space.store import Claimed, ClaimIn, LeaseChange, LeaseStep, Stale, Taken
from space.token_store import Principal
from space.trigger_store import Record


class Work:
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

    def append_change(self, db: sqlite_utils.Database, change: Change) -> int:
        with transaction(db):
            return change_log.append(db, change)

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
        self,
        db: sqlite_utils.Database,
        space: str,
        tid: str,
        stamps: Record,
        if_match: int | None,
        who: Principal | None,
    ) -> tuple[Record, bool]:
        with transaction(db):
            held = duties.stamp_target(db, who, space, tid, self.clock())
            trigger_store.check_rev(held[0], if_match)
            record, seq = trigger_store.stamp_over(db, space, tid, held, stamps, self._now())
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
        with transaction(db):  # the instant read under the write lock: it grows with seq
            now = self.clock().timestamp()
            return chat_store.add_message(db, space, object_id, msg, now=now)

    def messages_since(
        self, db: sqlite_utils.Database, object_id: str, after: int, limit: int
    ) -> list[tuple[int, str]]:
        return chat_store.page(db, object_id, after, limit)

    def mint_token(self, db: sqlite_utils.Database, who: Principal) -> str:
        return token_store.mint_token(db, who, self.clock().timestamp())

    def lookup_token(self, db: sqlite_utils.Database, token: str) -> Principal:
        return token_store.lookup(db, token, self.clock().timestamp())

    def list_tokens(
        self, db: sqlite_utils.Database, *, everything: bool = False
    ) -> list[dict[str, Any]]:
        return token_store.listing(db, self.clock().timestamp(), everything=everything)

    def revoke_token(self, db: sqlite_utils.Database, tid: str) -> dict[str, Any] | None:
        now = self.clock().timestamp()
        with transaction(db):
            return token_store.revoke(db, tid, now)

    def rotate_admin(self, db: sqlite_utils.Database, path: Path | None) -> str:
        now = self.clock().timestamp()
        with transaction(db):  # the file is rewritten before the commit: both or neither
            return token_store.rotate_admin(db, path, now)

    def ensure_admin_token(self, db: sqlite_utils.Database, path: Path) -> None:
        token_store.ensure_admin_token(db, path, self.clock().timestamp())

    def mint_run_token(
        self,
        db: sqlite_utils.Database,
        space: str,
        trigger_id: str,
        run_id: str,
        ttl: float,
        peer: str | None,
    ) -> tuple[str, datetime]:
        now = self.clock()
        expires = now + timedelta(seconds=ttl)
        with transaction(db):
            token = token_store.mint_run(
                db, space, trigger_id, run_id, now.timestamp(), expires.timestamp(), peer
            )
        return token, expires

    def end_run_tokens(
        self, db: sqlite_utils.Database, space: str, run_ids: list[str], peer: str | None
    ) -> int:
        now = self.clock().timestamp()
        with transaction(db):
            return token_store.revoke_runs(db, space, run_ids, now, peer)

    def fire_claim(
        self, db: sqlite_utils.Database, space: str, trigger_id: str, key: str
    ) -> tuple[str, int] | None:
        return fires.claim_of(db, space, trigger_id, key)

    def heartbeat(
        self, db: sqlite_utils.Database, space: str, peer: str, beat: HeartbeatIn, window: float
    ) -> tuple[dict[str, Any], datetime]:
        now = self.clock()
        devices.heartbeat(db, space, peer, beat, now.timestamp(), window)
        return devices.row(db, space, peer) or {}, now

    def devices(
        self, db: sqlite_utils.Database, space: str
    ) -> tuple[list[dict[str, Any]], datetime]:
        return devices.rows(db, space), self.clock()

    def last_seen(
        self, db: sqlite_utils.Database, space: str, peer: str, window: float
    ) -> tuple[bool, str | None]:
        return devices.last_seen(db, space, peer, self.clock(), window)

    def publish_program(
        self, db: sqlite_utils.Database, pub: Publication
    ) -> tuple[dict[str, Any], bool]:
        return programs.publish(db, pub, self._now())

    def program(
        self, db: sqlite_utils.Database, space: str, name: str, version: int
    ) -> dict[str, Any] | None:
        return programs.find(db, space, name, version)

    def programs(self, db: sqlite_utils.Database, space: str) -> list[dict[str, Any]]:
        return programs.rows(db, space)
