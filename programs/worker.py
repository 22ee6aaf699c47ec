"""A worker process of the executor's pool: serves run requests one at a time.

Started as `python -m programs.worker <control-fd>`. It reads run requests from the
control socket, runs each (`programs.runner`) while the program's output goes to fd 1/2
(pipes the parent drains), then puts the process back as it was, writes the run's end
marker on fd 1/2 and answers with a reply. Must not outlive its parent (end of file on
the control socket ends it) nor let one run's leftovers reach the next unnoticed: what
it cannot put back, it reports, and the parent retires the worker.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import os
import signal
import socket
import sys
import threading
from typing import BinaryIO

import msgspec

from programs import wire
from programs.runner import CodeCache, run_request

PR_SET_PDEATHSIG = 1


class Stdio:
    """The worker's own fd 1/2 (the pipes to the parent), restored after every run."""

    def __init__(self) -> None:
        self._out, self._err = os.dup(1), os.dup(2)
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]

    def restore(self) -> str:
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            with contextlib.suppress(Exception):
                stream.flush()  # type: ignore[union-attr]
        sys.stdout, sys.stderr, sys.stdin = sys.__stdout__, sys.__stderr__, sys.__stdin__
        os.dup2(self._out, 1)
        os.dup2(self._err, 2)
        if sys.stdout.closed or sys.stderr.closed:  # type: ignore[union-attr]
            return "the program closed sys.stdout or sys.stderr"
        return ""

    def mark(self, marker: bytes) -> None:
        for fd in (1, 2):
            view = memoryview(marker)
            while view:
                view = view[os.write(fd, view) :]


class Hygiene:
    """Puts the process back as it was between runs, or says why it cannot."""

    def __init__(self) -> None:
        self._environ = dict(os.environ)
        self._cwd = os.getcwd()

    def reset(self) -> str:
        if os.environ != self._environ:
            os.environ.clear()
            os.environ.update(self._environ)
        if os.getcwd() != self._cwd:
            os.chdir(self._cwd)
        if threading.active_count() > 1:
            return "the program left threads running"
        return ""


def read_request(stream: BinaryIO) -> wire.Request | None:
    header = stream.read(wire.HEADER)
    if len(header) < wire.HEADER:
        return None
    body = stream.read(wire.body_length(header))
    return wire.decode_request(body)


def serve(sock: socket.socket) -> None:
    stdio, hygiene, cache, pid = Stdio(), Hygiene(), CodeCache(), os.getpid()
    stream = sock.makefile("rb")
    sock.sendall(wire.frame(wire.Ready(pid=pid)))
    while (request := read_request(stream)) is not None:
        reply = run_request(request, cache)
        if os.getpid() != pid:  # a child the program forked returned here: it must not answer
            os._exit(0)
        retire = reply.retire or stdio.restore() or hygiene.reset()
        stdio.mark(request.marker)
        sock.sendall(wire.frame(msgspec.structs.replace(reply, retire=retire)))


def _preload() -> None:
    """Imports what runs need now, so the fire path does not pay for it."""
    with contextlib.suppress(Exception):
        import programs.use  # noqa: F401


def _die_with_parent() -> None:
    """Asks Linux to kill this worker when the daemon dies, even mid-run (no orphans)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return  # not Linux: an idle worker still ends at end of file on its control socket
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)


def main(argv: list[str]) -> int:
    _die_with_parent()
    faulthandler.enable()  # a segfaulting program leaves its Python traceback on stderr
    _preload()
    with socket.socket(fileno=int(argv[0])) as sock:
        serve(sock)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
