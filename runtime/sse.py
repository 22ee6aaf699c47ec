"""The event a subscription delivers: one Server-Sent Event, as the caller's callback sees it.

Owns the value only (name, data, id) and reading its id as an integer cursor or its
data as JSON. Parsing the wire is aiohttp-sse-client's, wrapped in `runtime.subscribe`;
this module must not do I/O or parse streams.

An event's `id` is the id given *in that event*, not the last one seen on the stream
(the browser's and the package's rule), so an event without an id (a `gap`, say) is
never mistaken for a repeat of the previous one.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec


class SseEvent(msgspec.Struct, frozen=True, kw_only=True):
    event: str = "message"
    data: str = ""
    id: str | None = None

    @property
    def seq(self) -> int | None:
        """The id as an integer cursor, or None when there is no integer id."""
        if self.id is None or not self.id.isascii() or not self.id.isdigit():
            return None
        return int(self.id)

    def json(self) -> Any:
        """The data, decoded as JSON (ValueError if it is not JSON)."""
        return json.loads(self.data)
