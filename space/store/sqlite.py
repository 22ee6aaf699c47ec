"""The embedded store behind the seam: today's SQLite tables and code, by the server's clock.

Owns adapting the sync area modules (`leases`, `fires`, `trigger_store`, `chat_store`)
to `Store`; the SQL stays in those modules, so the routes that still use them directly
answer the same.
Each call is one `BEGIN IMMEDIATE` transaction (a savepoint inside an open one). Must
not hold SQL of its own.
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
    fires,
    leases,
    programs,
    token_store,
    trigger_store,
)
from space.chat_store import Chat
from space.db import transaction
from space.history import Author
from space.programs import Publication
from space.servertime import ServerClock, iso
from space.store import Claimed, ClaimIn, LeaseChange, LeaseStep, Stale, Taken
from space.token_store import Principal
from space.trigger_store import Record


class SqliteStore:
    def __init__(self, db: sqlite_utils.Database, clock: ServerClock) -> None:
        self.db = db
        self.clock = clock

    async def lease(self, space: str) -> tuple[leases.Lease, datetime]:
        return leases.load(self.db, space), self.clock()

    async def change_lease(self, space: str, step: LeaseStep) -> LeaseChange:
        now = self.clock()
        with transaction(self.db):
            lease = leases.load(self.db, space)
            try:
                new: leases.Lease | None = step(lease, now)
            except leases.Conflict:
                new = None
            if new is not None:
                leases.store(self.db, space, new)
                leases.remember(self.db, space, lease, new, now)
        return LeaseChange(lease, new, now)

    async def claim(self, claim: ClaimIn) -> Claimed | Taken | Stale:
        now = self.clock()
        fire = FireIn(
            triggerId=claim.trigger_id,
            key=claim.key,
            term=claim.term,
            peer=claim.peer,
            claimId=claim.claim_id or None,
        )
        with transaction(self.db):
            if claim.floating:
                lease = leases.load(self.db, claim.space)
                if not leases.holds(lease, claim.peer, claim.term, now):
                    return Stale(lease, now)
            return fires.take(self.db, claim.space, fire, iso(now))

    async def claim_fire(self, space: str, fire: FireIn, margin: float) -> dict[str, Any]:
        return fires.claim_single(self.db, space, fire, self.clock(), margin)

    async def claim_list(
        self, space: str, batch: list[FireIn], margin: float
    ) -> list[dict[str, Any]]:
        return fires.claim_list(self.db, space, batch, self.clock(), margin)

    async def fires_page(self, space: str, trigger: str | None, limit: int) -> list[dict[str, Any]]:
        return fires.recent(self.db, space, trigger, limit)

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
        with transaction(self.db):
            return change_log.append(self.db, space, trigger_id, op, rev, body, at, writer)

    async def changes_since(
        self, space: str, since: int, limit: int, omit: str = ""
    ) -> list[dict[str, Any]]:
        return change_log.since(self.db, space, since, limit, omit)

    async def record_row(self, space: str, tid: str) -> tuple[int, str] | None:
        return trigger_store.stored_row(self.db, space, tid)

    async def latest_seq(self, space: str) -> int:
        return change_log.latest(self.db, space)

    async def records_page(
        self, space: str, after: str, limit: int, *, stored: bool
    ) -> tuple[list[Record | msgspec.Raw], str | None]:
        return trigger_store.listing_page(self.db, space, after, limit, stored=stored)

    async def create_record(self, space: str, body: Record, by: Author) -> Record:
        return trigger_store.create(self.db, space, body, self._now(), by)

    async def create_reserved_record(
        self, space: str, tid: str, body: Record, by: Author
    ) -> tuple[Record, bool]:
        return trigger_store.create_reserved(self.db, space, tid, body, self._now(), by)

    async def patch_record(
        self, space: str, tid: str, changes: Record, if_match: int | None, by: Author
    ) -> Record:
        return trigger_store.patch(self.db, space, tid, changes, self._now(), if_match, by)

    async def ask_run(self, space: str, tid: str, if_match: int | None, by: Author) -> Record:
        return trigger_store.ask_run(self.db, space, tid, self._now(), if_match, by)

    async def stamp_record(
        self, space: str, tid: str, stamps: Record, if_match: int | None
    ) -> tuple[Record, bool]:
        record, seq = trigger_store.stamp(self.db, space, tid, stamps, self._now(), if_match)
        return record, seq > 0

    async def delete_record(self, space: str, tid: str, if_match: int | None, by: Author) -> None:
        trigger_store.delete(self.db, space, tid, self._now(), if_match, by)

    def _now(self) -> str:
        return iso(self.clock())

    async def create_chat(self, space: str, name: str) -> Chat:
        return chat_store.create_chat(self.db, space, name, now=self.clock().timestamp())

    async def add_message(
        self, space: str, object_id: str, msg: MessageIn
    ) -> tuple[Message, bytes]:
        now = self.clock().timestamp()
        return chat_store.add_message(self.db, space, object_id, msg, now=now)

    async def messages_since(self, object_id: str, after: int, limit: int) -> list[tuple[int, str]]:
        return chat_store.page(self.db, object_id, after, limit)

    async def mint_token(self, who: Principal) -> str:
        return token_store.mint_token(self.db, who, self.clock().timestamp())

    async def lookup_token(self, token: str) -> Principal:
        return token_store.lookup(self.db, token, self.clock().timestamp())

    async def list_tokens(self, *, everything: bool = False) -> list[dict[str, Any]]:
        return token_store.listing(self.db, self.clock().timestamp(), everything=everything)

    async def revoke_token(self, tid: str) -> dict[str, Any] | None:
        now = self.clock().timestamp()
        with transaction(self.db):
            return token_store.revoke(self.db, tid, now)

    async def rotate_admin(self, path: Path | None) -> str:
        now = self.clock().timestamp()
        with transaction(self.db):  # the file is rewritten before the commit: both or neither
            return token_store.rotate_admin(self.db, path, now)

    async def ensure_admin_token(self, path: Path) -> None:
        token_store.ensure_admin_token(self.db, path, self.clock().timestamp())

    async def mint_run_token(
        self, space: str, trigger_id: str, run_id: str, ttl: float, peer: str | None
    ) -> tuple[str, datetime]:
        now = self.clock()
        expires = now + timedelta(seconds=ttl)
        with transaction(self.db):
            token = token_store.mint_run(
                self.db, space, trigger_id, run_id, now.timestamp(), expires.timestamp(), peer
            )
        return token, expires

    async def end_run_tokens(self, space: str, run_ids: list[str], peer: str | None = None) -> int:
        now = self.clock().timestamp()
        with transaction(self.db):
            return token_store.revoke_runs(self.db, space, run_ids, now, peer)

    async def fire_claim(self, space: str, trigger_id: str, key: str) -> tuple[str, int] | None:
        return fires.claim_of(self.db, space, trigger_id, key)

    async def heartbeat(
        self, space: str, peer: str, beat: HeartbeatIn, window: float
    ) -> tuple[dict[str, Any], datetime]:
        now = self.clock()
        devices.heartbeat(self.db, space, peer, beat, now.timestamp(), window)
        return devices.row(self.db, space, peer) or {}, now

    async def devices(self, space: str) -> tuple[list[dict[str, Any]], datetime]:
        return devices.rows(self.db, space), self.clock()

    async def last_seen(self, space: str, peer: str, window: float) -> tuple[bool, str | None]:
        return devices.last_seen(self.db, space, peer, self.clock(), window)

    async def publish_program(self, pub: Publication) -> tuple[dict[str, Any], bool]:
        return programs.publish(self.db, pub, self._now())

    async def program(self, space: str, name: str, version: int) -> dict[str, Any] | None:
        return programs.find(self.db, space, name, version)

    async def programs(self, space: str) -> list[dict[str, Any]]:
        return programs.rows(self.db, space)

    async def close(self) -> None:
        """The database is the app's: closed at its cleanup."""
