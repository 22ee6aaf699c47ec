"""The command responder: an external program asked for each reply, one process per call.

Owns `CommandResponder` (SPEC chat-watch, `--responder command:ARGV`): `{"snapshot",
"pending"}` as JSON on the command's stdin, `{"reply": str | null}` on its stdout. The
command runs in a session of its own, both pipes are drained concurrently (so neither
fills and stalls), stdout is capped at `STDOUT_CAP` and the tail of stderr kept for the
reason of a failure, and on a timeout its whole process group is killed. Must not know
about chats or turns (runtime.chat.watch).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Sequence

from core.aio import within
from core.clock import Clock, SystemClock
from core.jsonobject import json_object
from runtime.chat.responders import (
    InvalidResponderSpec,
    MessageJson,
    ResponderFailed,
    ResponderTimeout,
    check_reply,
)

STDOUT_CAP = 1 << 20  # a reply bigger than 1 MiB of JSON is refused
STDERR_TAIL = 2000  # characters of a failed command's stderr kept in the reason


class CommandResponder:
    """Runs `argv` once per call: `{"snapshot", "pending"}` on stdin, `{"reply"}` on stdout."""

    ready = True

    def __init__(
        self, argv: Sequence[str], timeout: float = 60.0, *, clock: Clock | None = None
    ) -> None:
        if not argv or not all(isinstance(a, str) and a for a in argv):
            raise InvalidResponderSpec("argv: must be a non-empty list of non-empty strings")
        if not timeout > 0:
            raise InvalidResponderSpec(f"timeout: must be > 0, got {timeout!r}")
        self.argv, self.timeout = list(argv), timeout
        self._clock = clock or SystemClock()
        self.describe = f"command {self.argv[0]}"

    async def respond(self, snapshot: list[MessageJson], pending: list[MessageJson]) -> str | None:
        payload = json.dumps({"snapshot": snapshot, "pending": pending}).encode()
        proc = await self._spawn()
        try:
            out, err = await within(self._clock, self.timeout, _exchange(proc, payload))
        except TimeoutError:
            raise ResponderTimeout(
                f"command {self.argv[0]} timed out after {self.timeout:g} s (killed)"
            ) from None
        finally:
            await _reap(proc)
        return self._reply(proc.returncode, out, err)

    async def _spawn(self) -> asyncio.subprocess.Process:
        try:
            return await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise ResponderFailed(f"command {self.argv[0]} cannot start: {exc}") from None

    def _reply(self, code: int | None, out: bytes, err: bytes) -> str | None:
        name = self.argv[0]
        if code != 0:
            tail = err.decode(errors="replace")[-STDERR_TAIL:].strip()
            tail = tail or "(no stderr)"
            raise ResponderFailed(f"command {name} exited with code {code}: {tail}")
        if len(out) > STDOUT_CAP:
            raise ResponderFailed(f"command {name} wrote more than {STDOUT_CAP} bytes")
        try:
            return check_reply(json_object(out).get("reply"))
        except (ValueError, ResponderFailed) as exc:
            raise ResponderFailed(f"command {name}: stdout: {exc}") from None


async def _exchange(proc: asyncio.subprocess.Process, payload: bytes) -> tuple[bytes, bytes]:
    """Feeds stdin and drains both pipes concurrently (so neither can fill and stall)."""
    out, err = await asyncio.gather(
        _feed_then_read(proc, payload), _read_tail(proc.stderr, STDERR_TAIL * 4)
    )
    await proc.wait()
    return out, err


async def _feed_then_read(proc: asyncio.subprocess.Process, payload: bytes) -> bytes:
    assert proc.stdin is not None and proc.stdout is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(payload)
        await proc.stdin.drain()
    proc.stdin.close()
    return await _read_head(proc.stdout, STDOUT_CAP + 1)


async def _read_head(stream: asyncio.StreamReader, keep: int) -> bytes:
    """The first `keep` bytes; the rest is drained and dropped."""
    head = b""
    while chunk := await stream.read(1 << 16):
        head += chunk[: max(0, keep - len(head))]
    return head


async def _read_tail(stream: asyncio.StreamReader | None, keep: int) -> bytes:
    """The last `keep` bytes."""
    tail = b""
    while stream is not None and (chunk := await stream.read(1 << 16)):
        tail = (tail + chunk)[-keep:]
    return tail


async def _reap(proc: asyncio.subprocess.Process) -> None:
    """Kills the command's process group if it is still running, and waits for it."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()
