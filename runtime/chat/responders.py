"""Pluggable chat responders: what chat-watch asks for a reply.

Owns the `Responder` protocol (`ready`, `respond(snapshot, pending)`, optionally `stream`,
`probe`, `close`), its errors (`ResponderFailed`, `ResponderTimeout`,
`ResponderUnavailable`) and two kinds: `BuiltinResponder` and `CallableResponder`. The
others are `runtime.chat.command` and `runtime.chat.openai`; `runtime.chat.choose` names
one. Must not read the clock, post messages, or know turns, dedup or readiness policy.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

MessageJson = dict[str, Any]


class ResponderFailed(RuntimeError):
    """The responder could not produce a reply; the message says why."""


class ResponderUnavailable(ResponderFailed):
    """What the responder needs (its model's endpoint) cannot be reached: not ready."""


class ResponderTimeout(TimeoutError):
    """The responder did not answer in time."""


class InvalidResponderSpec(ValueError):
    """A responder spec that cannot be parsed or loaded."""


@runtime_checkable
class Responder(Protocol):
    @property
    def ready(self) -> bool: ...

    async def respond(self, snapshot: list[MessageJson], pending: list[MessageJson]) -> str | None:
        """A reply to `pending` (oldest first) seen after `snapshot` (recent history)."""
        ...


@runtime_checkable
class Probing(Protocol):
    """A responder that can say why it is not ready ('' when it is)."""

    async def probe(self) -> str: ...


def check_reply(reply: object) -> str | None:
    """`reply` if it is a str or None; an empty or blank string means no reply."""
    if reply is None or isinstance(reply, str):
        return reply if reply and reply.strip() else None
    raise ResponderFailed(f"reply: must be a string or null, got {type(reply).__name__}")


# ---------------------------------------------------------------- builtin


HELP = "I answer 'help', 'time?' and 'why didn't NAME fire?'; anything else I acknowledge."
WHY = re.compile(r"why (?:didn'?t|did not|did|has|hasn'?t) (.+?) (?:fire|run)", re.IGNORECASE)
Explain = Callable[
    [str], Awaitable[Any]
]  # the space's `why` answer, as sent; None: no such trigger


class BuiltinResponder:
    """The demo responder: acknowledges each message and answers `help`, `time?` and, given
    `explain` (the space's `why`), "why didn't NAME fire?"."""

    ready = True
    describe = "builtin"

    def __init__(self, now: Callable[[], datetime], explain: Explain | None = None) -> None:
        self._now = now
        self.explain = explain

    async def respond(self, snapshot: list[MessageJson], pending: list[MessageJson]) -> str | None:
        if not pending:
            return None
        count = f"{len(pending)} message" + ("s" if len(pending) > 1 else "")
        lines = [f"Answering {count}:"] + [f"- {await self._answer(m)}" for m in pending]
        return "\n".join(lines)

    async def _answer(self, message: MessageJson) -> str:
        text = str(message.get("text", "")).strip()
        command = text.lower().rstrip("?!. ")
        if command in ("help", "/help"):
            return HELP
        if command in ("time", "/time", "what time is it"):
            return f"it is {self._now():%Y-%m-%d %H:%M} UTC"
        asked = WHY.search(text)
        if asked is not None and self.explain is not None:
            return await self._why(asked.group(1).strip(" '\"`"))
        shown = text if len(text) <= 60 else text[:57] + "..."
        return f"noted: {shown!r}"

    async def _why(self, name: str) -> str:
        try:
            got = await self.explain(name) if self.explain is not None else None
        except Exception as exc:  # the space refused or is away: say so, the turn goes on
            return f"I could not ask the space why {name!r} fired or not: {exc}"
        if got is None:
            return f"there is no trigger named {name!r}"
        said = f"{name}: {got['verdict']} ({got['reason']}) at {got.get('slot') or got['at']}"
        said += f": {got['detail']}"
        return said + (f". Remedy: {got['remedy']}" if got.get("remedy") else "")


# ---------------------------------------------------------------- callable


class CallableResponder:
    """A Python callable `fn(snapshot, pending)`; a sync one runs in a thread, off the loop."""

    ready = True

    def __init__(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise InvalidResponderSpec(f"fn: must be callable, got {type(fn).__name__}")
        self._fn = fn
        module, name = getattr(fn, "__module__", "?"), getattr(fn, "__qualname__", "?")
        self.describe = f"python {module}:{name}"

    async def respond(self, snapshot: list[MessageJson], pending: list[MessageJson]) -> str | None:
        if inspect.iscoroutinefunction(self._fn):
            return check_reply(await self._fn(snapshot, pending))
        result = await asyncio.to_thread(self._fn, snapshot, pending)
        if inspect.isawaitable(result):
            result = await result
        return check_reply(result)
