"""chat-watch: the conversation watcher that the reserved `chat-watch` trigger's fires go to.

Owns, per chat, the intake of a conversation (SPEC "chat-watch"): which fires are answered
(each message at most once), the bounded wait while the responder is not ready, readiness,
and one task per chat that runs its turns (runtime.chat.turn). Chats run concurrently, one
chat's turns never overlap. The daemon feeds `offer()` and binds the `Edges`. Must not
subscribe to streams, claim fires, write runs or stamps, or read time but by its Clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import msgspec

from core.chatwire import NUDGE_PREFIX
from core.clock import Clock, SystemClock
from runtime.chat.reply import (
    DEFAULT_APOLOGY,
    ChatKey,
    Conversation,
    Counters,
    Edges,
    Edit,
    History,
    RecordTurn,
    Send,
    TurnSettings,
)
from runtime.chat.responders import MessageJson, Responder
from runtime.chat.turn import Turns

log = logging.getLogger(__name__)


class ChatState(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    space: str
    object_id: str
    turn_id: str  # "" when no turn is live
    waiting: int  # messages not yet handed to the responder


class WatchStatus(msgspec.Struct, frozen=True, kw_only=True):
    ready: bool
    reason: str  # why it is not ready ('' when it is)
    closed: bool
    chats: list[ChatState]  # chats with a live turn or waiting messages
    counters: Counters


def malformed(event: object) -> str:
    """Why `event` cannot be a chat-watch fire, naming the field ('' when it can)."""
    if not isinstance(event, dict):
        return f"event: must be an object, got {type(event).__name__}"
    for field in ("space", "objectId", "messageId"):
        if not isinstance(event.get(field), str) or not event[field]:
            return f"event.{field}: must be a non-empty string"
    if not isinstance(event.get("text", ""), str):
        return "event.text: must be a string"
    return ""


def answerable(event: MessageJson) -> bool:
    """User messages and nudges (`agent.name` = `trigger:<job>`); no other agent message."""
    agent = event.get("agent")
    if agent is None:  # absent or null: a person wrote it
        return True
    name = agent.get("name") if isinstance(agent, dict) else None
    return isinstance(name, str) and name.startswith(NUDGE_PREFIX) and name != NUDGE_PREFIX


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name}: must be > 0, got {value!r}")


class ChatWatch:
    """Answers chat messages through a responder, one conversation turn per chat at a time."""

    def __init__(
        self,
        responder: Responder,
        send: Send,
        history: History,
        *,
        record_turn: RecordTurn,
        clock: Clock | None = None,
        snapshot_size: int = 20,
        seen_capacity: int = 10_000,
        max_waiting: int = 100,
        reply_timeout: float = 120.0,
        io_timeout: float = 30.0,
        apology: str | None = DEFAULT_APOLOGY,
        edit: Edit | None = None,
        stream_interval: float = 0.25,
    ) -> None:
        for name, value in (
            ("snapshot_size", snapshot_size),
            ("seen_capacity", seen_capacity),
            ("max_waiting", max_waiting),
            ("reply_timeout", reply_timeout),
            ("io_timeout", io_timeout),
        ):
            _positive(name, value)
        self._seen_capacity, self._max_waiting = seen_capacity, max_waiting
        self._ready = bool(getattr(responder, "ready", True))
        self._reason = "" if self._ready else "not probed yet"
        self.on_unavailable: Callable[[], None] | None = None  # e.g. probe again soon
        self._seen: dict[tuple[str, str], None] = {}  # insertion-ordered: oldest forgotten first
        self._chats: dict[ChatKey, Conversation] = {}
        self._counters = Counters()
        self._closed = False
        edges = Edges(send=send, history=history, record_turn=record_turn, edit=edit)
        settings = TurnSettings(
            snapshot_size=snapshot_size,
            reply_timeout=reply_timeout,
            io_timeout=io_timeout,
            stream_interval=stream_interval,
            apology=apology,
        )
        self._turns = Turns(
            responder,
            edges,
            settings,
            clock=clock or SystemClock(),
            counters=self._counters,
            ready=lambda: self._ready,
            unavailable=self._unavailable,
        )

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def counters(self) -> Counters:
        return msgspec.structs.replace(self._counters)

    def status(self) -> WatchStatus:
        """For `baton status`: readiness, chats with a live turn or waiting messages, counters."""
        chats = [
            ChatState(space=key[0], object_id=key[1], turn_id=chat.turn_id, waiting=len(chat.inbox))
            for key, chat in sorted(self._chats.items())
            if chat.turn_id or chat.inbox
        ]
        return WatchStatus(
            ready=self._ready,
            reason=self._reason,
            closed=self._closed,
            chats=chats,
            counters=self.counters,
        )

    # ------------------------------------------------------------ intake

    async def offer(self, event: MessageJson) -> None:
        """One fire of chat-watch. Never waits for the responder; never raises for the event."""
        if self._closed:
            log.warning("chat-watch closed: a fire was not taken")
            return
        if not self._accept(event):
            return
        key = (event["space"], event["objectId"])
        chat = self._chats.get(key) or self._chats.setdefault(key, Conversation(key))
        self._enqueue(chat, event)
        self._kick(chat)

    def _accept(self, event: MessageJson) -> bool:
        self._counters.offered += 1
        if problem := malformed(event):
            self._counters.malformed += 1
            log.warning("chat-watch ignored a malformed fire: %s", problem)
            return False
        if not answerable(event):
            self._counters.ignored += 1
            return False
        seen = (event["space"], event["messageId"])
        if seen in self._seen:
            self._counters.duplicates += 1
            return False
        self._remember(seen)
        self._counters.nudges += bool(event.get("agent"))
        return True

    def _remember(self, seen: tuple[str, str]) -> None:
        self._seen[seen] = None
        if len(self._seen) > self._seen_capacity:
            del self._seen[next(iter(self._seen))]

    def _enqueue(self, chat: Conversation, event: MessageJson) -> None:
        if len(chat.inbox) >= self._max_waiting:
            dropped = chat.inbox.popleft()
            self._counters.dropped += 1
            log.warning(
                "chat-watch %s/%s: queue full (%d), dropped waiting message %s",
                *chat.key,
                self._max_waiting,
                dropped["messageId"],
            )
        chat.inbox.append(dict(event))
        chat.joined.set()  # a streamed reply being written is cut off: this joins the turn

    def _kick(self, chat: Conversation) -> None:
        if self._ready and not self._closed and chat.task is None and chat.inbox:
            chat.task = asyncio.create_task(self._drive(chat), name=f"chat-watch {chat.key}")

    def set_ready(self, ready: bool, reason: str = "") -> None:
        """The responder became ready (waiting messages are taken up) or stopped being so."""
        reason = "" if ready else reason or "not ready"
        if ready != self._ready or reason != self._reason:
            detail = "ready" if ready else f"not ready: {reason}"
            (log.info if ready else log.warning)("chat-watch responder %s", detail)
        self._ready, self._reason = ready, reason
        for chat in list(self._chats.values()):
            self._kick(chat)

    def _unavailable(self, reason: str) -> None:
        """A call found the responder unavailable: not ready until it is again."""
        self.set_ready(False, reason)
        if self.on_unavailable is not None:
            self.on_unavailable()

    # ------------------------------------------------------------ turns

    async def _drive(self, chat: Conversation) -> None:
        try:
            while self._ready and chat.inbox and not self._closed:
                await self._turns.run(chat)  # a failed turn leaves later messages to a new one
        finally:
            chat.task = None  # no await since the loop's last check: no message is stranded
            if not chat.inbox:
                self._chats.pop(chat.key, None)

    # ------------------------------------------------------------ shutdown

    async def close(self) -> None:
        """Stops taking fires and cancels live turns (each records itself as cancelled)."""
        self._closed = True
        tasks = [chat.task for chat in self._chats.values() if chat.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        waiting = sum(len(chat.inbox) for chat in self._chats.values())
        if waiting:
            log.warning("chat-watch closed with %d message(s) unanswered", waiting)
        self._chats.clear()
