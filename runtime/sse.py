"""An incremental Server-Sent Events parser for ONE connection (WHATWG HTML §9.2).

Owns turning the bytes of one `text/event-stream` body into `SseEvent`s: UTF-8
with replacement, a leading BOM ignored, CRLF / LF / CR line ends (a CR at the
end of a chunk may pair with an LF at the start of the next), comments skipped,
exactly one space after the colon stripped, `id` values containing NUL ignored,
`retry` ignored (the subscription loop owns its backoff).

One deliberate difference from the browser's EventSource: an event's `id` is the
id given *in that event*, not the last one seen on the stream, so an event
without an id (a `gap`, say) is never mistaken for a repeat of the previous one.

It must not do I/O or keep anything across connections: a new connection gets a
new parser, so an event left incomplete when a stream ends is discarded, never
merged into the next stream's first event.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import Any

import msgspec

_EOL = re.compile(r"\r\n|\r|\n")
MAX_EVENT_CHARS = 1 << 20  # 1 Mi characters per event (data, or one unfinished line)


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


class EventTooLarge(ValueError):
    """One event (or one line) is over `MAX_EVENT_CHARS`: the stream is not one we can follow."""


class SseParser:
    """Feed it chunks of one stream; it answers the events those chunks complete."""

    def __init__(self, max_chars: int = MAX_EVENT_CHARS) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._max = max_chars
        self._pending = ""  # the unfinished last line
        self._skip_lf = False  # the last chunk ended with CR: an LF next is the same line end
        self._started = False
        self._reset()

    def feed(self, chunk: bytes) -> list[SseEvent]:
        text = self._text(chunk)
        if not text:
            return []
        lines = _EOL.split(self._pending + text)
        self._pending = lines.pop()
        self._skip_lf = text.endswith("\r")
        events = [event for line in lines if (event := self._line(line)) is not None]
        self._check_size()
        return events

    def _text(self, chunk: bytes) -> str:
        text = self._decoder.decode(chunk)
        if not self._started and text:
            self._started = True
            text = text.removeprefix("\ufeff")
        if self._skip_lf and text:
            self._skip_lf = False
            text = text.removeprefix("\n")
        return text

    def _line(self, line: str) -> SseEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
            self._size += len(value) + 1
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def _dispatch(self) -> SseEvent | None:
        event = None
        if self._data:
            event = SseEvent(
                event=self._event or "message", data="\n".join(self._data), id=self._id
            )
        self._reset()
        return event

    def _reset(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        self._size = 0

    def _check_size(self) -> None:
        if self._size > self._max or len(self._pending) > self._max:
            raise EventTooLarge(f"an event is over {self._max} characters")
