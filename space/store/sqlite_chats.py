"""The embedded store's units of work for chats, spaces and state, like `sqlite_work`'s.

Owns what each of those `SqliteStore` calls does on the SQLite file: one unit, run whole
on the app's database thread, deciding by the store's clock. The SQL stays in the area
modules (`chat_store`, `spaces`, `state`, `token_store`). Must not be called on the event
loop.
"""

from __future__ import annotations

import sqlite_utils

from core.chatwire import Message, MessageEdit
from core.wire import Space
from space import chat_store, spaces, state, token_store
from space.chat_store import Chat
from space.servertime import ServerClock, iso
from space.token_store import Principal


class ChatWork:
    """The chat, space and state calls as units of work on the database thread."""

    def __init__(self, clock: ServerClock) -> None:
        self.clock = clock

    def chats(self, db: sqlite_utils.Database, space: str) -> list[Chat]:
        return chat_store.list_chats(db, space)

    def chat_seq(self, db: sqlite_utils.Database, space: str, object_id: str) -> int:
        return chat_store.last_seq(db, space, object_id)

    def edit_message(
        self, db: sqlite_utils.Database, object_id: str, message_id: str, edit: MessageEdit
    ) -> tuple[Message, bytes]:
        return chat_store.edit_message(db, object_id, message_id, edit)

    def latest_messages(
        self, db: sqlite_utils.Database, object_id: str, after: int, limit: int
    ) -> list[tuple[int, str]]:
        return chat_store.latest(db, object_id, after, limit)

    def resume_gap(
        self, db: sqlite_utils.Database, object_id: str, after: int, upto: int, window: float
    ) -> tuple[tuple[int, int, int] | None, float]:
        since = self.clock().timestamp() - window
        return chat_store.too_old(db, object_id, after, upto, since), since

    def replay(
        self,
        db: sqlite_utils.Database,
        object_id: str,
        after: int,
        upto: int,
        since: float,
        limit: int,
    ) -> list[tuple[int, str]]:
        return chat_store.recent(db, object_id, after, upto, since, limit)

    def create_space(self, db: sqlite_utils.Database, space: str, name: str) -> Space:
        return spaces.create_space(db, space, name, self.clock())

    def spaces(self, db: sqlite_utils.Database, only: str | None) -> list[Space]:
        return spaces.rows(db, only)

    def space_exists(self, db: sqlite_utils.Database, space: str) -> bool:
        return spaces.space_exists(db, space)

    def identify(self, db: sqlite_utils.Database, token: str, space: str) -> tuple[Principal, bool]:
        who = token_store.lookup(db, token, self.clock().timestamp())
        return who, spaces.space_exists(db, space)

    def state(
        self, db: sqlite_utils.Database, space: str, trigger_id: str, key: str
    ) -> tuple[str, str] | None:
        return state.row(db, space, trigger_id, key)

    def put_state(
        self, db: sqlite_utils.Database, space: str, trigger_id: str, key: str, value: str
    ) -> str:
        at = iso(self.clock())
        state.put(db, space, trigger_id, key, value, at)
        return at
