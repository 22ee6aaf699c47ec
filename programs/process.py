"""One worker process seen from the parent: spawn it, run a job on it, kill it.

Owns the asyncio side of the protocol in `programs.channel`: the control socket, the
pumps that drain the worker's stdout/stderr continuously (so a flood never blocks
it), the timeout, and turning every way a worker can fail (death, garbage, silence)
into an `Outcome`. Must never hang or raise because of what a worker does, and must
not decide about pools or replacements (that is `programs.executor`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time

import msgspec

from core import bounds
from core.vocab import RunStatus
from programs import channel
from programs.confine import Containment
from programs.job import Job
from programs.outcome import Outcome, exit_reason
from programs.tail import Channel

GRACE_SECONDS = 2.0  # how long output may trail a reply or a death
BACKSTOP_SECONDS = 8.0  # past the run's timeout: the worker ends runs itself, or it is killed


class StartFailed(RuntimeError):
    """A worker did not come up (its start-up stderr is in the message)."""


async def _pump(stream: asyncio.StreamReader, channel: Channel) -> None:
    while chunk := await stream.read(1 << 16):
        channel.feed(chunk)
    channel.eof()


class WorkerProcess:
    """A started worker. `run()` never raises for the worker's faults; see `usable`."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.proc, self.pid = proc, proc.pid
        self._reader, self._writer = reader, writer
        self._out, self._err = Channel(), Channel()
        self._pumps = [
            asyncio.ensure_future(_pump(proc.stdout, self._out)),  # type: ignore[arg-type]
            asyncio.ensure_future(_pump(proc.stderr, self._err)),  # type: ignore[arg-type]
        ]
        self.runs = 0
        self.retire = ""  # non-empty once this worker must not run again (why)
        self.warm_key = ""  # the job key its kept run process serves (`Job.warm_key`)
        self.containment: Containment | None = None  # as the worker reported it

    @property
    def usable(self) -> bool:
        return not self.retire and self.proc.returncode is None

    @classmethod
    async def spawn(cls, env: dict[str, str], timeout: float, spares: int = 1) -> WorkerProcess:
        """A worker, ready; it may keep up to `spares` spares (`prepare`)."""
        parent_end, child_end = socket.socketpair()
        try:
            proc = await _exec(child_end, env, spares)
        except BaseException as exc:
            parent_end.close()
            if isinstance(exc, OSError):
                raise StartFailed(f"worker could not be started: {exc}") from exc
            raise
        finally:
            child_end.close()
        try:
            reader, writer = await asyncio.open_unix_connection(sock=parent_end)
        except BaseException:
            parent_end.close()
            proc.kill()
            await proc.wait()
            raise
        worker = cls(proc, reader, writer)
        await worker._handshake(timeout)
        return worker

    async def _handshake(self, timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout):
                message = await self._receive()
            if not isinstance(message, channel.Ready):
                raise channel.ProtocolError("expected a ready message first")
            self.containment = message.containment
        except BaseException as exc:
            reason = _failure_text(exc) if isinstance(exc, Exception) else "cancelled"
            await self.close(reason)
            if not isinstance(exc, Exception):
                raise
            raise StartFailed(f"{reason}; {self._err.tail.text()[-2000:]}".strip("; ")) from exc

    async def _receive(self) -> channel.Ready | channel.Reply:
        size = channel.body_length(await self._reader.readexactly(channel.HEADER))
        return channel.decode_to_parent(await self._reader.readexactly(size))

    def prepare(self, spares: int) -> None:
        """Runs are due soon: the worker readies `spares` spares (at most its cap), between
        runs; no answer comes."""
        if self.usable and not self._writer.is_closing():
            self._writer.write(channel.frame(channel.Prepare(spares=spares)))

    async def run(self, job: Job, fired_at: float) -> Outcome:
        """Runs `job`; `fired_at` is the `time.monotonic()` of the fire."""
        marker = b"\0baton:end-of-run:" + os.urandom(12).hex().encode() + b"\0"
        request = _encode(job, marker)
        self.runs += 1
        out, err = self._out.begin(marker), self._err.begin(marker)
        try:
            reply = await self._exchange(request, job.timeout_seconds + BACKSTOP_SECONDS)
            await self._settle_output()
        except BaseException:
            self.retire = self.retire or "run cancelled"
            raise
        reply = self._decode_result(reply)
        self.retire = self.retire or reply.retire
        self.warm_key = reply.warm
        entered = reply.entered_at
        return Outcome(
            status=reply.status,
            result=reply.result,
            error=reply.error,
            stdout_tail=out.text(),
            stderr_tail=err.text(),
            duration_ms=(time.monotonic() - fired_at) * 1000,
            main_latency_ms=None if entered is None else (entered - fired_at) * 1000,
        )

    async def _exchange(self, request: bytes, timeout: float) -> channel.Reply:
        try:
            async with asyncio.timeout(timeout):
                self._writer.write(request)
                await self._writer.drain()
                message = await self._receive()
        except TimeoutError:
            seconds = timeout - BACKSTOP_SECONDS
            return await self._fail(RunStatus.TIMEOUT, f"exceeded the timeout of {seconds:g} s")
        except Exception as exc:
            return await self._fail(RunStatus.CRASHED, await self._death_reason(exc))
        except BaseException:
            await self.close("run cancelled")
            raise
        if not isinstance(message, channel.Reply):
            return await self._fail(RunStatus.CRASHED, "worker protocol error: unexpected ready")
        return message

    async def _death_reason(self, exc: Exception) -> str:
        if self.retire:  # we killed it ourselves (e.g. the executor is closing)
            return self.retire
        if isinstance(exc, channel.ProtocolError):
            return f"worker protocol error: {exc}"
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(GRACE_SECONDS):
                await self.proc.wait()
        return exit_reason(self.proc.returncode)

    async def _fail(self, status: RunStatus, reason: str) -> channel.Reply:
        await self.close(reason)
        return channel.Reply(status=status, error=reason)

    async def _settle_output(self) -> None:
        """Waits for both output pipes to reach the run's marker (or their end)."""
        try:
            async with asyncio.timeout(GRACE_SECONDS):
                await self._out.done.wait()
                await self._err.done.wait()
        except TimeoutError:
            self.retire = self.retire or "worker output did not reach its end-of-run marker"

    def _decode_result(self, reply: channel.Reply) -> channel.Reply:
        if reply.result is None:
            return reply
        try:
            result = msgspec.json.decode(reply.result)
        except msgspec.DecodeError as exc:
            self.retire = f"worker protocol error: result is not JSON: {exc}"
            return channel.Reply(status=RunStatus.CRASHED, error=self.retire)
        problem = bounds.beyond(result)  # checked here, out of the program's reach
        if problem is None:
            return msgspec.structs.replace(reply, result=result)
        error = f"result cannot be stored: {problem}"
        if reply.status is not RunStatus.OK and reply.error:
            error = f"{reply.error}\n{error}"
        return msgspec.structs.replace(reply, status=RunStatus.ERROR, result=None, error=error)

    def _kill(self, sig: signal.Signals = signal.SIGKILL) -> None:
        if self.proc.returncode is None:  # not reaped yet, so the group id is still ours
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    async def close(self, reason: str = "worker closed") -> None:
        """Ends the worker (it ends its run first) and reaps it. Idempotent."""
        self.retire = self.retire or reason
        self._kill(signal.SIGTERM)
        try:
            async with asyncio.timeout(GRACE_SECONDS):
                await self.proc.wait()
        except TimeoutError:
            self._kill()
            await self.proc.wait()
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()
        _, pending = await asyncio.wait(self._pumps, timeout=GRACE_SECONDS)
        for pump in pending:
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)


def _encode(job: Job, marker: bytes) -> bytes:
    request = channel.Request(
        source=job.source,
        ref=job.ref,
        args=job.args,
        context=job.context,
        memory_mb=job.memory_mb,
        timeout_seconds=job.timeout_seconds,
        marker=marker,
        key=job.warm_key,
        ports=job.ports,
        disk_mb=job.disk_mb,
    )
    try:
        return channel.frame(request)
    except (TypeError, msgspec.EncodeError) as exc:
        raise ValueError(f"args: cannot be sent to a worker: {exc}") from None


def _failure_text(exc: Exception) -> str:
    if isinstance(exc, TimeoutError):
        return "worker did not report ready in time"
    if isinstance(exc, asyncio.IncompleteReadError | ConnectionError):
        return "worker ended before reporting ready"
    return f"worker start failed: {exc}"


async def _exec(
    child_end: socket.socket, env: dict[str, str], spares: int
) -> asyncio.subprocess.Process:
    fd = child_end.fileno()
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-P",  # not the daemon's working directory first on the path: its modules are not ours
        "-m",
        "programs.worker",
        str(fd),
        str(spares),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        pass_fds=(fd,),
        start_new_session=True,  # one process group: killing it kills what the program started
    )
