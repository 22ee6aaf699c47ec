"""The embedded store behind the seam: today's SQLite tables and code, by the server's clock.

Owns adapting the sync area modules (`leases`, `fires`, `trigger_store`, `chat_store`,
`token_store`, `devices`, `programs`) to `Store`; the SQL stays in those modules. Each call
is one unit of work (`sqlite_work.Work`, taking `db`) run whole on the app's database thread
(`space.dbthread`), one `BEGIN IMMEDIATE` transaction (a savepoint inside an open one); the
async method is a one-line wrapper of it. Must not hold SQL of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import sqlite_utils

from core.chatwire import Message, MessageEdit, MessageIn
from core.peerwire import HeartbeatIn
from core.wire import FireIn, RunIn, Space, TurnIn
from space import (
    chat_store,
    devices,
    fires,
    history,
    idempotency,
    leases,
    programs,
    runs,
    spaces,
    state,
    token_store,
    trigger_store,
    turns,
)
from space.appstate import RunRetention
from space.change_log import Change
from space.chat_store import Chat
from space.dbthread import DbThread
from space.history import Author
from space.programs import Publication
from space.recall import SlotHistory, TriggerHistory
from space.scrape import Scrape
from space.servertime import ServerClock
from space.store import (
    BackfillSlots,
    BackfillStamp,
    Claimed,
    ClaimIn,
    LeaseChange,
    LeaseStep,
    Stale,
    Taken,
)
from space.store.logwire import Kept, LogQuery, Poster, RunPosted, RunsPosted
from space.store.sqlite_chats import ChatWork
from space.store.sqlite_history import HistoryWork
from space.store.sqlite_runs import RunWork
from space.store.sqlite_work import Work
from space.token_store import Principal
from space.trigger_store import Record
from triggers import facts as f


class SqliteStore:
    def __init__(self, thread: DbThread, clock: ServerClock) -> None:
        self.thread = thread
        self.clock = clock
        self._work = Work(clock)
        self._history = HistoryWork(clock)
        self._runs = RunWork(clock)
        self._chats = ChatWork(clock)

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

    async def append_change(self, change: Change) -> int:
        return await self.thread.call(self._work.append_change, change)

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
        self, space: str, tid: str, stamps: Record, if_match: int | None, who: Principal | None
    ) -> tuple[Record, bool]:
        return await self.thread.call(self._work.stamp_record, space, tid, stamps, if_match, who)

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

    async def mint_token(self, who: Principal) -> str:
        return await self.thread.call(self._work.mint_token, who)

    async def lookup_token(self, token: str) -> Principal:
        return await self.thread.call(self._work.lookup_token, token)

    async def list_tokens(self, *, everything: bool = False) -> list[dict[str, Any]]:
        return await self.thread.call(self._work.list_tokens, everything=everything)

    async def revoke_token(self, tid: str) -> dict[str, Any] | None:
        return await self.thread.call(self._work.revoke_token, tid)

    async def rotate_admin(self, path: Path | None) -> str:
        return await self.thread.call(self._work.rotate_admin, path)

    async def ensure_admin_token(self, path: Path) -> None:
        return await self.thread.call(self._work.ensure_admin_token, path)

    async def mint_run_token(
        self, space: str, trigger_id: str, run_id: str, ttl: float, peer: str | None
    ) -> tuple[str, datetime]:
        return await self.thread.call(
            self._work.mint_run_token, space, trigger_id, run_id, ttl, peer
        )

    async def end_run_tokens(self, space: str, run_ids: list[str], peer: str | None = None) -> int:
        return await self.thread.call(self._work.end_run_tokens, space, run_ids, peer)

    async def fire_claim(self, space: str, trigger_id: str, key: str) -> tuple[str, int] | None:
        return await self.thread.call(self._work.fire_claim, space, trigger_id, key)

    async def heartbeat(
        self, space: str, peer: str, beat: HeartbeatIn, window: float
    ) -> tuple[dict[str, Any], datetime]:
        return await self.thread.call(self._work.heartbeat, space, peer, beat, window)

    async def devices(self, space: str) -> tuple[list[dict[str, Any]], datetime]:
        return await self.thread.call(self._work.devices, space)

    async def last_seen(self, space: str, peer: str, window: float) -> tuple[bool, str | None]:
        return await self.thread.call(self._work.last_seen, space, peer, window)

    async def publish_program(self, pub: Publication) -> tuple[dict[str, Any], bool]:
        return await self.thread.call(self._work.publish_program, pub)

    async def program(self, space: str, name: str, version: int) -> dict[str, Any] | None:
        return await self.thread.call(self._work.program, space, name, version)

    async def programs(self, space: str) -> list[dict[str, Any]]:
        return await self.thread.call(self._work.programs, space)

    # --- history: why, forget, backfill; spaces; the scrape's reads (issue 22, pghistory) ---
    async def trigger_history(self, space: str, tid: str) -> TriggerHistory:
        return await self.thread.call(self._history.trigger_history, space, tid)

    async def slot_history(
        self, space: str, tid: str, key: str, slot: float, bridge: float
    ) -> SlotHistory:
        return await self.thread.call(self._history.slot_history, space, tid, key, slot, bridge)

    async def chat_message(
        self, object_id: str, at: float, message_id: str | None
    ) -> f.MessageFact | None:
        return await self.thread.call(self._history.chat_message, object_id, at, message_id)

    async def chat_streams(self, space: str, object_id: str, at: float) -> list[f.Subscription]:
        return await self.thread.call(self._history.chat_streams, space, object_id, at)

    async def chat_turn(
        self, space: str, object_id: str, message_id: str, accepted: float
    ) -> dict[str, Any] | None:
        return await self.thread.call(
            self._history.chat_turn, space, object_id, message_id, accepted
        )

    async def done_at(self, space: str, tid: str, max_runs: int) -> datetime | None:
        return await self.thread.call(self._history.done_at, space, tid, max_runs)

    async def prune_history(self, days: float, claims_days: float) -> int:
        return await self.thread.call(self._history.prune_history, days, claims_days)

    async def backfill(
        self, space: str, tid: str, slots: BackfillSlots, stamp: BackfillStamp
    ) -> tuple[list[str], int]:
        return await self.thread.call(self._history.backfill, space, tid, slots, stamp)

    async def scrape(self) -> Scrape:
        return await self.thread.call(self._history.scrape)

    async def messages_accepted(self, message_ids: list[str]) -> dict[str, str | None]:
        return await self.thread.call(self._history.messages_accepted, message_ids)

    async def stream_began(self, space: str, peer: str, object_id: str, resumed: bool) -> int:
        return await self.thread.call(self._history.stream_began, space, peer, object_id, resumed)

    async def stream_ended(self, row: int) -> None:
        await self.thread.call(self._history.stream_ended, row)

    # --- runs, turns and idempotency keys ---

    async def post_run(self, space: str, run: RunIn, by: Poster) -> RunPosted:
        return await self.thread.call(self._runs.post_run, space, run, by)

    async def post_runs(self, space: str, runs: list[RunIn], by: Poster) -> RunsPosted:
        return await self.thread.call(self._runs.post_runs, space, runs, by)

    async def runs_page(self, space: str, query: LogQuery) -> list[dict[str, Any]]:
        return await self.thread.call(self._runs.runs_page, space, query)

    async def run_body(self, space: str, run_id: str) -> dict[str, Any] | None:
        return await self.thread.call(self._runs.run_body, space, run_id)

    async def rollups(self, space: str, trigger: str | None) -> list[dict[str, Any]]:
        return await self.thread.call(self._runs.rollups, space, trigger)

    async def post_turn(self, space: str, turn: TurnIn, keep: RunRetention) -> bool:
        return await self.thread.call(self._runs.post_turn, space, turn, keep)

    async def turns_page(self, space: str, query: LogQuery) -> list[dict[str, Any]]:
        return await self.thread.call(self._runs.turns_page, space, query)

    async def kept_answer(self, owner: str, key: str, digest: str) -> Kept | None:
        """One server per file: its requests in flight wait in `idempotency.IN_FLIGHT`."""
        return await self.thread.call(self._runs.kept_answer, owner, key)

    async def keep_answer(self, owner: str, key: str, kept: Kept) -> None:
        return await self.thread.call(self._runs.keep_answer, owner, key, kept)

    async def drop_key(self, owner: str, key: str) -> None:
        """Nothing is reserved on SQLite."""

    # --- chats, spaces and state (issue 22: `sqlite_chats.ChatWork`)

    async def chats(self, space: str) -> list[Chat]:
        return await self.thread.call(self._chats.chats, space)

    async def chat_seq(self, space: str, object_id: str) -> int:
        return await self.thread.call(self._chats.chat_seq, space, object_id)

    async def edit_message(
        self, object_id: str, message_id: str, edit: MessageEdit
    ) -> tuple[Message, bytes]:
        return await self.thread.call(self._chats.edit_message, object_id, message_id, edit)

    async def latest_messages(
        self, object_id: str, after: int, limit: int
    ) -> list[tuple[int, str]]:
        return await self.thread.call(self._chats.latest_messages, object_id, after, limit)

    async def resume_gap(
        self, object_id: str, after: int, upto: int, window: float
    ) -> tuple[tuple[int, int, int] | None, float]:
        return await self.thread.call(self._chats.resume_gap, object_id, after, upto, window)

    async def replay(
        self, object_id: str, after: int, upto: int, since: float, limit: int
    ) -> list[tuple[int, str]]:
        return await self.thread.call(self._chats.replay, object_id, after, upto, since, limit)

    async def create_space(self, space: str, name: str) -> Space:
        return await self.thread.call(self._chats.create_space, space, name)

    async def spaces(self, only: str | None = None) -> list[Space]:
        return await self.thread.call(self._chats.spaces, only)

    async def space_exists(self, space: str) -> bool:
        return await self.thread.call(self._chats.space_exists, space)

    async def identify(self, token: str, space: str) -> tuple[Principal, bool]:
        return await self.thread.call(self._chats.identify, token, space)

    async def state(self, space: str, trigger_id: str, key: str) -> tuple[str, str] | None:
        return await self.thread.call(self._chats.state, space, trigger_id, key)

    async def put_state(self, space: str, trigger_id: str, key: str, value: str) -> str:
        return await self.thread.call(self._chats.put_state, space, trigger_id, key, value)

    async def close(self) -> None:
        """The database is the app's: closed at its cleanup."""


def ensure_schemas(db: sqlite_utils.Database, now: float) -> None:
    """Every SQLite table, in `SCHEMAS`' order (history's after fires': its outcome columns)."""
    for ensure in SCHEMAS:
        if ensure is history.ensure_schema:
            history.ensure_schema(db, now)
        else:
            ensure(db)


SCHEMAS: tuple[Callable[..., None], ...] = (
    token_store.ensure_schema,
    idempotency.ensure_schema,
    spaces.ensure_schema,
    trigger_store.ensure_schema,
    leases.ensure_schema,
    fires.ensure_schema,
    programs.ensure_schema,
    devices.ensure_schema,
    runs.ensure_schema,
    turns.ensure_schema,
    state.ensure_schema,
    history.ensure_schema,  # after `fires`: its outcome columns; takes the clock's `now`
    chat_store.ensure_schema,
)
