"""The chat bodies of the space API: a message as posted, edited and answered, and a page.

Owns the chat Structs the server decodes and answers with (`space/chats.py`,
`space/chat_store.py`), shared like the rest of `core.wire` so a client decodes the
same shapes. Imports nothing of ours; must not know tables or HTTP.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

NAME_MAX = 200


class Agent(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=NAME_MAX)]
    done: bool | None = None


class MessageIn(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    text: str
    agent: Agent | None = None


class MessageEdit(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A change to an agent message still being written: its whole new `text`, and `done`."""

    text: str | None = None
    done: bool | None = None


class Message(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    message_id: str
    seq: int
    object_id: str
    text: str
    created_at: str
    agent: Agent | None = None


class MessagePage(msgspec.Struct, frozen=True, kw_only=True):
    messages: list[Message]
    next: int  # pass as `after` for the following page
    more: bool
