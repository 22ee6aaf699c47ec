"""The control channel between the executor and a worker: framed msgpack messages.

Owns the message shapes and the framing (a 4-byte big-endian length, then a msgpack
body of at most `MAX_FRAME` bytes). This channel is separate from the program's
stdout/stderr, which travel on the worker's fd 1/2. Must not run programs or manage
processes.
"""

from __future__ import annotations

import socket
from typing import Any

import msgspec

from core.vocab import RunStatus
from programs.confine import Containment
from programs.context import RunContext

MAX_FRAME = 1 << 20
HEADER = 4
SPARES = 22  # spares a worker may keep: a 32 MB budget at ≈ 1.4 MB each (docs/decisions.md)


class ProtocolError(ValueError):
    """A peer sent something that is not a valid frame of this protocol."""


class Request(msgspec.Struct, frozen=True, kw_only=True, tag="run"):
    source: str
    ref: str
    args: dict[str, Any]
    context: RunContext | None
    memory_mb: int
    timeout_seconds: float = 60.0  # the worker ends the run (and all it started) after this
    marker: bytes  # written to fd 1 and 2 after the run, so the parent can split output
    key: str = ""  # the job's warm key: a clean run's process may serve the next one (`Job`)
    ports: tuple[int, ...] | None = None  # TCP connect allowed to these only (None: any)
    disk_mb: int = 64  # the scratch directory's quota (the worker ends a run past it)


class Prepare(msgspec.Struct, frozen=True, kw_only=True, tag="prepare"):
    """Runs are due soon: keep this many spares ready (at most the worker's cap). No reply;
    sent to an idle worker, or one mid-run (it reads it after its reply)."""

    spares: int


class Ready(msgspec.Struct, frozen=True, kw_only=True, tag="ready"):
    pid: int
    containment: Containment | None = None  # how contained the worker's runs are


class Reply(msgspec.Struct, frozen=True, kw_only=True, tag="reply"):
    status: RunStatus
    result: bytes | None = None  # JSON text
    error: str = ""
    entered_at: float | None = None  # time.monotonic() when main() was entered
    retire: str = ""  # non-empty: the worker's state is suspect, replace it (why)
    warm: str = ""  # the warm key of the run process kept after this run (empty: none)


_to_worker = msgspec.msgpack.Decoder(Request | Prepare)
_to_run = msgspec.msgpack.Decoder(Request)
_to_parent = msgspec.msgpack.Decoder(Ready | Reply)
_encoder = msgspec.msgpack.Encoder()


def frame(message: Request | Prepare | Ready | Reply) -> bytes:
    body = _encoder.encode(message)
    return len(body).to_bytes(HEADER, "big") + body


def read_exact(sock: socket.socket, size: int) -> bytes | None:
    """`size` bytes, or None at end of file: plain recv straight off the socket (no file
    object to build, no buffer, so a look at the descriptor sees what is not read yet)."""
    got = b""
    while len(got) < size:
        chunk = sock.recv(size - len(got), socket.MSG_WAITALL)
        if not chunk:
            return None
        got += chunk
    return got


def body_length(header: bytes) -> int:
    size = int.from_bytes(header, "big")
    if size > MAX_FRAME:
        raise ProtocolError(f"frame of {size} bytes announced, over the {MAX_FRAME}-byte limit")
    return size


def decode_request(body: bytes) -> Request:
    """A run process's request (from its worker)."""
    return _to_run.decode(body)


def decode_to_worker(body: bytes) -> Request | Prepare:
    return _to_worker.decode(body)


def decode_to_parent(body: bytes) -> Ready | Reply:
    try:
        return _to_parent.decode(body)
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"undecodable frame: {exc}") from None
