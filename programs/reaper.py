"""Ending every process of a run: the worker as subreaper, and a pids cgroup where we can.

Owns `become_subreaper()` (PR_SET_CHILD_SUBREAPER: whatever a run double-forks and
`setsid()`s away is re-parented to the worker, not to init), the worker's pids
cgroup (cgroup v1 `pids`, where it is writable: a hard cap on the run's processes,
root included, and the list of every process in it; the worker itself is in
it, so its run processes are born there) and `reap_all()`, which kills
and reaps every child of the worker until none is left. The worker runs one run at
a time, so all its children but its idle spares and warm process (`keep`) belong to the
run being ended; before each run the cgroup's cap is set to the worker, those idle ones
and the run's own `max_tasks` (`PidsCgroup.limit`). Must not run programs.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import signal
import threading
import time
from collections.abc import Collection
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
PIDS_V1 = Path("/sys/fs/cgroup/pids")
REAP_DEADLINE_S = 5.0


def become_subreaper() -> bool:
    try:
        result: int = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        return result == 0
    except (OSError, AttributeError):
        return False


class PidsCgroup:
    """A pids cgroup (`baton-<pid>`) that the worker enters, so each run process forked
    from it is born inside (no move on the fire path); or nothing where we cannot."""

    def __init__(self, path: Path | None, max_tasks: int = 0) -> None:
        self.path, self.max_tasks = path, max_tasks
        self._cap = max_tasks + 2  # what pids.max says now
        # Plain strings for the fire path's reads and writes: a run's end reads the one,
        # each run may write the other, and pathlib's file objects would copy some 60 of
        # the worker's pages after every fork (docs/performance.md, "Writes between forks").
        self._max, self._procs = (f"{path}/pids.max", f"{path}/cgroup.procs") if path else ("", "")

    @classmethod
    def make(cls, max_tasks: int) -> PidsCgroup:
        _sweep()
        path = PIDS_V1 / f"baton-{os.getpid()}"
        try:
            path.mkdir(exist_ok=True)
            (path / "pids.max").write_text(str(max_tasks + 2))  # the worker, a spare, the run
            (path / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            return cls(None)
        return cls(path, max_tasks)

    def limit(self, idle: int) -> None:
        """Caps the cgroup at the worker, its `idle` run processes (spares, a warm one) and
        one run's `max_tasks`: set before each run, so a run's bound is the same however
        many spares wait beside it; also before spares are forked (room for them, no run
        in flight). Written only when it changes."""
        cap = 1 + idle + self.max_tasks
        if self.path is None or cap == self._cap:
            return
        _write(self._max, cap)  # an error here is the worker's: fatal
        self._cap = cap

    def pids(self) -> list[int]:
        """Every process in the cgroup but the worker: the run's."""
        if self.path is None:
            return []
        found = _read_pids(self._procs)
        return [] if found is None else [pid for pid in found if pid != os.getpid()]

    def remove(self) -> None:
        """Leaves the cgroup (for its parent) and removes it."""
        if self.path is not None:
            with contextlib.suppress(OSError):
                (self.path.parent / "cgroup.procs").write_text(str(os.getpid()))
                self.path.rmdir()


def _sweep() -> None:
    """Removes the empty cgroups of workers that are gone."""
    for found in glob.glob(str(PIDS_V1 / "baton-*")):
        pid = found.rsplit("-", 1)[-1]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            with contextlib.suppress(OSError):
                os.rmdir(found)


def _write(path: str, value: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, b"%d" % value)
    finally:
        os.close(fd)


def _read_pids(path: str) -> list[int] | None:
    """The pids listed in a /proc or cgroup file; None if it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return [int(x) for x in os.read(fd, 1 << 16).split()]
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def children() -> list[int] | None:
    """This process's children, from /proc; None where it cannot say."""
    me = os.getpid()
    if threading.active_count() == 1:  # the worker: one thread, one list
        return _read_pids(f"/proc/{me}/task/{me}/children")
    try:
        lists = [
            _read_pids(f"/proc/{me}/task/{tid}/children") for tid in os.listdir("/proc/self/task")
        ]
    except OSError:
        return None
    return None if None in lists else [pid for found in lists for pid in found or ()]


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def reap_all(group: int | None, cgroup: PidsCgroup, keep: Collection[int] = ()) -> dict[int, int]:
    """Kills the run's process group, its cgroup and every child until none is left
    (but `keep`, the processes of the worker that are not the run's: its spares, a warm one).
    The run process (`group`) is waited for first; once it is reaped, whatever it left
    is a child of the worker (a subreaper) or in the cgroup, so one look at the
    children usually says none is left.

    Returns the wait statuses of the children reaped, by pid."""
    statuses: dict[int, int] = {}
    if group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    _kill([pid for pid in cgroup.pids() if pid not in keep])
    if group is not None:
        with contextlib.suppress(ChildProcessError):
            statuses[group] = os.waitpid(group, 0)[1]
    deadline = time.monotonic() + REAP_DEADLINE_S
    while time.monotonic() < deadline:
        left = children()
        victims = None if left is None else [pid for pid in left if pid not in keep]
        if victims == []:  # none but `keep`
            return statuses
        _kill((victims or []) + [pid for pid in cgroup.pids() if pid not in keep])
        if victims is None:  # children we cannot list (no /proc): give them a moment
            time.sleep(0.001)
        try:
            pid, status = os.waitpid(-1, os.WNOHANG if victims is None else 0)
        except ChildProcessError:
            return statuses
        if pid:
            statuses[pid] = status
    return statuses
