"""One run in a fresh process forked from the worker: fork, confine, run, end it all.

Owns the life of a run process (SPEC "Containment and credentials"): the worker,
which never runs program code, makes the run's scratch directory and forks a
`Spare` ahead of the fire; the child leaves the worker's session (born in the
worker's pids cgroup), drops the worker's control channel, confines itself
(`programs.confine`) and waits; the fire sends it its request, it sets the run's
memory limit and runs the program (`programs.runner`), answering on a socket of
its own. The worker waits
for that answer under the run's deadline, then kills and reaps every process of the
run (`programs.reaper`) and removes the scratch directory, so the run is over when
its answer leaves. Each run is a new process: nothing of one run (modules patched,
`builtins` marked, tokens seen) reaches another. Must not talk to the executor.
"""

from __future__ import annotations

import contextlib
import gc
import glob
import os
import resource
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
from typing import Any

from core.vocab import RunStatus
from programs import channel, confine, privileges, reaper, runner
from programs.result import exit_reason

PR_SET_PDEATHSIG = 1
SCRATCH_PREFIX = "baton-run-"
READY = b"R"  # a spare's first byte: confined, waiting for its request


class Abandoned(Exception):
    """The executor closed the control channel while a run was in flight."""


class Place:
    """What a worker's runs share: the containment plan, the cgroup, where scratch goes."""

    def __init__(self) -> None:
        self.subreaper = reaper.become_subreaper()
        self.cgroup = reaper.PidsCgroup.make(confine.MAX_TASKS)
        self.plan = confine.plan(cgroup=self.cgroup.path is not None, subreaper=self.subreaper)
        self.scratch_root = tempfile.gettempdir()
        self._sweep()
        privileges.warm()
        gc.freeze()  # what is here now is shared with every run process, never collected

    def scratch(self) -> str:
        """A new scratch directory, named after this worker so a sweep can tell its owner."""
        return tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=self.scratch_root)

    def close(self) -> None:
        reaper.reap_all(None, self.cgroup)
        self.cgroup.remove()
        for path in glob.glob(os.path.join(self.scratch_root, f"{SCRATCH_PREFIX}{os.getpid()}-*")):
            shutil.rmtree(path, ignore_errors=True)

    def _sweep(self) -> None:
        """Removes the scratch directories of workers that are gone (killed, not closed)."""
        for path in glob.glob(os.path.join(self.scratch_root, f"{SCRATCH_PREFIX}*-*")):
            owner = os.path.basename(path)[len(SCRATCH_PREFIX) :].split("-", 1)[0]
            if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
                shutil.rmtree(path, ignore_errors=True)


class Spare:
    """A run process forked and confined ahead of its run, waiting for its request, so
    the fire pays neither the fork nor the confinement. Each serves one run only."""

    def __init__(self, pid: int, sock: socket.socket, scratch: str) -> None:
        self.pid, self.sock, self.scratch = pid, sock, scratch

    @classmethod
    def fork(cls, place: Place, control_fd: int) -> Spare:
        scratch = place.scratch()
        ours, theirs = socket.socketpair()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # none mid-fork
        pid = os.fork()
        if pid == 0:  # the run process: never returns
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
            ours.close()
            _child(place, scratch, theirs, control_fd)
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        theirs.close()
        return cls(pid, ours, scratch)

    def ready(self, deadline: float | None = None) -> bool:
        """Waits until the spare is confined and waiting (False if it died first)."""
        if self._ready:
            return True
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        self.sock.settimeout(timeout)
        try:
            self._ready = self.sock.recv(1) == READY
        except OSError:
            self._ready = False
        finally:
            self.sock.settimeout(None)
        return self._ready

    @property
    def waiting(self) -> bool:
        """Still alive and waiting (not ended while idle, e.g. by the OOM killer)."""
        try:
            return os.waitpid(self.pid, os.WNOHANG) == (0, 0)
        except ChildProcessError:
            return False

    def run(self, request: channel.Request, place: Place, control_fd: int) -> channel.Reply:
        """Runs `request`; every process of the run is gone on return."""
        deadline = time.monotonic() + request.timeout_seconds
        reply: channel.Reply | None = None
        try:
            if self.ready(deadline):
                with contextlib.suppress(OSError):  # a dead spare: its status says why below
                    self.sock.sendall(channel.frame(request))
                reply = _await_reply(self.sock, control_fd, deadline, request.timeout_seconds)
            elif time.monotonic() >= deadline:
                reply = _timed_out(request.timeout_seconds)
        finally:
            self.discard(place)
        return reply if reply is not None else _died(self._status)

    def discard(self, place: Place) -> None:
        """Ends the run process and all it started; removes its scratch. Idempotent."""
        if self.sock.fileno() < 0:
            return
        self._status = _end(self.pid, place).get(self.pid)
        self.sock.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    _status: int | None = None
    _ready = False


def run(request: channel.Request, place: Place, control_fd: int) -> channel.Reply:
    """Runs `request` in a new contained process (forked now): the cold path."""
    return Spare.fork(place, control_fd).run(request, place, control_fd)


def _end(pid: int, place: Place) -> dict[int, int]:
    """Kills and reaps the run's processes; SIGTERM waits until this is done."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        return reaper.reap_all(pid, place.cgroup)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _died(status: int | None) -> channel.Reply:
    code = None if status is None else os.waitstatus_to_exitcode(status)
    return channel.Reply(status=RunStatus.CRASHED, error=exit_reason(code))


def _await_reply(sock: socket.socket, control_fd: int, deadline: float,
                 timeout: float) -> channel.Reply | None:  # fmt: skip
    """The run's reply; a timeout reply at the deadline; None if it died without one."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    poller.register(control_fd, select.POLLIN)
    got = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return _timed_out(timeout)
        ready = {fd for fd, _ in poller.poll(left * 1000)}
        if control_fd in ready:
            raise Abandoned("the executor closed the control channel during a run")
        if sock.fileno() not in ready:
            continue
        chunk = sock.recv(1 << 16)
        if not chunk:
            return None
        got += chunk
        reply = _complete(got)
        if reply is not None:
            return reply


def _timed_out(timeout: float) -> channel.Reply:
    return channel.Reply(status=RunStatus.TIMEOUT, error=f"exceeded the timeout of {timeout:g} s")


def _complete(got: bytearray) -> channel.Reply | None:
    try:
        if len(got) < channel.HEADER:
            return None
        size = channel.body_length(bytes(got[: channel.HEADER]))
        if len(got) < channel.HEADER + size:
            return None
        message = channel.decode_to_parent(bytes(got[channel.HEADER : channel.HEADER + size]))
    except channel.ProtocolError as exc:
        return channel.Reply(status=RunStatus.CRASHED, error=f"worker protocol error: {exc}")
    if not isinstance(message, channel.Reply):
        return channel.Reply(
            status=RunStatus.CRASHED, error="worker protocol error: unexpected ready"
        )
    return message


# --- the run process -----------------------------------------------------------------


def _child(place: Place, scratch: str, sock: socket.socket, control_fd: int) -> None:
    me = os.getpid()
    try:
        _enter(place, scratch, control_fd)
        base = runner.address_space()  # /proc is out of reach once confined
        confine.confine(place.plan, scratch, None)
        _guard_signals()
    except BaseException as exc:
        failed: BaseException | None = exc
    else:
        failed = None
    with contextlib.suppress(OSError):
        sock.sendall(READY)
    request = _receive(sock)
    if request is None:  # the worker discarded this spare
        os._exit(0)
    if failed is not None:
        reply = channel.Reply(status=RunStatus.CRASHED, error=f"containment failed: {failed!r}")
    else:
        if base is not None:
            privileges.pin(resource.RLIMIT_AS, base + request.memory_mb * runner.MiB)
        reply = runner.run_request(request)
    if os.getpid() != me:  # a child the program forked returned here: it must not answer
        os._exit(0)
    with contextlib.suppress(BaseException):
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    with contextlib.suppress(BaseException):
        sock.sendall(channel.frame(reply))
    os._exit(0)


def _receive(sock: socket.socket) -> channel.Request | None:
    with sock.makefile("rb") as stream:
        header = stream.read(channel.HEADER)
        if len(header) < channel.HEADER:
            return None
        return channel.decode_request(stream.read(channel.body_length(header)))


def _enter(place: Place, scratch: str, control_fd: int) -> None:
    """Leaves the worker's session and channel; the scratch directory is home."""
    os.setsid()
    privileges.libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.close(control_fd)
    os.chdir(scratch)
    os.environ.update(HOME=scratch, TMPDIR=scratch)
    tempfile.tempdir = None


def _guard_signals() -> None:
    """`os.kill` and `os.killpg` say who was refused, so the run record can tell."""

    def guarded(real: Any) -> Any:
        def send(pid: int, sig: int) -> None:
            try:
                real(pid, sig)
            except PermissionError as exc:
                text = f"signal refused: {pid} is outside this run"
                raise PermissionError(exc.errno, text) from None

        return send

    os.kill, os.killpg = guarded(os.kill), guarded(os.killpg)
