"""Bounded text: the last (or first) 16 KiB of what a program printed or returned.

Owns the truncation rule and its marker, `…[truncated N bytes]`, and the scanning
of a worker's output pipe for the end-of-run marker. Must not read pipes itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

LIMIT = 16 * 1024


def marker_text(dropped: int) -> str:
    return f"…[truncated {dropped} bytes]"


def keep_tail(text: str, limit: int = LIMIT) -> str:
    """The end of `text`, at most `limit` UTF-8 bytes plus the marker."""
    data = text.encode()
    if len(data) <= limit:
        return text
    kept = data[-limit:].decode(errors="ignore")
    return marker_text(len(data) - limit) + "\n" + kept


def keep_head(data: bytes, limit: int = LIMIT) -> str:
    """The start of `data`, at most `limit` bytes plus the marker."""
    if len(data) <= limit:
        return data.decode(errors="replace")
    return data[:limit].decode(errors="ignore") + marker_text(len(data) - limit)


class Tail:
    """Keeps the last `limit` bytes fed to it and counts the rest."""

    def __init__(self, limit: int = LIMIT) -> None:
        self._limit = limit
        self._buf = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        self._buf += data
        if len(self._buf) > self._limit:
            del self._buf[: len(self._buf) - self._limit]

    def text(self) -> str:
        body = bytes(self._buf).decode(errors="replace")
        dropped = self.total - len(self._buf)
        return f"{marker_text(dropped)}\n{body}" if dropped else body


class Channel:
    """One output pipe of a worker, split into runs by end-of-run markers.

    `begin(marker)` starts a run's `Tail`; bytes up to the marker belong to it, the
    marker itself is dropped, and `done` is set when it is seen (or at end of file).
    Bytes that arrive between runs are discarded.
    """

    def __init__(self) -> None:
        self.tail = Tail()  # until the first run: what the worker printed at start-up
        self.done = _event()
        self._marker: bytes | None = None
        self._carry = b""
        self.closed = False

    def begin(self, marker: bytes) -> Tail:
        self.tail, self.done = Tail(), _event()
        self._marker, self._carry = marker, b""
        if self.closed:
            self.done.set()
        return self.tail

    def feed(self, chunk: bytes) -> None:
        if self._marker is None:
            if not self.done.is_set():
                self.tail.feed(chunk)
            return
        data = self._carry + chunk
        found = data.find(self._marker)
        if found >= 0:
            self.tail.feed(data[:found])
            self._marker, self._carry = None, b""
            self.done.set()
            return
        keep = len(self._marker) - 1
        self.tail.feed(data[: len(data) - keep] if len(data) > keep else b"")
        self._carry = data[-keep:]

    def eof(self) -> None:
        if self._marker is not None:
            self.tail.feed(self._carry)
        self._marker, self._carry, self.closed = None, b"", True
        self.done.set()


def _event() -> asyncio.Event:
    """Imported here: a run process needs the truncation above, not asyncio (the worker
    it is forked from loads asyncio only for programs with an `async def main`)."""
    import asyncio

    return asyncio.Event()
