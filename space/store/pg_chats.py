"""Chats and their messages on PostgreSQL: the twin of `chat_store`'s SQL, by the database's
clock.

Owns the chat SQL of the PostgreSQL store (`chats`, `chat_messages` of schema v1). A
message's `seq` is its chat's counter row (`chats.last_seq`) bumped in the message's
transaction: the row lock orders the writers, so seqs are gapless and in commit order
whichever server writes; each append NOTIFYs `chat:<objectId>` (`pgwake`). An edit locks
its message row (`FOR UPDATE`). The wire shapes and what an edit may change are
`chat_store`'s. Must not know HTTP.
"""

from __future__ import annotations

import asyncpg

from core.chatwire import Message, MessageEdit, MessageIn
from space import chat_store
from space.chat_store import Chat
from space.store.pgwake import CHANNEL

_EPOCH = "extract(epoch FROM clock_timestamp())::float8"


def edit_topic(object_id: str, message_id: str, origin: str) -> str:
    """The hint of an edit: `edit:<objectId>/<messageId>@<origin>` (the server that made it,
    whose own streams were told already)."""
    return f"edit:{object_id}/{message_id}@{origin}"


class PgChats:
    """The chat operations of `PostgresStore` (its pool; `origin`: this server's name in
    the hints it sends)."""

    pool: asyncpg.Pool
    origin: str

    async def create_chat(self, space: str, name: str) -> Chat:
        async with self.pool.acquire() as conn:
            now = await conn.fetchval("SELECT extract(epoch FROM now())::float8")
            return await insert_chat(conn, chat_store.new_chat(space, name, now))

    async def chats(self, space: str) -> list[Chat]:
        rows = await self.pool.fetch(
            "SELECT object_id, name, created_at, last_seq FROM chats WHERE space = $1 "
            'ORDER BY created_at COLLATE "C", object_id COLLATE "C"',
            space,
        )
        return [
            Chat(objectId=o, name=n, createdAt=c, space=space, lastSeq=s) for o, n, c, s in rows
        ]

    async def chat_seq(self, space: str, object_id: str) -> int:
        seq = await self.pool.fetchval(
            "SELECT last_seq FROM chats WHERE space = $1 AND object_id = $2", space, object_id
        )
        if seq is None:
            raise chat_store.UnknownChat(object_id)
        return int(seq)

    async def add_message(
        self, space: str, object_id: str, msg: MessageIn
    ) -> tuple[Message, bytes]:
        """The chat's counter row bumped in the message's transaction: `seq` gapless, in
        commit order; `createdAt` the database's clock once the row is locked, so it grows
        with `seq` (`now()`, the transaction's start, would not under contention)."""
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                "UPDATE chats SET last_seq = last_seq + 1 WHERE space = $1 AND object_id = $2 "
                f"RETURNING last_seq, {_EPOCH} AS now",
                space,
                object_id,
            )
            if row is None:
                raise chat_store.UnknownChat(object_id)
            message, body = chat_store.new_message(object_id, row["last_seq"], msg, row["now"])
            await conn.execute(
                "INSERT INTO chat_messages (object_id, seq, message_id, created_ts, body) "
                "VALUES ($1, $2, $3, $4, $5)",
                object_id,
                message.seq,
                message.message_id,
                row["now"],
                body.decode(),
            )
            await conn.execute("SELECT pg_notify($1, 'chat:' || $2)", CHANNEL, object_id)
        return message, body

    async def edit_message(
        self, object_id: str, message_id: str, edit: MessageEdit
    ) -> tuple[Message, bytes]:
        async with self.pool.acquire() as conn, conn.transaction():
            stored = await conn.fetchval(
                "SELECT body FROM chat_messages WHERE object_id = $1 AND message_id = $2 "
                "FOR UPDATE",
                object_id,
                message_id,
            )
            if stored is None:
                raise chat_store.UnknownChat(message_id)
            message, body = chat_store.edited(stored, edit)
            await conn.execute(
                "UPDATE chat_messages SET body = $3 WHERE object_id = $1 AND message_id = $2",
                object_id,
                message_id,
                body.decode(),
            )
            await conn.execute(  # heard at the commit, by every server but this one
                "SELECT pg_notify($1, $2)", CHANNEL, edit_topic(object_id, message_id, self.origin)
            )
        return message, body

    async def message(self, object_id: str, message_id: str) -> tuple[int, str] | None:
        """The message `message_id` of the chat as stored now: `(seq, json)`, None if none."""
        row = await self.pool.fetchrow(
            "SELECT seq, body FROM chat_messages WHERE object_id = $1 AND message_id = $2",
            object_id,
            message_id,
        )
        return None if row is None else (int(row["seq"]), str(row["body"]))

    async def messages_since(self, object_id: str, after: int, limit: int) -> list[tuple[int, str]]:
        return await _pairs(
            self.pool,
            "SELECT seq, body FROM chat_messages WHERE object_id = $1 AND seq > $2 "
            "ORDER BY seq LIMIT $3",
            object_id,
            after,
            limit,
        )

    async def latest_messages(
        self, object_id: str, after: int, limit: int
    ) -> list[tuple[int, str]]:
        newest = await _pairs(
            self.pool,
            "SELECT seq, body FROM chat_messages WHERE object_id = $1 AND seq > $2 "
            "ORDER BY seq DESC LIMIT $3",
            object_id,
            after,
            limit,
        )
        return newest[::-1]

    async def resume_gap(
        self, object_id: str, after: int, upto: int, window: float
    ) -> tuple[tuple[int, int, int] | None, float]:
        row = await self.pool.fetchrow(
            f"WITH at AS (SELECT {_EPOCH} - $4 AS since) "
            "SELECT min(seq), max(seq), count(*), (SELECT since FROM at) FROM chat_messages "
            "WHERE object_id = $1 AND seq > $2 AND seq <= $3 "
            "AND created_ts < (SELECT since FROM at)",
            object_id,
            after,
            upto,
            window,
        )
        first, last, count, since = tuple(row)
        return (None if count == 0 else (int(first), int(last), int(count))), since

    async def replay(
        self, object_id: str, after: int, upto: int, since: float, limit: int
    ) -> list[tuple[int, str]]:
        return await _pairs(
            self.pool,
            "SELECT seq, body FROM chat_messages WHERE object_id = $1 AND seq > $2 "
            "AND seq <= $3 AND created_ts >= $4 ORDER BY seq LIMIT $5",
            object_id,
            after,
            upto,
            since,
            limit,
        )


async def insert_chat(conn: asyncpg.Connection, chat: Chat) -> Chat:
    """Store `chat` (`chat_store.new_chat`), in the caller's transaction if any."""
    await conn.execute(
        "INSERT INTO chats (object_id, space, name, created_at) VALUES ($1, $2, $3, $4)",
        chat.objectId,
        chat.space,
        chat.name,
        chat.createdAt,
    )
    return chat


async def _pairs(pool: asyncpg.Pool, query: str, *args: object) -> list[tuple[int, str]]:
    return [(row[0], row[1]) for row in await pool.fetch(query, *args)]
