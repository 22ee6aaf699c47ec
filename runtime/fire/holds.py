"""Holds: what keeps an admitted fire from running its program, by the record's policies.

Owns the two checks made just before a run starts (SPEC "Trigger policies"): a spent
`budget` (runs started within its period, from the trigger's rollup, so it follows the
trigger between devices) and a `quietChat` in which a person wrote just now (the chat's
newest messages, read from the space). Either is a `skipped` run with its reason; a
chat that cannot be read holds nothing back (logged). Must not claim, run or record.
"""

from __future__ import annotations

import logging
from datetime import datetime

from core import chatwire
from core.vocab import RunReason
from runtime.client.api import ApiError
from runtime.client.seat import Seat
from runtime.fire.bodies import Book
from triggers import policies
from triggers.records import Trigger

log = logging.getLogger(__name__)

QUIET_LOOKBACK = 100
"""How many of a quiet chat's newest messages are read for the last one a person wrote."""


class Holds:
    """`await holds.reason(record, book, now)`: why the fire may not run now, or ""."""

    def __init__(self, seat: Seat) -> None:
        self._client, self._space, _, _ = seat

    async def reason(self, record: Trigger, book: Book, now: datetime) -> str:
        if policies.over_budget(record.budget, book.rollup.recent_starts, now):
            return RunReason.BUDGET
        quiet = record.quiet_chat
        if quiet is not None and policies.chat_active(quiet, await self._person_wrote(quiet), now):
            return RunReason.CHAT_ACTIVE
        return ""

    async def _person_wrote(self, quiet: policies.QuietChat) -> datetime | None:
        """When a person last wrote in the quiet chat (None: not among its newest messages)."""
        try:
            page = await self._client.chat_messages(
                self._space, quiet.object_id, limit=QUIET_LOOKBACK, latest=True
            )
        except ApiError as exc:
            log.warning("quiet chat %s not read, not held: %s", quiet.object_id, exc)
            return None
        written, _ = chatwire.each(page.messages, chatwire.WIRE_MESSAGE)
        for message in reversed(written):
            if message.agent is None:
                return datetime.fromisoformat(message.created_at)
        return None
