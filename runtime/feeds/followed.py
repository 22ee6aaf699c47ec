"""One followed chat and its messages as fires see them.

Owns the state of one followed chat (`FollowedChat`: its armed triggers, its stream, its
cursor, the bridges waiting for its `hello`), which chat a record follows (`chat_of`,
`written_at`), decoding a chat message (`ChatMessage`, from the stream or a history
page, a malformed one logged and skipped), the two rules of which message fires which
trigger (`wants`, `active_for`), and walking the history (`bridge_start` gallops back
to a seq before an instant, `history` pages forward). Must not fire (that is
`runtime.feeds.chats`), open a stream or read a clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Annotated, Any

import msgspec

from core.aio import TaskSet
from core.chatwire import each
from core.wire import Answer
from runtime.client.api import SpaceClient
from runtime.client.sse import Permanent
from runtime.client.stream import Stream
from runtime.fire.dispatch import Event
from triggers.records import (
    CHAT_DATASET,
    RESERVED_CHAT_WATCH,
    EventTrigger,
    Trigger,
    TriggerId,
)

log = logging.getLogger(__name__)

HISTORY_PAGE = 500
GALLOP_FIRST = 64  # how far back the bridge first looks for its start, in seqs


class FollowedStatus(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One followed chat, as `baton status` shows it."""

    chat: str
    state: str
    triggers: list[str]
    last_id: int | None
    error: str
    connections: int
    gaps: int


class Bridge(msgspec.Struct, frozen=True, kw_only=True):
    ids: frozenset[TriggerId]
    since: datetime


class FollowedChat:
    """One followed chat: its armed triggers, its stream, where its fires stand."""

    def __init__(self, object_id: str, triggers: dict[TriggerId, EventTrigger]) -> None:
        self.object_id = object_id
        self.triggers = triggers
        self.sub: Stream | None = None
        self.tasks = TaskSet(f"chat {object_id}")
        self.lock = asyncio.Lock()  # one message or bridge at a time, in seq order
        self.last_seq: int | None = None  # the last seq whose fire targets were chosen
        self.pending: list[Bridge] = []  # bridges waiting for the stream's `hello`
        self.refusal: Permanent | None = None
        self.error = ""
        self.gaps = 0

    @property
    def state(self) -> str:
        if self.refusal is not None:
            return "missing" if self.refusal.status == 404 else "failed"
        return self.sub.status.state.value if self.sub is not None else "starting"

    def status(self) -> FollowedStatus:
        sub = self.sub.status if self.sub is not None else None
        return FollowedStatus(
            chat=self.object_id,
            state=self.state,
            triggers=sorted(self.triggers),
            last_id=self.last_seq,
            error=self.error or (sub.last_error if sub else ""),
            connections=sub.connections if sub else 0,
            gaps=self.gaps,
        )


def chat_of(record: Trigger) -> str | None:
    """The chat an armed record follows, or None when it is not a chat event trigger."""
    if isinstance(record, EventTrigger) and record.spec.dataset == CHAT_DATASET:
        return record.spec.object_id or None
    return None


def written_at(record: Trigger) -> datetime | None:
    """The record's last write that moved where or whether it fires, by the space's clock."""
    since = record.fires_from
    updated = record.updated_at if record.updated_at and record.updated_at.tzinfo else None
    return max(since, updated) if since and updated else since or updated


class ChatMessage(Answer, frozen=True, kw_only=True, rename="camel"):
    """The fields of a chat message a fire needs; others are ignored."""

    message_id: Annotated[str, msgspec.Meta(min_length=1)]
    seq: int
    text: str
    created_at: Annotated[datetime, msgspec.Meta(tz=True)]
    agent: dict[str, Any] | None = None

    def event(self, space: str, object_id: str) -> Event:
        body: Event = {"space": space, "objectId": object_id, "messageId": self.message_id}
        body["text"] = self.text
        if self.agent is not None:
            body["agent"] = self.agent
        return body


MESSAGE = msgspec.json.Decoder(ChatMessage)


def wants(trigger: Trigger, message: ChatMessage) -> bool:
    """People's messages fire every trigger; the agent's only chat-watch."""
    return message.agent is None or trigger.id == RESERVED_CHAT_WATCH


def active_for(trigger: Trigger, message: ChatMessage) -> bool:
    """A message accepted before the trigger's `activeSince` never fires it (both are
    the space's instants): not while paused, not before it existed or moved here.

    Both travel in milliseconds: a message stamped in the very millisecond of a resume
    may have come just before it, so it does not fire (never a paused message)."""
    since = trigger.fires_from
    return since is None or message.created_at > since


async def bridge_start(
    client: SpaceClient, space: str, object_id: str, since: datetime, upto: int
) -> int:
    """A seq before the first message created at or after `since`: look back, widening."""
    step = GALLOP_FIRST
    while (after := max(0, upto - step)) > 0:
        page = await client.chat_messages(space, object_id, after=after, limit=1)
        first = _decode_all(page.messages[:1], object_id)
        if not first or first[0].created_at < since:
            return after
        step *= 4
    return 0


async def history(
    client: SpaceClient, space: str, object_id: str, after: int, upto: int
) -> AsyncIterator[ChatMessage]:
    """The chat's messages in `(after, upto]`, oldest first, malformed ones skipped."""
    while after < upto:
        page = await client.chat_messages(space, object_id, after=after, limit=HISTORY_PAGE)
        for message in _decode_all(page.messages, object_id):
            if message.seq <= upto:
                yield message
        if not page.more or page.next <= after:
            return
        after = page.next


def _decode_all(raws: list[msgspec.Raw], object_id: str) -> list[ChatMessage]:
    found, errors = each(raws, MESSAGE)
    for error in errors:
        log.warning("chat %s: history message skipped: %s", object_id, error)
    return found
