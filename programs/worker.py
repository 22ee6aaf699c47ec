"""A worker process of the executor's pool: a clean parent that forks the run processes.

Started as `python -m programs.worker <control-fd>`: preloads what runs need, reads run
requests from the control socket and runs each in a contained process (`programs.runproc`),
the warm one of the request's key or a fresh spare; keeps one spare and at most one warm
process. It never runs program code itself. Must not outlive its parent: end of file on the
control socket, SIGTERM or the parent's death end it and the run in flight.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import os
import select
import signal
import socket
import sys
import time
from typing import BinaryIO, NoReturn

import msgspec

from programs import channel, confine, privileges, runproc, warm

PR_SET_PDEATHSIG = 1


class Terminated(BaseException):
    """SIGTERM: end the run in flight, then the worker."""


def mark(marker: bytes) -> None:
    for fd in (1, 2):
        view = memoryview(marker)
        while view:
            view = view[os.write(fd, view) :]


def read_request(stream: BinaryIO) -> channel.Request | None:
    header = stream.read(channel.HEADER)
    if len(header) < channel.HEADER:
        return None
    body = stream.read(channel.body_length(header))
    return channel.decode_request(body)


class Processes:
    """The worker's run processes: a spare, and at most one kept warm for one key."""

    def __init__(self, place: runproc.Place, control_fd: int) -> None:
        self.place, self.fd = place, control_fd
        self.spare: runproc.Spare | None = runproc.Spare.fork(place, control_fd)
        self.warm: runproc.Spare | None = None
        self._replaced: runproc.Spare | None = None  # a warm one to end after the reply

    def run(self, request: channel.Request) -> channel.Reply:
        """Runs `request` in the warm process of its key, or else in the spare."""
        proc = self._take(request)
        other = self.warm if proc is self.spare else self.spare
        keep = None if other is None else other.pid
        reply = proc.run(request, self.place, self.fd, keep)
        if proc.keepable(request, reply, self.place, set() if keep is None else {keep}):
            if proc is self.spare:
                self._replaced, self.warm, self.spare = self.warm, proc, None
        else:
            proc.discard(self.place, keep)
            self.warm = None if proc is self.warm else self.warm
            self.spare = None if proc is self.spare else self.spare
        return msgspec.structs.replace(reply, warm=self.warm.key if self.warm else "")

    def refill(self) -> None:
        """After the reply: the replaced warm one ended, scratch emptied, a new spare."""
        keep = None if self.warm is None else self.warm.pid
        if self._replaced is not None:
            self._replaced.discard(self.place, keep=keep)
            self._replaced = None
        if self.warm is not None and not self.warm.clear_scratch():
            self.expire()
        if self.spare is None:
            self.spare = runproc.Spare.fork(self.place, self.fd)

    def idle_for(self) -> float | None:
        """Seconds until the warm process ends of idleness (None: none is kept)."""
        if self.warm is None:
            return None
        return self.warm.idle_since + warm.IDLE_SECONDS - time.monotonic()

    def expire(self) -> None:
        if self.warm is not None:
            self.warm.discard(self.place, keep=None if self.spare is None else self.spare.pid)
            self.warm = None

    def close(self) -> None:
        for proc in (self.warm, self._replaced, self.spare):
            if proc is not None:
                proc.discard(self.place)

    def _take(self, request: channel.Request) -> runproc.Spare:
        if self.warm is not None and not self.warm.waiting:
            self.expire()
        if self.warm is not None and request.key and self.warm.key == request.key:
            return self.warm
        if self.spare is None or not self.spare.waiting:  # ended while idle: on the fire path
            if self.spare is not None:
                self.spare.discard(self.place, keep=None if self.warm is None else self.warm.pid)
            self.spare = runproc.Spare.fork(self.place, self.fd)
        return self.spare


def next_request(stream: BinaryIO, fd: int, procs: Processes) -> channel.Request | None:
    """The next request; a warm process idle too long ends while waiting for it."""
    while (left := procs.idle_for()) is not None:
        if select.select([fd], [], [], max(0.0, left))[0]:
            break
        procs.expire()
    return read_request(stream)


def serve(sock: socket.socket, place: runproc.Place) -> None:
    stream, fd = sock.makefile("rb"), sock.fileno()
    procs = Processes(place, fd)
    try:
        containment = confine.containment(place.plan)
        sock.sendall(channel.frame(channel.Ready(pid=os.getpid(), containment=containment)))
        while (request := next_request(stream, fd, procs)) is not None:
            reply = procs.run(request)
            mark(request.marker)
            sock.sendall(channel.frame(reply))
            procs.refill()  # while the executor takes the reply
    finally:
        procs.close()


def _preload() -> None:
    """Imports what runs need now, so the fire path does not pay for it."""
    with contextlib.suppress(Exception):
        import asyncio  # noqa: F401
        import json  # noqa: F401
        import urllib.request  # noqa: F401

        import programs.anyv1
        import programs.use  # noqa: F401


def _terminate(signum: int, frame: object) -> NoReturn:
    raise Terminated


def _die_with_parent() -> None:
    """Asks Linux to send SIGTERM to this worker when the daemon dies, even mid-run."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return  # not Linux: an idle worker still ends at end of file on its control socket
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _terminate)
    _die_with_parent()
    faulthandler.enable()  # a segfaulting program leaves its Python traceback on stderr
    if os.geteuid() == 0:  # once for every run process (the worker execs nothing)
        with contextlib.suppress(privileges.PrivilegeError):  # then each run process tries
            privileges.drop_bounding()
    _preload()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    place = runproc.Place()
    try:
        with socket.socket(fileno=int(argv[0])) as sock:
            serve(sock, place)
    except (Terminated, runproc.Abandoned, BrokenPipeError, ConnectionError):
        pass
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        place.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
