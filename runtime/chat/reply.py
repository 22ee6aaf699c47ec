"""chat-watch's replies: what a turn posts in its chat, whole or streamed, and the apology.

Owns posting into a chat (SPEC "chat-watch"): one agent message, or one streamed and edited
as it grows; a cut-off reply ends `done` with a marker saying why; a failed turn's apology.
Also what a turn and its chat share: `Conversation`, `Edges`, `TurnSettings`, the counters.
Every call is bounded on the Clock. Must not call the responder nor decide what a turn
answers (runtime.chat.turn).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from core.aio import within
from core.chatwire import AgentIn, MessageEdit
from core.clock import Clock
from core.wire import TurnIn
from runtime.chat.responders import MessageJson

log = logging.getLogger("runtime.chat.watch")
T = TypeVar("T")
ChatKey = tuple[str, str]  # (space, objectId)
Send = Callable[..., Awaitable[Any]]  # send(space, object_id, text, agent=AgentIn) -> message?
Edit = Callable[[str, str, str, MessageEdit], Awaitable[Any]]  # (space, chat, id, body)
History = Callable[[str, str, int], Awaitable[list[MessageJson]]]
RecordTurn = Callable[[TurnIn], Awaitable[Any]]

AGENT_NAME = "chat-watch"
DEFAULT_APOLOGY = "Sorry, I could not answer that just now."
CUT_JOINED = "a new message came"  # the turn answers it together with what was cut
CUT_FAILED = "the model failed"
CUT_STOPPED = "the device stopped"


def cut_text(text: str, why: str) -> str:
    """What a reply cut off shows: the words written so far, then why it ends there."""
    return f"{text.rstrip()} [cut off: {why}]"


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


class Conversation:
    """One chat's waiting messages and its live turn, if any."""

    def __init__(self, key: ChatKey) -> None:
        self.key = key
        self.inbox: deque[MessageJson] = deque()
        self.task: asyncio.Task[None] | None = None
        self.turn_id = ""
        self.joined = asyncio.Event()  # set when a message comes while a call is answering


@dataclass(frozen=True, kw_only=True)
class Edges:
    """Where turns meet the space: the daemon binds them (tests bind fakes)."""

    send: Send
    history: History
    record_turn: RecordTurn
    edit: Edit | None = None  # None: replies are posted whole, never streamed


@dataclass(frozen=True, kw_only=True)
class TurnSettings:
    snapshot_size: int = 20  # messages of history a turn sees
    reply_timeout: float = 120.0  # seconds for one responder call
    io_timeout: float = 30.0  # seconds for one space call
    stream_interval: float = 0.25  # at most one edit of a growing reply this often
    apology: str | None = DEFAULT_APOLOGY  # posted when a turn fails; None: nothing


class Post:
    """What one turn has posted in its chat."""

    def __init__(self, chat: Conversation) -> None:
        self.chat = chat
        self.replies = 0
        self.posted = False  # the current call has put words in the chat
        self.cut = False  # the current call's reply was cut off by a message joining
        self.growing: tuple[MessageJson, str] | None = None  # a streamed reply not yet ended


def reason(exc: BaseException) -> str:
    """An exception as a turn's error: its type, and its message if it has one."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Replies:
    """Posts a turn's replies through the edges."""

    def __init__(
        self,
        edges: Edges,
        settings: TurnSettings,
        *,
        clock: Clock,
        counters: Counters,
    ) -> None:
        self._edges, self._settings, self._clock = edges, settings, clock
        self._counters = counters

    async def io(self, work: Awaitable[T], what: str) -> T:
        """`work` bounded by the settings' `io_timeout`."""
        return await within(self._clock, self._settings.io_timeout, work, what)

    async def reply(self, post: Post, text: str, done: bool = True) -> MessageJson:
        """Post `text` whole (`done` unless it is the first words of a streamed reply)."""
        chat = post.chat
        agent = AgentIn(name=AGENT_NAME, done=done)
        sent = await self.io(self._edges.send(*chat.key, text, agent=agent), "send")
        post.posted = True
        post.replies += 1
        self._counters.replies += 1
        if isinstance(sent, dict) and "messageId" in sent:
            return sent
        return {"objectId": chat.key[1], "text": text, "agent": msgspec.to_builtins(agent)}

    async def stream(self, post: Post, pieces: AsyncIterator[str]) -> MessageJson | None:
        """Post the reply at its first words and grow it in place as the pieces come.

        A message joining the turn cuts it off (`post.cut`): the rest is not read, and what
        was written ends with the marker."""
        text, message, last = "", None, 0.0
        async for piece in until_set(pieces, post.chat.joined):
            text += piece
            if message is not None:
                post.growing = (message, text)
            if message is None and text.strip():
                message = await self.reply(post, text, done=False)
                last = self._clock.monotonic()
                post.growing = (message, text)
            elif message and self._clock.monotonic() - last >= self._settings.stream_interval:
                message = await self._grow(post.chat, message, text, None)
                last = self._clock.monotonic()
        post.cut = post.chat.joined.is_set()
        post.growing = None
        if message is None:
            return None
        if post.cut:
            return await self._grow(post.chat, message, cut_text(text, CUT_JOINED), True)
        return await self._grow(post.chat, message, text, True)

    async def end_growing(self, post: Post, why: str) -> None:
        """A reply cut short (failure, timeout, stop) keeps its words, says why and ends."""
        if post.growing is None or self._edges.edit is None:
            return
        message, text = post.growing
        post.growing = None
        try:
            await self._grow(post.chat, message, cut_text(text, why), True)
        except Exception as exc:
            log.warning("chat-watch %s/%s: cut reply not ended: %s", *post.chat.key, reason(exc))

    async def _grow(
        self, chat: Conversation, message: MessageJson, text: str, done: bool | None
    ) -> MessageJson:
        assert self._edges.edit is not None
        grown = text if text != message.get("text") else None
        if (grown is None and done is None) or "messageId" not in message:
            return message
        body = MessageEdit(text=grown, done=done)  # None: left as it is
        edited = await self.io(self._edges.edit(*chat.key, message["messageId"], body), "edit")
        return edited if isinstance(edited, dict) and "messageId" in edited else message

    async def apologise(self, chat: Conversation) -> None:
        apology = self._settings.apology
        if apology is None:
            return
        agent = AgentIn(name=AGENT_NAME, done=True)
        try:
            await self.io(self._edges.send(*chat.key, apology, agent=agent), "send")
        except Exception as exc:
            log.warning("chat-watch %s/%s: apology not sent: %s", *chat.key, reason(exc))


async def until_set(pieces: AsyncIterator[str], stop: asyncio.Event) -> AsyncIterator[str]:
    """`pieces` until they end or `stop` is set; then the piece being waited for is cancelled
    and the rest is never read (the generator is closed)."""
    source = aiter(pieces)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        while not stop.is_set():
            step = asyncio.ensure_future(anext(source))
            try:
                await asyncio.wait({step, stopped}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not step.done():
                    step.cancel()
                    await asyncio.gather(step, return_exceptions=True)
            if step.cancelled():
                return
            try:
                piece = step.result()
            except StopAsyncIteration:
                return
            yield piece
    finally:
        stopped.cancel()
        await asyncio.gather(stopped, return_exceptions=True)
        close = getattr(source, "aclose", None)
        if close is not None:
            await close()
