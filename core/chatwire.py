"""The chat bodies of the space API: a message as posted, edited and answered, and a page.

Owns the chat Structs the server decodes and answers with (`space/chats.py`,
`space/chat_store.py`), shared like the rest of `core.wire` (and on its two bases: a
request `Body` refuses unknown fields, an `Answer` ignores them) so a client decodes the
same shapes. A page is read as `MessagePage[msgspec.Raw]` and each message decoded on
its own (`each`), so one message that does not fit costs that message, not the page.
Imports nothing of ours but `core.wire`; must not know tables or HTTP.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Generic, TypeVar

import msgspec

from core.wire import Answer, Body

NAME_MAX = 200
M = TypeVar("M")


class Agent(Answer, frozen=True, kw_only=True, omit_defaults=True):
    """Who wrote an agent message, as answered: `agent` present means the agent wrote it."""

    name: str
    done: bool | None = None


NUDGE_PREFIX = "trigger:"  # an agent message named `trigger:<job>` is a nudge (SPEC "chat-watch")


class AgentIn(Agent, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`agent` as posted: the same, bounded, refusing unknown fields."""

    name: Annotated[str, msgspec.Meta(min_length=1, max_length=NAME_MAX)]


class MessageIn(Body, frozen=True, kw_only=True):
    text: str
    agent: AgentIn | None = None


class MessageEdit(Body, frozen=True, kw_only=True, omit_defaults=True):
    """A change to an agent message still being written: its whole new `text`, and `done`."""

    text: str | None = None
    done: bool | None = None


class Message(Answer, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    message_id: str
    seq: int
    object_id: str
    text: str
    created_at: str
    agent: Agent | None = None


class MessagePage(Answer, Generic[M], frozen=True, kw_only=True):
    """A history page: the server documents `MessagePage[Message]`, a client reads
    `MessagePage[msgspec.Raw]` and decodes each message with `each`."""

    messages: list[M]
    next: int = 0  # pass as `after` for the following page
    more: bool = False


WIRE_MESSAGE = msgspec.json.Decoder(Message)
"""A message as the space answers it (a decoder, built once)."""


def each(
    raws: Iterable[msgspec.Raw], decoder: msgspec.json.Decoder[M]
) -> tuple[list[M], list[str]]:
    """The messages `decoder` takes, in order, and why each other one did not fit."""
    found: list[M] = []
    errors: list[str] = []
    for raw in raws:
        try:
            found.append(decoder.decode(raw))
        except msgspec.DecodeError as exc:  # ValidationError included
            errors.append(str(exc))
    return found, errors
