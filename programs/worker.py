"""A worker process of the executor's pool: a clean parent that forks one process per run.

Started as `python -m programs.worker <control-fd>`. It preloads what runs need, tells
the executor how contained its runs are, then reads run requests from the control
socket and runs each in a fresh, contained process (`programs.runproc`, forked and
confined before the request comes) whose output
goes to fd 1/2 (pipes the parent drains). When a run's processes are all gone it writes
the run's end marker on fd 1/2 and answers with the reply. It never runs program code
itself, so its state is the same before every run. Must not outlive its parent: end of
file on the control socket, SIGTERM, or the parent's death (which sends SIGTERM) end it
and every process of the run in flight.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import os
import signal
import socket
import sys
from typing import BinaryIO, NoReturn

from programs import channel, confine, runproc

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


def serve(sock: socket.socket, place: runproc.Place) -> None:
    stream, fd = sock.makefile("rb"), sock.fileno()
    spare = runproc.Spare.fork(place, fd)
    try:
        containment = confine.containment(place.plan)
        sock.sendall(channel.frame(channel.Ready(pid=os.getpid(), containment=containment)))
        while (request := read_request(stream)) is not None:
            if not spare.waiting:  # ended while idle: a new one, on the fire path this once
                spare.discard(place)
                spare = runproc.Spare.fork(place, fd)
            reply = spare.run(request, place, fd)
            mark(request.marker)
            sock.sendall(channel.frame(reply))
            spare = runproc.Spare.fork(place, fd)  # while the executor takes the reply
    finally:
        spare.discard(place)


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
