"""A run process seen from the worker: fork and confine it ahead, run, keep or end it all.

Owns the life of a run process (SPEC "Containment and credentials"): a `Spare` forked and
confined before its fire, the request sent and the answer awaited under the run's deadline,
then every process of the run reaped and its scratch removed, or the process kept warm for
the same trigger and program when both sides find it clean (`programs.warm`). A process
serves one warm key only. Must not talk to the executor.
"""

from __future__ import annotations

import contextlib
import gc
import glob
import itertools
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Collection

import msgspec

from core.vocab import RunStatus
from programs import channel, codes, confine, forking, privileges, quota, reaper, runchild, warm
from programs.outcome import exit_reason

SCRATCH_PREFIX = "baton-run-"
HANG_UP = getattr(select, "POLLRDHUP", select.POLLIN)  # the executor closed its end
QUOTA = "disk quota"  # a reply's `retire` between `_await_reply` and `Spare.run` only


class Abandoned(Exception):
    """The executor closed the control channel while a run was in flight."""


class Place:
    """What a worker's runs share: the containment plan, the cgroup, where scratch goes."""

    def __init__(self) -> None:
        self.subreaper = reaper.become_subreaper()
        self.cgroup = reaper.PidsCgroup.make(confine.MAX_TASKS)
        self.plan = confine.plan(cgroup=self.cgroup.path is not None, subreaper=self.subreaper)
        # Keep run processes warm only where no run can reach another process of the
        # worker's (Landlock ABI 6: ptrace and signals scoped) and every one is reaped.
        self.warm = warm.SUPPORTED and self.plan.abi >= 6 and self.subreaper
        # What a warm run's checks watch, found once here: a run process reads versions only.
        self.modules = warm.Modules() if self.warm else None
        self.rules = confine.Rules.make(self.plan)
        self.codes = codes.Codes()  # programs compiled here once, for every later run process
        self._sweep()
        # The worker's own directory (0700): each run's scratch directory is made in it
        # under a plain number, so no name is drawn at random per run.
        self.scratch_root = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
        self._scratches = itertools.count(1)
        privileges.warm()
        runchild.rehearse(self)  # the run process's own path walked once here (its docstring)
        gc.freeze()  # what is here now is shared with every run process, never collected

    def scratch(self) -> str:
        """A new, empty scratch directory of its own for a run process."""
        path = f"{self.scratch_root}/{next(self._scratches)}"
        os.mkdir(path, 0o700)
        return path

    def ruleset(self, scratch: str) -> tuple[int | None, BaseException | None]:
        """The Landlock ruleset of a run process with `scratch`, built here ahead of the
        fork (None where there is no Landlock), or why it could not be built."""
        if self.rules is None:  # no Landlock (`Rules.make`)
            return None, None
        try:
            return self.rules.ruleset(scratch), None
        except OSError as exc:
            return None, exc

    def close(self) -> None:
        if self.rules is not None:
            self.rules.close()
        reaper.reap_all(None, self.cgroup)
        self.cgroup.remove()
        shutil.rmtree(self.scratch_root, ignore_errors=True)

    def _sweep(self) -> None:
        """Removes the scratch directories of workers that are gone (killed, not closed)."""
        for path in glob.glob(os.path.join(tempfile.gettempdir(), f"{SCRATCH_PREFIX}*-*")):
            owner = os.path.basename(path)[len(SCRATCH_PREFIX) :].split("-", 1)[0]
            if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
                shutil.rmtree(path, ignore_errors=True)


class Spare:
    """A run process forked and confined ahead of its run, waiting for its request, so
    the fire pays neither the fork nor the confinement. It serves one run, or, kept
    warm (`keepable`), further runs of the same warm key."""

    def __init__(self, pid: int, sock: socket.socket, scratch: str) -> None:
        self.pid, self.sock, self.scratch = pid, sock, scratch
        self.key, self.runs, self.idle_since = "", 0, time.monotonic()
        self.baseline: tuple[bytes, ...] | None = None  # its /proc status before any run

    @classmethod
    def fork(cls, place: Place, control_fd: int) -> Spare:
        scratch = place.scratch()
        ruleset, failed = place.ruleset(scratch)
        ours, theirs = socket.socketpair()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # none mid-fork
        pid = forking.fork()
        if pid == 0:  # the run process: never returns
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
            ours.close()
            runchild.child(place, scratch, theirs, ruleset, failed)
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        theirs.close()
        if ruleset is not None:
            os.close(ruleset)
        return cls(pid, ours, scratch)

    def ready(self, deadline: float | None = None) -> bool:
        """Waits until the spare is confined and waiting (False if it died first)."""
        if self._ready:
            return True
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        self.sock.settimeout(timeout)
        try:
            self._ready = self.sock.recv(1) == runchild.READY
        except OSError:
            self._ready = False
        finally:
            self.sock.settimeout(None)
        return self._ready

    @property
    def waiting(self) -> bool:
        """Still alive and waiting (not ended while idle, e.g. by the OOM killer). One that
        ended is reaped here: its pid is free for any new process from then on, so it is
        never signalled again (`discard`)."""
        if self._reaped:
            return False
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = self.pid, None
        if pid == 0:
            return True
        self._reaped, self._status = True, status
        return False

    @property
    def reaped(self) -> bool:
        """Gone and waited for (ended while idle, or discarded): its pid is not ours."""
        return self._reaped or self.sock.fileno() < 0

    def run(
        self, request: channel.Request, place: Place, control_fd: int, keep: Collection[int] = ()
    ) -> channel.Reply:
        """Runs `request`. A run that timed out or died is ended (all its processes but
        `keep`, the worker's idle ones, gone) on return; otherwise the caller ends it or
        keeps it (`keepable`). The pids cgroup's cap is the run's own from here on."""
        deadline = time.monotonic() + request.timeout_seconds
        self.runs += 1
        reply: channel.Reply | None = None
        try:
            place.cgroup.limit(len(keep))
            if self.ready(deadline):
                if self.baseline is None and place.warm and request.key:
                    self.baseline = warm.status(self.pid)
                with contextlib.suppress(OSError):  # a dead spare: its status says why below
                    self.sock.sendall(channel.frame(request))
                over = self._quota(request, place)
                reply = _await_reply(self.sock, control_fd, deadline, request.timeout_seconds, over)
            elif time.monotonic() >= deadline:
                reply = _timed_out(request.timeout_seconds)
        finally:
            self.idle_since = time.monotonic()
            if reply is None or reply.status is RunStatus.TIMEOUT or reply.retire == QUOTA:
                self.discard(place, keep)
        if reply is not None and reply.retire == QUOTA:  # the run's, not the worker's
            reply = msgspec.structs.replace(reply, retire="")
        return reply if reply is not None else _died(self._status)

    def _quota(self, request: channel.Request, place: Place) -> Callable[[], str]:
        """Why the run is past its scratch quota ("" while it is not)."""
        pids = [self.pid]

        def over() -> str:
            return quota.exceeded(self.scratch, pids + place.cgroup.pids(), request.disk_mb)

        return over

    def keepable(
        self, request: channel.Request, reply: channel.Reply, place: Place, others: set[int]
    ) -> bool:
        """The process answered clean for `request`'s warm key and /proc agrees: nothing
        of the run is left (`others` are the worker's processes that are not this run's)."""
        if not (place.warm and request.key and reply.warm == request.key) or self.sock.fileno() < 0:
            return False
        if self.runs >= warm.MAX_RUNS:
            return False
        found = warm.leftovers(self.pid, self.baseline, others, reaper.children())
        self.key = request.key if not found else ""
        return not found

    def clear_scratch(self) -> bool:
        """Empties the scratch directory for the next run; False if something stayed."""
        with os.scandir(self.scratch) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
        return not os.listdir(self.scratch)

    def discard(self, place: Place, keep: Collection[int] = ()) -> None:
        """Ends the run process and all it started (but `keep`, the worker's other
        processes); removes its scratch. Idempotent."""
        if self.sock.fileno() < 0:
            return
        statuses = _end(None if self._reaped else self.pid, place, keep)
        self._status = self._status if self._reaped else statuses.get(self.pid)
        self.sock.close()
        try:
            os.rmdir(self.scratch)  # most runs leave it empty
        except OSError:
            shutil.rmtree(self.scratch, ignore_errors=True)

    _status: int | None = None
    _ready = False
    _reaped = False  # waited for already (`waiting`): its pid may be another process's now


def run(request: channel.Request, place: Place, control_fd: int) -> channel.Reply:
    """Runs `request` in a new contained process (forked now): the cold path."""
    spare = Spare.fork(place, control_fd)
    try:
        return spare.run(request, place, control_fd)
    finally:
        spare.discard(place)


def _end(pid: int | None, place: Place, keep: Collection[int]) -> dict[int, int]:
    """Kills and reaps the run's processes; SIGTERM waits until this is done."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        return reaper.reap_all(pid, place.cgroup, keep)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _died(status: int | None) -> channel.Reply:
    code = None if status is None else os.waitstatus_to_exitcode(status)
    return channel.Reply(status=RunStatus.CRASHED, error=exit_reason(code))


def _await_reply(
    sock: socket.socket,
    control_fd: int,
    deadline: float,
    timeout: float,
    over_quota: Callable[[], str] = lambda: "",
) -> channel.Reply | None:
    """The run's reply; a timeout reply at the deadline; an error past its disk quota
    (`retire` QUOTA: to be ended); None if it died without one."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    poller.register(control_fd, HANG_UP)  # not data: a `Prepare` may come mid-run
    got = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return _timed_out(timeout)
        ready = {fd for fd, _ in poller.poll(min(left, quota.CHECK_S) * 1000)}
        if control_fd in ready:
            raise Abandoned("the executor closed the control channel during a run")
        if sock.fileno() not in ready:
            if why := over_quota():
                return channel.Reply(status=RunStatus.ERROR, error=why, retire=QUOTA)
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
        error = "worker protocol error: unexpected ready"
        return channel.Reply(status=RunStatus.CRASHED, error=error)
    return message
