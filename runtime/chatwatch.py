"""chat-watch: the conversation watcher that the reserved `chat-watch` trigger's fires go to.

Owns, per chat, the conversation with a `Responder` (SPEC "chat-watch"): which fires are
answered (users and `trigger:<job>` nudges; never its own replies nor other agent
messages; each message at most once, by a bounded memory of message ids), the turn that
answers them (a snapshot of recent history taken once, then responder calls while the
chat's inbox is non-empty, so a message arriving mid-turn joins that turn), the wait
while the responder is not ready (bounded per chat, oldest dropped and counted; a call
that finds the responder unavailable puts its messages back to wait, and says why), a
reply that streams (one agent message posted at its first words with `done` false, then
edited in place as it grows, at most every `stream_interval` seconds, and `done` at its
end), and the `agent_turns` entry each turn leaves. Turns of different chats run concurrently; turns
of one chat never overlap; one chat's failure is its own.

Must not subscribe to streams, claim fires, write run records or stamps, or read time
other than through its `Clock`. The daemon feeds `offer()` and binds `send`, `edit`,
`history` and `record_turn` to the space; each recorded turn is one conversation start for the
trigger's rollup (`programs.rollup.conversation_started`).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import secrets
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import msgspec

from core.clock import Clock, SystemClock
from runtime.responders import Message, Responder, ResponderUnavailable, check_reply

log = logging.getLogger(__name__)
T = TypeVar("T")
ChatKey = tuple[str, str]  # (space, objectId)
Send = Callable[..., Awaitable[Any]]  # send(space, object_id, text, agent={...}) -> message?
Edit = Callable[[str, str, str, dict[str, Any]], Awaitable[Any]]  # (space, chat, id, body)
History = Callable[[str, str, int], Awaitable[list[Message]]]
RecordTurn = Callable[[dict[str, Any]], Awaitable[Any]]

AGENT_NAME = "chat-watch"
NUDGE_PREFIX = "trigger:"
DEFAULT_APOLOGY = "Sorry, I could not answer that just now."


class TurnOutcome(enum.StrEnum):
    ok = "ok"
    error = "error"
    timeout = "timeout"
    cancelled = "cancelled"


class AgentTurn(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One `agent_turns` entry (not a run record)."""

    turn_id: str
    space: str
    object_id: str
    message_ids: list[str]
    calls: int  # responder calls (more than one when messages joined mid-turn)
    replies: int  # messages posted (the apology of a failed turn not included)
    started_at: datetime
    finished_at: datetime
    duration_ms: float
    outcome: TurnOutcome
    error: str = ""


class Counters(msgspec.Struct, kw_only=True):
    offered: int = 0  # fires handed to offer()
    malformed: int = 0
    ignored: int = 0  # agent messages that are not nudges (its own replies included)
    duplicates: int = 0
    nudges: int = 0  # accepted `trigger:<job>` messages
    dropped: int = 0  # oldest waiting messages pushed out of a full chat queue
    starts: int = 0  # conversation starts: turns begun
    answered: int = 0  # messages handed to the responder
    replies: int = 0
    failed: int = 0  # turns that ended in error or timeout
    unrecorded: int = 0  # turns whose entry `record_turn` did not take


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


def answerable(event: dict[str, Any]) -> bool:
    """User messages and nudges (`agent.name` = `trigger:<job>`); no other agent message."""
    agent = event.get("agent")
    if agent is None:  # absent or null: a person wrote it
        return True
    name = agent.get("name") if isinstance(agent, dict) else None
    return isinstance(name, str) and name.startswith(NUDGE_PREFIX) and name != NUDGE_PREFIX


class _Chat:
    def __init__(self, key: ChatKey) -> None:
        self.key = key
        self.inbox: deque[Message] = deque()
        self.task: asyncio.Task[None] | None = None
        self.turn_id = ""


class _Turn:
    def __init__(self, chat: _Chat, clock: Clock) -> None:
        self.chat, self.clock = chat, clock
        self.turn_id = "turn_" + secrets.token_hex(6)
        self.started_at, self.t0 = clock.wall(), clock.monotonic()
        self.message_ids: list[str] = []
        self.calls = self.replies = 0
        self.posted = False  # the current call has put words in the chat
        self.growing: tuple[Message, str] | None = None  # a streamed reply not yet ended
        self.outcome, self.error = TurnOutcome.ok, ""

    def fail(self, outcome: TurnOutcome, error: str) -> None:
        if self.outcome is TurnOutcome.ok:  # the first failure is the one that counts
            self.outcome, self.error = outcome, error

    def entry(self) -> AgentTurn:
        space, object_id = self.chat.key
        return AgentTurn(
            turn_id=self.turn_id, space=space, object_id=object_id,
            message_ids=list(self.message_ids), calls=self.calls, replies=self.replies,
            started_at=self.started_at, finished_at=self.clock.wall(),
            duration_ms=round((self.clock.monotonic() - self.t0) * 1000, 3),
            outcome=self.outcome, error=self.error,
        )  # fmt: skip


class _Deferred(Exception):
    """The responder was unavailable: the turn's messages wait for it again."""


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


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
        for name, value in (("snapshot_size", snapshot_size), ("seen_capacity", seen_capacity),
                            ("max_waiting", max_waiting), ("reply_timeout", reply_timeout),
                            ("io_timeout", io_timeout)):  # fmt: skip
            _positive(name, value)
        self._responder, self._send, self._history = responder, send, history
        self._record_turn, self._clock = record_turn, clock or SystemClock()
        self._snapshot_size, self._seen_capacity = snapshot_size, seen_capacity
        self._max_waiting, self._apology = max_waiting, apology
        self._reply_timeout, self._io_timeout = reply_timeout, io_timeout
        self._ready = bool(getattr(responder, "ready", True))
        self._reason = "" if self._ready else "not probed yet"
        self._edit, self._stream_interval = edit, stream_interval
        self.on_unavailable: Callable[[], None] | None = None  # e.g. probe again soon
        self._seen: dict[tuple[str, str], None] = {}  # insertion-ordered: oldest forgotten first
        self._chats: dict[ChatKey, _Chat] = {}
        self._counters = Counters()
        self._closed = False

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
        return WatchStatus(ready=self._ready, reason=self._reason, closed=self._closed,
                           chats=chats, counters=self.counters)  # fmt: skip

    # ------------------------------------------------------------ intake

    async def offer(self, event: dict[str, Any]) -> None:
        """One fire of chat-watch. Never waits for the responder; never raises for the event."""
        if self._closed:
            log.warning("chat-watch closed: a fire was not taken")
            return
        if not self._accept(event):
            return
        key = (event["space"], event["objectId"])
        chat = self._chats.get(key) or self._chats.setdefault(key, _Chat(key))
        self._enqueue(chat, event)
        self._kick(chat)

    def _accept(self, event: dict[str, Any]) -> bool:
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

    def _enqueue(self, chat: _Chat, event: dict[str, Any]) -> None:
        if len(chat.inbox) >= self._max_waiting:
            dropped = chat.inbox.popleft()
            self._counters.dropped += 1
            log.warning("chat-watch %s/%s: queue full (%d), dropped waiting message %s",
                        *chat.key, self._max_waiting, dropped["messageId"])  # fmt: skip
        chat.inbox.append(dict(event))

    def _kick(self, chat: _Chat) -> None:
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

    # ------------------------------------------------------------ turns

    async def _drive(self, chat: _Chat) -> None:
        try:
            while self._ready and chat.inbox and not self._closed:
                await self._turn(chat)  # a failed turn leaves later messages to a new one
        finally:
            chat.task = None  # no await since the loop's last check: no message is stranded
            if not chat.inbox:
                self._chats.pop(chat.key, None)

    async def _turn(self, chat: _Chat) -> None:
        turn = _Turn(chat, self._clock)
        chat.turn_id = turn.turn_id
        self._counters.starts += 1
        log.info("turn %s %s/%s ← %d message(s)", turn.turn_id, *chat.key, len(chat.inbox))
        try:
            try:
                await self._converse(turn)
            except _Deferred as deferred:
                turn.fail(TurnOutcome.error, f"responder unavailable, messages wait: {deferred}")
                self._counters.failed += 1
            except Exception as exc:
                timed_out = isinstance(exc, TimeoutError)
                turn.fail(TurnOutcome.timeout if timed_out else TurnOutcome.error, _reason(exc))
                self._counters.failed += 1
                await self._end_growing(turn)
                await self._apologise(chat)
        except asyncio.CancelledError:
            turn.fail(TurnOutcome.cancelled, "chat-watch closed during the turn")
            await self._finish(turn)
            raise
        await self._finish(turn)

    async def _converse(self, turn: _Turn) -> None:
        chat = turn.chat
        view = await self._snapshot(chat)
        while chat.inbox and self._ready:
            pending = list(chat.inbox)
            chat.inbox.clear()
            ids = {m["messageId"] for m in pending}
            turn.message_ids += [m["messageId"] for m in pending]
            self._counters.answered += len(pending)
            context = [m for m in view if m.get("messageId") not in ids]
            turn.posted = False
            try:
                reply = await self._within(self._answer(turn, context, pending),
                                           self._reply_timeout, "responder")  # fmt: skip
            except ResponderUnavailable as exc:
                if turn.posted:
                    raise
                self._defer(turn, pending, str(exc))
            turn.calls += 1
            view = context + pending
            if reply is not None:
                view.append(reply)
            view = view[-self._snapshot_size :]

    def _defer(self, turn: _Turn, pending: list[Message], reason: str) -> None:
        """Put `pending` back to wait, oldest first, and stop answering until ready again."""
        chat = turn.chat
        chat.inbox.extendleft(reversed(pending))
        turn.message_ids = turn.message_ids[: len(turn.message_ids) - len(pending)]
        self._counters.answered -= len(pending)
        self.set_ready(False, reason)
        if self.on_unavailable is not None:
            self.on_unavailable()
        raise _Deferred(reason)

    async def _answer(
        self, turn: _Turn, context: list[Message], pending: list[Message]
    ) -> Message | None:
        """The reply posted in the chat (streamed in place when the responder can), or None."""
        stream = getattr(self._responder, "stream", None)
        if stream is None or self._edit is None:
            text = check_reply(await self._responder.respond(context, pending))
            return None if text is None else await self._reply(turn, text)
        return await self._stream_reply(turn, stream(context, pending))

    async def _stream_reply(self, turn: _Turn, pieces: AsyncIterator[str]) -> Message | None:
        text, flushed, message, last = "", "", None, 0.0
        async for piece in pieces:
            text += piece
            if message is not None:
                turn.growing = (message, text)
            if message is None and text.strip():
                message = await self._reply(turn, text, done=False)
                flushed, last = text, self._clock.monotonic()
                turn.growing = (message, text)
            elif message and self._clock.monotonic() - last >= self._stream_interval:
                message = await self._grow(turn.chat, message, text, None)
                flushed, last = text, self._clock.monotonic()
        if message is None:
            return None
        done = not (turn.chat.inbox and self._ready)
        turn.growing = None
        if not done and text == flushed:
            return message
        return await self._grow(turn.chat, message, text, done)

    async def _end_growing(self, turn: _Turn) -> None:
        """A reply cut short (failure, timeout) keeps the words written so far and ends."""
        if turn.growing is None or self._edit is None:
            return
        message, text = turn.growing
        turn.growing = None
        try:
            await self._grow(turn.chat, message, text, True)
        except Exception as exc:
            log.warning("chat-watch %s/%s: cut reply not ended: %s", *turn.chat.key, _reason(exc))

    async def _grow(
        self, chat: _Chat, message: Message, text: str, done: bool | None
    ) -> Message:
        assert self._edit is not None
        body: dict[str, Any] = {"text": text} if text != message.get("text") else {}
        if done is not None:
            body["done"] = done
        if not body or "messageId" not in message:
            return message
        edited = await self._within(self._edit(*chat.key, message["messageId"], body),
                                    self._io_timeout, "edit")  # fmt: skip
        return edited if isinstance(edited, dict) and "messageId" in edited else message

    async def _snapshot(self, chat: _Chat) -> list[Message]:
        """Recent history, taken once per turn, oldest first."""
        messages = await self._within(
            self._history(*chat.key, self._snapshot_size), self._io_timeout, "history"
        )
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise TypeError("history: must return a list of message objects")
        if all(isinstance(m.get("seq"), int) for m in messages):
            messages = sorted(messages, key=lambda m: m["seq"])
        return messages[-self._snapshot_size :]

    async def _reply(self, turn: _Turn, text: str, done: bool | None = None) -> Message:
        chat = turn.chat
        done = not (chat.inbox and self._ready) if done is None else done
        agent = {"name": AGENT_NAME, "done": done}
        sent = await self._within(self._send(*chat.key, text, agent=agent), self._io_timeout,
                                  "send")  # fmt: skip
        turn.posted = True
        turn.replies += 1
        self._counters.replies += 1
        if isinstance(sent, dict) and "messageId" in sent:
            return sent
        return {"objectId": chat.key[1], "text": text, "agent": agent}

    async def _apologise(self, chat: _Chat) -> None:
        if self._apology is None:
            return
        agent = {"name": AGENT_NAME, "done": True}
        try:
            await self._within(self._send(*chat.key, self._apology, agent=agent),
                               self._io_timeout, "send")  # fmt: skip
        except Exception as exc:
            log.warning("chat-watch %s/%s: apology not sent: %s", *chat.key, _reason(exc))

    async def _finish(self, turn: _Turn) -> None:
        entry = turn.entry()
        turn.chat.turn_id = ""
        detail = f": {entry.error}" if entry.error else ""
        log.info("turn %s ← %s %.0f ms%s", entry.turn_id, entry.outcome, entry.duration_ms, detail)
        try:
            raw = msgspec.to_builtins(entry)
            await self._within(self._record_turn(raw), self._io_timeout, "record_turn")
        except Exception as exc:
            self._counters.unrecorded += 1
            log.warning("turn %s not recorded: %s", entry.turn_id, _reason(exc))

    async def _within(self, work: Awaitable[T], seconds: float, what: str) -> T:
        """`work`'s result, or TimeoutError once `seconds` pass on the Clock (work cancelled)."""
        task = asyncio.ensure_future(work)
        timer = asyncio.ensure_future(self._clock.sleep(seconds))
        try:
            done, _ = await asyncio.wait((task, timer), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pending in (task, timer):
                pending.cancel()
            await asyncio.gather(task, timer, return_exceptions=True)
        if task not in done:
            raise TimeoutError(f"{what} timed out after {seconds:g} s")
        return task.result()

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
