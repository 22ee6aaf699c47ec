"""The seam between what decides a fire and what performs it.

The ticker (cron, once) and the chat subscriptions (event) decide *that* a trigger
fires and with which key; the firing pipeline (`runtime/fire/firing.py`) claims and
admits it, `runtime/fire/execute.py` runs it and `runtime/fire/recorder.py` records it. They
meet here, so neither side imports the other.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

import msgspec

from triggers.records import RESERVED_CHAT_WATCH, FireKey, Trigger

Event = dict[str, Any]
"""An event fire's event, as its program gets it in `args["event"]` (JSON):
`{space, objectId, messageId, text, agent?}`."""


class FireRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One fire of one trigger: the record as armed, its claim key, when it was due."""

    trigger: Trigger
    key: FireKey
    due_at: datetime  # the slot, the `at`, or when the space accepted the message
    event: Event | None = None
    catchup: bool = False  # bridged on a takeover: runs in turn, never crowds out a live fire

    @property
    def for_chat_watch(self) -> bool:
        """A fire of chat-watch: by its reserved id, whatever the record says."""
        return self.trigger.id == RESERVED_CHAT_WATCH


class Dispatcher(Protocol):
    async def fire(self, *requests: FireRequest) -> None:
        """Take fires due together (claimed in one request): returns quickly, never raises;
        each outcome is recorded as a run."""
        ...


def named(record: Any) -> str:
    """A trigger as log lines name it: its name, then its id (`'nightly' trg_…`)."""
    name = getattr(record, "name", "")
    return f"{name!r} {record.id}" if name else str(record.id)
