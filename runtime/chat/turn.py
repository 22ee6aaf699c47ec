"""A chat-watch turn: the conversation that answers one chat's waiting messages.

Owns a turn (SPEC "chat-watch"): one history snapshot, then responder calls while the inbox
is non-empty (a message arriving mid-turn joins it and cuts a streamed reply); an
unavailable responder puts the messages back; a failure or a stop ends the turn; each turn
leaves a `TurnIn` for `record_turn`. Calls are bounded on the Clock. Must not decide
which fires are answered nor readiness (runtime.chat.watch), nor what a turn stamps.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable

from core.aio import within
from core.clock import Clock
from core.vocab import TurnOutcome
from core.wire import TurnIn
from runtime.chat.reply import (
    CUT_FAILED,
    CUT_STOPPED,
    Conversation,
    Counters,
    Edges,
    Post,
    Replies,
    TurnSettings,
    reason,
)
from runtime.chat.responders import MessageJson, Responder, ResponderUnavailable, check_reply

log = logging.getLogger("runtime.chat.watch")


class _Turn:
    def __init__(self, chat: Conversation, clock: Clock) -> None:
        self.chat, self.clock = chat, clock
        self.turn_id = "turn_" + secrets.token_hex(6)
        self.started_at, self.t0 = clock.wall(), clock.monotonic()
        self.message_ids: list[str] = []
        self.calls = 0
        self.post = Post(chat)
        self.outcome, self.error = TurnOutcome.OK, ""

    def fail(self, outcome: TurnOutcome, error: str) -> None:
        if self.outcome is TurnOutcome.OK:  # the first failure is the one that counts
            self.outcome, self.error = outcome, error

    def entry(self) -> TurnIn:
        """The turn's `agent_turns` entry (not a run record)."""
        space, object_id = self.chat.key
        return TurnIn(
            turnId=self.turn_id,
            space=space,
            objectId=object_id,
            messageIds=list(self.message_ids),
            calls=self.calls,  # responder calls (more than one when messages joined mid-turn)
            replies=self.post.replies,  # messages posted (a failed turn's apology not included)
            startedAt=self.started_at,
            finishedAt=self.clock.wall(),
            durationMs=round((self.clock.monotonic() - self.t0) * 1000, 3),
            outcome=self.outcome,
            error=self.error,
        )


class _Deferred(Exception):
    """The responder was unavailable: the turn's messages wait for it again."""


class Turns:
    """Runs the turns of chat-watch's chats, one `run(chat)` per turn."""

    def __init__(
        self,
        responder: Responder,
        edges: Edges,
        settings: TurnSettings,
        *,
        clock: Clock,
        counters: Counters,
        ready: Callable[[], bool],
        unavailable: Callable[[str], None],
    ) -> None:
        self._responder, self._edges, self._settings = responder, edges, settings
        self._clock, self._counters = clock, counters
        self._ready, self._unavailable = ready, unavailable
        self._replies = Replies(edges, settings, clock=clock, counters=counters)

    async def run(self, chat: Conversation) -> None:
        """One turn of `chat`: answer its inbox until empty (or not ready), then record it."""
        turn = _Turn(chat, self._clock)
        chat.turn_id = turn.turn_id
        self._counters.starts += 1
        log.info("turn %s %s/%s ← %d message(s)", turn.turn_id, *chat.key, len(chat.inbox))
        try:
            try:
                await self._converse(turn)
            except _Deferred as deferred:
                turn.fail(TurnOutcome.ERROR, f"responder unavailable, messages wait: {deferred}")
                self._counters.failed += 1
            except Exception as exc:
                timed_out = isinstance(exc, TimeoutError)
                turn.fail(TurnOutcome.TIMEOUT if timed_out else TurnOutcome.ERROR, reason(exc))
                self._counters.failed += 1
                await self._replies.end_growing(turn.post, CUT_FAILED)
                await self._replies.apologise(chat)
        except asyncio.CancelledError:
            turn.fail(TurnOutcome.CANCELLED, "chat-watch closed during the turn")
            await self._replies.end_growing(turn.post, CUT_STOPPED)
            await self._finish(turn)
            raise
        await self._finish(turn)

    async def _converse(self, turn: _Turn) -> None:
        chat = turn.chat
        view = await self._snapshot(chat)
        while chat.inbox and self._ready():
            pending = list(chat.inbox)
            chat.inbox.clear()
            chat.joined.clear()
            ids = {m["messageId"] for m in pending}
            turn.message_ids += [m["messageId"] for m in pending]
            self._counters.answered += len(pending)
            context = [m for m in view if m.get("messageId") not in ids]
            turn.post.posted, turn.post.cut = False, False
            try:
                reply = await within(
                    self._clock,
                    self._settings.reply_timeout,
                    self._answer(turn, context, pending),
                    "responder",
                )
            except ResponderUnavailable as exc:
                if turn.post.posted:
                    raise
                self._defer(turn, pending, str(exc))
            turn.calls += 1
            if turn.post.cut:  # a message joined: answer it with these, the partial unseen
                self._put_back(turn, pending)
                view = context
                continue
            view = context + pending
            if reply is not None:
                view.append(reply)
            view = view[-self._settings.snapshot_size :]

    def _defer(self, turn: _Turn, pending: list[MessageJson], reason: str) -> None:
        """Put `pending` back to wait, oldest first, and stop answering until ready again."""
        self._put_back(turn, pending)
        self._unavailable(reason)
        raise _Deferred(reason)

    def _put_back(self, turn: _Turn, pending: list[MessageJson]) -> None:
        """`pending` waits again at the head of the inbox, not yet answered."""
        turn.chat.inbox.extendleft(reversed(pending))
        turn.message_ids = turn.message_ids[: len(turn.message_ids) - len(pending)]
        self._counters.answered -= len(pending)

    async def _answer(
        self, turn: _Turn, context: list[MessageJson], pending: list[MessageJson]
    ) -> MessageJson | None:
        """The reply posted in the chat (streamed in place when the responder can), or None."""
        stream = getattr(self._responder, "stream", None)
        if stream is None or self._edges.edit is None:
            text = check_reply(await self._responder.respond(context, pending))
            return None if text is None else await self._replies.reply(turn.post, text)
        return await self._replies.stream(turn.post, stream(context, pending))

    async def _snapshot(self, chat: Conversation) -> list[MessageJson]:
        """Recent history, taken once per turn, oldest first."""
        size = self._settings.snapshot_size
        messages = await self._replies.io(self._edges.history(*chat.key, size), "history")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise TypeError("history: must return a list of message objects")
        if all(isinstance(m.get("seq"), int) for m in messages):
            messages = sorted(messages, key=lambda m: m["seq"])
        return messages[-self._settings.snapshot_size :]

    async def _finish(self, turn: _Turn) -> None:
        entry = turn.entry()
        turn.chat.turn_id = ""
        detail = f": {entry.error}" if entry.error else ""
        log.info("turn %s ← %s %.0f ms%s", entry.turnId, entry.outcome, entry.durationMs, detail)
        try:
            await self._replies.io(self._edges.record_turn(entry), "record_turn")
        except Exception as exc:
            self._counters.unrecorded += 1
            log.warning("turn %s not recorded: %s", entry.turnId, reason(exc))
