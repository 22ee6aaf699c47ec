"""A worker process of the executor's pool: a clean parent that forks the run processes.

Started as `python -m programs.worker <control-fd> [spares]`: preloads what runs need, reads
run requests from the control socket and runs each in a contained process (`programs.runproc`),
the warm one of the request's key or a spare; compiles each program version once after its
first reply, for the spares forked later (`programs.codes`); keeps one spare, or up to
`spares` when told runs are due soon (`Prepare`), and at most one warm process. It never
runs program code.
Must not outlive its parent: end of file on the control socket, SIGTERM or the parent's
death end it and the run in flight.
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
from collections import deque
from collections.abc import Callable
from typing import NoReturn

import msgspec

from programs import channel, confine, privileges, runproc, warm

PR_SET_PDEATHSIG = 1
SURPLUS_IDLE_S = 10.0  # spares beyond one, unused this long since the last run or Prepare, end


class Terminated(BaseException):
    """SIGTERM: end the run in flight, then the worker."""


def mark(marker: bytes) -> None:
    for fd in (1, 2):
        view = memoryview(marker)
        while view:
            view = view[os.write(fd, view) :]


def read_message(sock: socket.socket) -> channel.Request | channel.Prepare | None:
    """The next message; None at end of file. Read straight off the socket (no buffer),
    so a look at the descriptor (`pending`) sees every message not read yet."""
    header = channel.read_exact(sock, channel.HEADER)
    body = None if header is None else channel.read_exact(sock, channel.body_length(header))
    return None if body is None else channel.decode_to_worker(body)


def never() -> bool:
    """No request waits (`Processes.top_up` outside the serving loop)."""
    return False


class Processes:
    """The worker's run processes: its spares, oldest first (one, or as many as a
    `Prepare` asked for, at most `cap`), and at most one kept warm for one key."""

    def __init__(self, place: runproc.Place, control_fd: int, cap: int = 1) -> None:
        self.place, self.fd, self.cap = place, control_fd, max(1, cap)
        self.spares: deque[runproc.Spare] = deque([runproc.Spare.fork(place, control_fd)])
        self.wanted = 1  # spares to keep ready: runs expected soon, at least one
        self.used = time.monotonic()  # the last run or `Prepare`: when a surplus ends
        self.warm: runproc.Spare | None = None
        self._replaced: runproc.Spare | None = None  # a warm one to end after the reply

    def run(self, request: channel.Request) -> channel.Reply:
        """Runs `request` in the warm process of its key, or else in the oldest spare."""
        proc = self._take(request)
        keep = self.idle(but=proc)
        reply = proc.run(request, self.place, self.fd, keep)
        if proc.keepable(request, reply, self.place, keep):
            if proc is not self.warm:
                self._replaced, self.warm = self.warm, proc
        else:
            proc.discard(self.place, keep)
            self.warm = None if proc is self.warm else self.warm
        return msgspec.structs.replace(reply, warm=self.warm.key if self.warm else "")

    def idle(self, but: runproc.Spare | None = None) -> set[int]:
        """The pids of the worker's idle run processes (all but `but`): not a run's."""
        procs = (*self.spares, self.warm, self._replaced)
        return {p.pid for p in procs if p is not None and p is not but and not p.reaped}

    def refill(self, pending: Callable[[], bool] = never) -> None:
        """After the reply: the replaced warm one ended, scratch emptied, spares topped up."""
        if self._replaced is not None:
            self._replaced.discard(self.place, keep=self.idle(but=self._replaced))
            self._replaced = None
        if self.warm is not None and not self.warm.clear_scratch():
            self.expire()
        self.top_up(pending)

    def prepare(self, spares: int, pending: Callable[[], bool] = never) -> None:
        """`spares` runs are due soon: as many spares ready (at most `cap`)."""
        self.wanted, self.used = max(1, min(spares, self.cap)), time.monotonic()
        self.top_up(pending)

    def top_up(self, pending: Callable[[], bool] = never) -> None:
        """Forks spares up to what is wanted, one at a time, the first whatever comes,
        the others only while no request waits (`pending`): a request is not kept
        waiting for more than one fork."""
        if len(self.spares) >= self.wanted:
            return
        self.place.cgroup.limit(self.wanted + (self.warm is not None))  # room for them
        while len(self.spares) < self.wanted and not (self.spares and pending()):
            self.spares.append(runproc.Spare.fork(self.place, self.fd))

    def idle_for(self) -> float | None:
        """Seconds until something idle ends: the warm process of idleness, the spares
        beyond one unused since the last run or `Prepare` (None: nothing will)."""
        now, left = time.monotonic(), []
        if self.warm is not None:
            left.append(self.warm.idle_since + warm.IDLE_SECONDS - now)
        if len(self.spares) > 1:
            left.append(self.used + SURPLUS_IDLE_S - now)
        return min(left, default=None)

    def expire_idle(self) -> None:
        now = time.monotonic()
        if self.warm is not None and now >= self.warm.idle_since + warm.IDLE_SECONDS:
            self.expire()
        if len(self.spares) > 1 and now >= self.used + SURPLUS_IDLE_S:
            while len(self.spares) > 1:  # the runs they were forked for did not come
                spare = self.spares.pop()
                spare.discard(self.place, keep=self.idle(but=spare))
            self.wanted = 1

    def expire(self) -> None:
        if self.warm is not None:
            self.warm.discard(self.place, keep=self.idle(but=self.warm))
            self.warm = None

    def close(self) -> None:
        for proc in (self.warm, self._replaced, *self.spares):
            if proc is not None:
                proc.discard(self.place)

    def _take(self, request: channel.Request) -> runproc.Spare:
        self.used = time.monotonic()
        if self.warm is not None and not self.warm.waiting:
            self.expire()
        if self.warm is not None and request.key and self.warm.key == request.key:
            return self.warm
        self.wanted = max(1, self.wanted - 1)
        while self.spares:
            spare = self.spares.popleft()
            if spare.waiting:
                return spare
            spare.discard(self.place, keep=self.idle(but=spare))  # ended while idle
        return runproc.Spare.fork(self.place, self.fd)  # none left: on the fire path


def next_message(sock: socket.socket, procs: Processes) -> channel.Request | channel.Prepare | None:
    """The next message; what is idle too long ends while waiting for it."""
    while (left := procs.idle_for()) is not None:
        if select.select([sock], [], [], max(0.0, left))[0]:
            break
        procs.expire_idle()
    return read_message(sock)


def serve(sock: socket.socket, place: runproc.Place, cap: int) -> None:
    fd = sock.fileno()
    procs = Processes(place, fd, cap)

    def pending() -> bool:
        return bool(select.select([fd], [], [], 0)[0])

    try:
        containment = confine.containment(place.plan)
        sock.sendall(channel.frame(channel.Ready(pid=os.getpid(), containment=containment)))
        while (message := next_message(sock, procs)) is not None:
            if isinstance(message, channel.Prepare):
                procs.prepare(message.spares, pending)
                continue
            reply = procs.run(message)
            mark(message.marker)
            sock.sendall(channel.frame(reply))
            place.codes.learn(message.ref, message.source)  # for the spares forked from now on
            procs.refill(pending)  # while the executor takes the reply
    finally:
        procs.close()


def _preload() -> None:
    """Imports what runs need now, so the fire path does not pay for it (asyncio once a
    program with an `async def main` is compiled here: `programs.codes`)."""
    with contextlib.suppress(Exception):
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
            serve(sock, place, int(argv[1]) if len(argv) > 1 else channel.SPARES)
    except (Terminated, runproc.Abandoned, BrokenPipeError, ConnectionError):
        pass
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        place.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
