"""One SSE subscription per distinct chat, turning each new message into event fires.

Owns which chats this device follows (SPEC "When triggers fire" → event): one
`Stream` per distinct chat of the armed event triggers; each message fires every
armed trigger of its chat that wants it (runtime.feeds.followed) once, keyed by
`messageId`; `bridge(since)` replays a takeover's messages; a missing chat is `missing` and
re-probed. Live-only. Must not claim, run or record fires, merge `args`, nor read time but
through the Clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime
from functools import partial

import msgspec

from core.aio import Backoff, TaskSet, sleep_until
from core.routes import ApiError
from runtime.client.retry import retried_for
from runtime.client.seat import Seat
from runtime.client.sse import Permanent, SseEvent
from runtime.client.stream import (
    DEFAULT_BACKOFF,
    ConnectionState,
    StreamOptions,
    SubscriptionStatus,
)
from runtime.feeds.followed import (
    MESSAGE,
    Bridge,
    ChatMessage,
    FollowedChat,
    FollowedStatus,
    active_for,
    bridge_start,
    chat_of,
    history,
    wants,
    written_at,
)
from runtime.fire.dispatch import Dispatcher, FireRequest, named
from triggers.records import EventTrigger, Trigger, TriggerId
from triggers.registry import Diff
from triggers.schedule import fire_key_event

log = logging.getLogger(__name__)
BRIDGE_RETRY_S = 120.0  # a bridge that fails is tried again for as long as its window


class Subscriptions:
    """The event side of the daemon: `apply` diffs, `run` until cancelled, `close`."""

    def __init__(
        self,
        seat: Seat,
        dispatcher: Dispatcher,
        *,
        reprobe_s: float = 60.0,
        read_timeout: float = 45.0,
        backoff: Backoff = DEFAULT_BACKOFF,
    ) -> None:
        self._client, self._space, _, self._clock = seat
        self._dispatcher = dispatcher
        self._reprobe_s = reprobe_s
        self._stream_options = StreamOptions(read_timeout=read_timeout, backoff=backoff)
        self._chats: dict[str, FollowedChat] = {}
        self._where: dict[TriggerId, str] = {}
        self.up_since = self._clock.wall()  # this device's start (or its last wake from sleep)
        self._closing = TaskSet("closing")  # chats being closed: their tasks end

    # -- what the daemon calls

    def apply(self, diff: Diff) -> None:
        """Follow the chats of the armed event triggers; close those none follows any more.

        A trigger newly placed on a chat that was written after this device came up
        (created, resumed, moved or repinned here) also fires for the messages accepted
        since that write up to where its stream begins: the device was up for them."""
        for tid in diff.remove:
            self._detach(tid)
        for armed in (*diff.add, *diff.rearm, *diff.update):
            record = armed.record
            if self._place(record) and (written := written_at(record)) and written > self.up_since:
                self._bridge_later(
                    self._chats[self._where[record.id]], frozenset({record.id}), written
                )
        for object_id in [o for o, c in self._chats.items() if not c.triggers]:
            self._close_chat(self._chats.pop(object_id))

    def bridge(self, since: datetime) -> int:
        """After a takeover: the floating event triggers also fire for their chats' messages
        accepted since `since` up to where each stream began (or stands), never before a
        trigger's `activeSince`; claims drop what already ran. How many chats bridge."""
        bridged = 0
        for chat in self._chats.values():
            ids = frozenset(t for t, record in chat.triggers.items() if record.floating)
            if ids:
                self._bridge_later(chat, ids, since)
                bridged += 1
        return bridged

    def slept(self, now: datetime) -> None:
        """The machine slept: forget every cursor and pending bridge, subscribe afresh."""
        self.up_since = now
        for object_id, old in list(self._chats.items()):
            self._close_chat(old)
            self._chats[object_id] = self._open(object_id, old.triggers)
        log.info("slept: %d chat subscriptions restarted without cursors", len(self._chats))

    @property
    def missing(self) -> frozenset[str]:
        return frozenset(o for o, c in self._chats.items() if c.state == "missing")

    def status(self) -> list[FollowedStatus]:
        return [self._chats[o].status() for o in sorted(self._chats)]

    async def run(self) -> None:
        """Wait until cancelled (the chats' tasks do the work), then close."""
        try:
            await asyncio.Event().wait()
        finally:
            await self.close()

    async def close(self) -> None:
        """Stop every subscription and wait for their tasks to end."""
        for chat in self._chats.values():
            self._close_chat(chat)
        self._chats.clear()
        self._where.clear()
        await self._closing.wait()

    # -- which chat each trigger follows

    def _place(self, record: Trigger) -> bool:
        """Arm `record` on its chat (opening the chat's stream if it is the first there);
        True when it is new on that chat."""
        object_id = chat_of(record)
        if self._where.get(record.id) not in (None, object_id):
            self._detach(record.id)
        if object_id is None or not isinstance(record, EventTrigger):  # one goes with the other
            return False
        chat = self._chats.get(object_id)
        if chat is None:
            chat = self._chats[object_id] = self._open(object_id, {})
        new = record.id not in chat.triggers
        chat.triggers[record.id] = record
        self._where[record.id] = object_id
        return new

    def _detach(self, tid: TriggerId) -> None:
        object_id = self._where.pop(tid, None)
        if object_id is not None and object_id in self._chats:
            self._chats[object_id].triggers.pop(tid, None)

    def _open(self, object_id: str, triggers: dict[TriggerId, EventTrigger]) -> FollowedChat:
        chat = FollowedChat(object_id, triggers)
        chat.tasks.spawn(self._follow(chat), name=f"chat {object_id}")
        log.info("chat %s: subscribing for %s", object_id, ", ".join(sorted(triggers)) or "-")
        return chat

    def _close_chat(self, chat: FollowedChat) -> None:
        chat.tasks.cancel()  # at once: no event of the old stream is taken after this
        self._closing.spawn(chat.tasks.close(), name=f"close {chat.object_id}")
        log.info("chat %s: subscription closed", chat.object_id)

    # -- one chat's stream

    async def _follow(self, chat: FollowedChat) -> None:
        """Subscribe; when refused for good, say so and re-probe every `reprobe_s`."""
        while True:
            chat.last_seq = None  # a new subscription starts live-only
            chat.sub = self._client.chat_stream(
                self._space,
                chat.object_id,
                on_status=partial(self._on_status, chat),
                **self._stream_options,
            )
            try:
                await chat.sub.run(partial(self._on_event, chat))
            except Permanent as exc:
                self._refused(chat, exc)
            except Exception as exc:  # a defect of ours: log it, keep the chat alive
                log.exception("chat %s: subscription failed", chat.object_id)
                chat.error = f"{type(exc).__name__}: {exc}"
            await sleep_until(self._clock, self._clock.monotonic() + self._reprobe_s)

    def _refused(self, chat: FollowedChat, exc: Permanent) -> None:
        if chat.refusal is None or chat.refusal.status != exc.status:
            every = self._reprobe_s
            log.warning("chat %s: refused (%s); re-probing every %gs", chat.object_id, exc, every)
        chat.refusal, chat.error, chat.last_seq = exc, str(exc), None

    def _on_status(self, chat: FollowedChat, status: SubscriptionStatus) -> None:
        if status.state is ConnectionState.LIVE and (status.connections == 1 or status.attempt):
            log.info("chat %s: live (connection %d)", chat.object_id, status.connections)
        elif status.state is ConnectionState.BACKOFF and status.attempt == 1:
            log.warning("chat %s: stream dropped (%s); resuming", chat.object_id, status.last_error)

    async def _on_event(self, chat: FollowedChat, event: SseEvent) -> None:
        """Never raises: a bad event is logged and skipped, the stream goes on."""
        try:
            if event.event == "hello":
                await self._hello(chat, event)
            elif event.event == "message":
                await self._message(chat, event)
            elif event.event == "gap":
                self._gap(chat, event)
        except Exception:
            log.exception("chat %s: event %s id %s skipped", chat.object_id, event.event, event.id)

    async def _hello(self, chat: FollowedChat, event: SseEvent) -> None:
        if chat.refusal is not None:
            log.info("chat %s: found again", chat.object_id)
        chat.refusal, chat.error = None, ""
        start = event.seq if event.seq is not None else (chat.sub.last_id if chat.sub else None)
        async with chat.lock:
            chat.last_seq = start
            pending, chat.pending = chat.pending, []
            for bridge in pending:
                await self._bridge(chat, bridge, start or 0)

    async def _message(self, chat: FollowedChat, event: SseEvent) -> None:
        async with chat.lock:
            targets = list(chat.triggers.values())  # chosen with the seq, no await between
            chat.last_seq = event.seq if event.seq is not None else chat.last_seq
            try:
                message = MESSAGE.decode(event.data)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                log.warning("chat %s: message id %s skipped: %s", chat.object_id, event.id, exc)
                return
            await self._fire(chat, targets, message)

    def _gap(self, chat: FollowedChat, event: SseEvent) -> None:
        chat.gaps += 1
        chat.last_seq = event.seq if event.seq is not None else chat.last_seq
        log.warning("chat %s: gap, these never fire: %s", chat.object_id, event.data)

    async def _fire(
        self,
        chat: FollowedChat,
        targets: Sequence[Trigger],
        message: ChatMessage,
        *,
        catchup: bool = False,
    ) -> None:
        """Hand the message's fires to the dispatcher together: claimed in one request."""
        key, event = fire_key_event(message.message_id), message.event(self._space, chat.object_id)
        requests = [
            FireRequest(trigger=t, key=key, due_at=message.created_at, event=event, catchup=catchup)
            for t in targets
            if wants(t, message) and active_for(t, message)
        ]
        if not requests:
            return
        try:
            await self._dispatcher.fire(*requests)
        except Exception:
            log.exception(
                "fire %s@%s: the dispatcher failed", named(requests[0].trigger), requests[0].key
            )

    # -- takeover: the messages since `bridge_from`, from the history pages

    def _bridge_later(self, chat: FollowedChat, ids: frozenset[TriggerId], since: datetime) -> None:
        """Bridge up to where the stream stands now, or up to its `hello` if not yet there."""
        bridge = Bridge(ids=ids, since=since)
        if chat.last_seq is None:
            chat.pending.append(bridge)
        else:
            work = self._bridge_locked(chat, bridge, chat.last_seq)
            chat.tasks.spawn(work, name=f"chat {chat.object_id} bridge")

    async def _bridge_locked(self, chat: FollowedChat, bridge: Bridge, upto: int) -> None:
        async with chat.lock:
            await self._bridge(chat, bridge, upto)

    async def _bridge(self, chat: FollowedChat, bridge: Bridge, upto: int) -> None:
        """Fire messages `seq <= upto` created at or after `since`, to the bridged triggers;
        a transient failure (a space restart) is tried again from where the walk stood, for
        up to the bridge window."""
        fired, after = 0, -1

        async def walk() -> None:
            nonlocal fired, after
            if after < 0:
                after = await bridge_start(
                    self._client, self._space, chat.object_id, bridge.since, upto
                )
            async for message in history(self._client, self._space, chat.object_id, after, upto):
                if message.created_at >= bridge.since:
                    fired += 1
                    ids = sorted(bridge.ids & chat.triggers.keys())  # still armed here
                    await self._fire(chat, [chat.triggers[t] for t in ids], message, catchup=True)
                after = message.seq

        def failed(exc: Exception, delay: float) -> None:
            log.warning("chat %s: bridge failed, again in %g s: %s", chat.object_id, delay, exc)

        try:
            await retried_for(walk, self._clock, BRIDGE_RETRY_S, on_failure=failed)
        except ApiError as exc:
            log.warning("chat %s: bridge from %s failed: %s", chat.object_id, bridge.since, exc)
        log.info("chat %s: bridged %d messages since %s", chat.object_id, fired, bridge.since)
