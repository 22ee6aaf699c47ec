"""Chats and their messages in the space's SQLite store.

Owns the `chats` and `chat_messages` tables and the wire shape of a message
(SPEC: `{messageId, seq, objectId, text, agent?: {name, done?}, createdAt}`). A
chat's `last_seq` grows by one per message inside the same transaction as the
insert, so `seq` is strictly increasing per chat and never reused, across
restarts too. A message is stored as its encoded JSON, so history and replay send
bytes without re-encoding. Times come in as `now` (unix seconds); this module
reads no clock and knows nothing of HTTP or streams.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Annotated

import msgspec
import sqlite_utils

from core.chatwire import NAME_MAX, Message, MessageEdit, MessageIn
from core.wire import Answer, Body
from space.db import transaction
from space.servertime import iso

SCHEMA = """
CREATE TABLE IF NOT EXISTS chats (
    object_id TEXT PRIMARY KEY,
    space TEXT NOT NULL,
    name TEXT NOT NULL,
    created_at TEXT NOT NULL,
    last_seq INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS chats_by_space ON chats (space, created_at);
CREATE TABLE IF NOT EXISTS chat_messages (
    object_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    message_id TEXT NOT NULL UNIQUE,
    created_ts REAL NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (object_id, seq)
) WITHOUT ROWID;
"""


class UnknownChat(LookupError):
    """No chat with this objectId in this space."""


class NotEditable(ValueError):
    """Only an agent message that is not done may change; the message says why."""


class ChatIn(Body, frozen=True, kw_only=True):
    name: Annotated[str, msgspec.Meta(max_length=NAME_MAX)] = ""


class Chat(Answer, frozen=True, kw_only=True):
    objectId: str
    name: str
    createdAt: str
    space: str
    lastSeq: int


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(Message).decode


def ensure_schema(db: sqlite_utils.Database) -> None:
    db.executescript(SCHEMA)


def _iso(ts: float) -> str:
    return iso(datetime.fromtimestamp(ts, UTC))


def create_chat(db: sqlite_utils.Database, space: str, name: str, *, now: float) -> Chat:
    """Create a chat in `space`; its wire object."""
    chat = new_chat(space, name, now)
    db.execute(
        "INSERT INTO chats (object_id, space, name, created_at) VALUES (?, ?, ?, ?)",
        [chat.objectId, space, name, chat.createdAt],
    )
    return chat


def new_chat(space: str, name: str, now: float) -> Chat:
    """A chat not stored yet: a new objectId, no message."""
    return Chat(
        objectId=f"chat_{secrets.token_hex(8)}",
        name=name,
        createdAt=_iso(now),
        space=space,
        lastSeq=0,
    )


def list_chats(db: sqlite_utils.Database, space: str) -> list[Chat]:
    rows = db.execute(
        "SELECT object_id, name, created_at, last_seq FROM chats WHERE space = ? "
        "ORDER BY created_at, object_id",
        [space],
    ).fetchall()
    return [Chat(objectId=o, name=n, createdAt=c, space=space, lastSeq=s) for o, n, c, s in rows]


def last_seq(db: sqlite_utils.Database, space: str, object_id: str) -> int:
    """The chat's latest `seq` (0 before its first message); `UnknownChat` if there is none."""
    row = db.execute(
        "SELECT last_seq FROM chats WHERE space = ? AND object_id = ?", [space, object_id]
    ).fetchone()
    if row is None:
        raise UnknownChat(object_id)
    return int(row[0])


def created_at(db: sqlite_utils.Database, message_id: str) -> str | None:
    """When the space accepted a message (its wire `createdAt`); None if there is none."""
    row = db.execute(
        "SELECT created_ts FROM chat_messages WHERE message_id = ?", [message_id]
    ).fetchone()
    return None if row is None else _iso(row[0])


def add_message(
    db: sqlite_utils.Database, space: str, object_id: str, msg: MessageIn, *, now: float
) -> tuple[Message, bytes]:
    """Append `msg` with the chat's next `seq`; the stored message and its JSON."""
    with transaction(db):
        row = db.execute(
            "UPDATE chats SET last_seq = last_seq + 1 WHERE space = ? AND object_id = ? "
            "RETURNING last_seq",
            [space, object_id],
        ).fetchone()
        if row is None:
            raise UnknownChat(object_id)
        message, body = new_message(object_id, int(row[0]), msg, now)
        db.execute(
            "INSERT INTO chat_messages (object_id, seq, message_id, created_ts, body) "
            "VALUES (?, ?, ?, ?, ?)",
            [object_id, message.seq, message.message_id, now, body.decode()],
        )
    return message, body


def new_message(object_id: str, seq: int, msg: MessageIn, now: float) -> tuple[Message, bytes]:
    """The message `msg` at `seq` of its chat, accepted at `now`, and its JSON."""
    message = Message(
        message_id=f"msg_{secrets.token_hex(10)}",
        seq=seq,
        object_id=object_id,
        text=msg.text,
        created_at=_iso(now),
        agent=msg.agent,
    )
    return message, _encode(message)


def edit_message(
    db: sqlite_utils.Database, object_id: str, message_id: str, edit: MessageEdit
) -> tuple[Message, bytes]:
    """Apply `edit` to an agent message not yet done; the message as stored now, and its JSON.

    `UnknownChat` when the chat has no such message; `NotEditable` for a person's message
    or one already done. Its `seq` and `createdAt` never change."""
    with transaction(db):
        row = db.execute(
            "SELECT body FROM chat_messages WHERE object_id = ? AND message_id = ?",
            [object_id, message_id],
        ).fetchone()
        if row is None:
            raise UnknownChat(message_id)
        message, body = edited(row[0], edit)
        db.execute(
            "UPDATE chat_messages SET body = ? WHERE object_id = ? AND message_id = ?",
            [body.decode(), object_id, message_id],
        )
    return message, body


def edited(stored: str, edit: MessageEdit) -> tuple[Message, bytes]:
    """The stored message (its JSON) with `edit` applied, and its JSON (either store);
    `NotEditable` for a person's message or one already done."""
    message = _decode(stored)
    agent = message.agent
    if agent is None:
        raise NotEditable("only an agent message can be edited")
    if agent.done:
        raise NotEditable("the message is done: it no longer changes")
    done = agent.done if edit.done is None else edit.done
    text = message.text if edit.text is None else edit.text
    message = msgspec.structs.replace(
        message, text=text, agent=msgspec.structs.replace(agent, done=done)
    )
    return message, _encode(message)


def page(
    db: sqlite_utils.Database, object_id: str, after: int, limit: int
) -> list[tuple[int, str]]:
    """Up to `limit` messages with `seq > after`, oldest first, as `(seq, json)`."""
    return db.execute(
        "SELECT seq, body FROM chat_messages WHERE object_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        [object_id, after, limit],
    ).fetchall()


def latest(
    db: sqlite_utils.Database, object_id: str, after: int, limit: int
) -> list[tuple[int, str]]:
    """The newest `limit` messages with `seq > after`, oldest first, as `(seq, json)`."""
    rows = db.execute(
        "SELECT seq, body FROM chat_messages WHERE object_id = ? AND seq > ? "
        "ORDER BY seq DESC LIMIT ?",
        [object_id, after, limit],
    ).fetchall()
    return rows[::-1]


def recent(
    db: sqlite_utils.Database, object_id: str, after: int, upto: int, since_ts: float, limit: int
) -> list[tuple[int, str]]:
    """Messages with `after < seq <= upto` created at or after `since_ts`, oldest first."""
    return db.execute(
        "SELECT seq, body FROM chat_messages WHERE object_id = ? AND seq > ? AND seq <= ? "
        "AND created_ts >= ? ORDER BY seq LIMIT ?",
        [object_id, after, upto, since_ts, limit],
    ).fetchall()


def too_old(
    db: sqlite_utils.Database, object_id: str, after: int, upto: int, before_ts: float
) -> tuple[int, int, int] | None:
    """`(first seq, last seq, count)` of messages in `(after, upto]` created before `before_ts`."""
    first, last, count = db.execute(
        "SELECT min(seq), max(seq), count(*) FROM chat_messages WHERE object_id = ? "
        "AND seq > ? AND seq <= ? AND created_ts < ?",
        [object_id, after, upto, before_ts],
    ).fetchone()
    return None if count == 0 else (int(first), int(last), int(count))
