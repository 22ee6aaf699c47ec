"""The run process's side of a run: leave the worker, confine, wait, run, answer.

Forked by `programs.runproc.Spare.fork`, never returns. The child leaves the
worker's session (born in the worker's pids cgroup), keeps no descriptor of the
worker's but fd 0-2 and its own socket, confines itself (`programs.confine`) and
waits; the first request sets the run's memory limit and runs the program
(`programs.runner`). A request with a warm key is watched (`programs.warm.Snapshot`):
when the run ended `ok` and left nothing behind, the reply carries the key and the
process waits for the next run of that key; otherwise it ends after answering.
Must not talk to the executor.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import sys
import tempfile
from typing import TYPE_CHECKING, Any

import msgspec

from core.vocab import RunStatus
from programs import channel, confine, privileges, runner, warm

if TYPE_CHECKING:
    from programs.runproc import Place

PR_SET_PDEATHSIG = 1
READY = b"R"  # a spare's first byte: confined, waiting for its request


def child(
    place: Place,
    scratch: str,
    sock: socket.socket,
    ruleset: int | None = None,
    failed_ahead: BaseException | None = None,
) -> None:
    """`ruleset`: the Landlock ruleset the worker built for this process and `scratch`
    alone (`programs.confine.Rules`); `failed_ahead`: why the worker could not build it."""
    me = os.getpid()
    try:
        _enter(scratch, sock.fileno(), ruleset)
        base = runner.address_space()  # /proc is out of reach once confined
        if failed_ahead is not None:
            raise failed_ahead
        confine.confine(place.plan, scratch, None, ruleset)
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
        error = f"containment failed: {failed!r}"
        _answer(sock, channel.Reply(status=RunStatus.CRASHED, error=error))
        os._exit(0)
    if base is not None:
        privileges.pin(resource.RLIMIT_AS, base + request.memory_mb * runner.MiB)
    try:
        confine.per_run(place.plan, request.ports, request.disk_mb)
    except BaseException as exc:
        error = f"containment failed: network or disk limit: {exc!r}"
        _answer(sock, channel.Reply(status=RunStatus.CRASHED, error=error))
        os._exit(0)
    _serve(place, sock, request, me)


def _serve(place: Place, sock: socket.socket, request: channel.Request | None, me: int) -> None:
    """Runs `request`, then further runs of its warm key while each leaves nothing."""
    modules = place.modules if request is not None and request.key else None
    while request is not None:
        code = place.codes.get(request.ref, request.source)
        if code is None and modules is not None and place.codes.learn(request.ref, request.source):
            code = place.codes.get(request.ref, request.source)  # for its next runs too
        snapshot = warm.Snapshot(modules) if modules is not None else None
        reply = runner.run_request(request, code)
        if os.getpid() != me:  # a child the program forked returned here: it must not answer
            os._exit(0)
        kept = snapshot is not None and reply.status is RunStatus.OK and not snapshot.changed()
        _answer(sock, msgspec.structs.replace(reply, warm=request.key if kept else ""))
        if not kept:
            break
        request = _receive(sock)
    os._exit(0)


REHEARSAL = channel.Request(
    source="def main(args):\n    return {'ok': True}\n",
    ref="baton-rehearsal@v1",
    args={},
    context=None,
    memory_mb=1,
    marker=b"",
)


def rehearse(place: Place, times: int = 10) -> None:
    """A run process's path after its confinement (receive, snapshot, run, check, answer)
    walked in the worker before its heap is frozen, with baton's own one-line program on a
    socket pair: CPython 3.11 writes into a function's code on its first calls (warm-up
    counter, specialisation), so a run process forked later copies fewer pages. Touches no
    limit, no confinement, no descriptor but the pair's."""
    ours, theirs = socket.socketpair()
    try:
        for _ in range(times):
            ours.sendall(channel.frame(REHEARSAL))
            request = _receive(theirs)
            if request is None:
                return
            snapshot = warm.Snapshot(place.modules) if place.modules is not None else None
            reply = runner.run_request(request, place.codes.get(request.ref, request.source))
            if snapshot is not None:
                snapshot.changed()
            _answer(theirs, reply)
            channel.read_exact(ours, channel.body_length(channel.read_exact(ours, 4) or b""))
    finally:
        ours.close()
        theirs.close()
        runner.forget_source(REHEARSAL.ref)


def _answer(sock: socket.socket, reply: channel.Reply) -> None:
    with contextlib.suppress(BaseException):
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    with contextlib.suppress(BaseException):
        sock.sendall(channel.frame(reply))


def _receive(sock: socket.socket) -> channel.Request | None:
    """The next request; None at end of file (the worker discarded this process)."""
    try:
        header = channel.read_exact(sock, channel.HEADER)
        if header is None:
            return None
        body = channel.read_exact(sock, channel.body_length(header))
    except OSError:
        return None
    return None if body is None else channel.decode_request(body)


def _enter(scratch: str, keep_fd: int, ruleset: int | None = None) -> None:
    """Leaves the worker's session and descriptors (its control channel, the sockets of
    its other run processes, the paths its Landlock rules hold); the scratch directory
    is home. Only the socket and this process's own ruleset stay (`confine` closes it)."""
    os.setsid()
    privileges.libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    low = 3
    for fd in sorted({keep_fd} | ({ruleset} if ruleset is not None else set())):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, max(low, os.sysconf("SC_OPEN_MAX")))
    os.chdir(scratch)
    os.environ["HOME"] = os.environ["TMPDIR"] = scratch
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
