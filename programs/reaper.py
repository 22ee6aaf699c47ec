"""Ending every process of a run: the worker as subreaper, and a pids cgroup where we can.

Owns `become_subreaper()` (PR_SET_CHILD_SUBREAPER: whatever a run double-forks and
`setsid()`s away is re-parented to the worker, not to init), the worker's pids
cgroup (cgroup v1 `pids`, where it is writable: a hard cap on the run's processes,
root included, and the list of every process in it; the worker itself is in
it, so its run processes are born there) and `reap_all()`, which kills
and reaps every child of the worker until none is left. The worker runs one run at
a time, so all its children but its idle spare or warm process (`keep`) belong to the
run being ended. Must not run programs.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import signal
import time
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

    def __init__(self, path: Path | None) -> None:
        self.path = path

    @classmethod
    def make(cls, max_tasks: int) -> PidsCgroup:
        _sweep()
        path = PIDS_V1 / f"baton-{os.getpid()}"
        try:
            path.mkdir(exist_ok=True)
            (path / "pids.max").write_text(str(max_tasks + 2))  # the worker, its spare, the run
            (path / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            return cls(None)
        return cls(path)

    def pids(self) -> list[int]:
        """Every process in the cgroup but the worker: the run's."""
        if self.path is None:
            return []
        try:
            found = [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []
        return [pid for pid in found if pid != os.getpid()]

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


def children() -> list[int]:
    """This process's children, from /proc (every thread's list)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir("/proc/self/task"):
            path = f"/proc/self/task/{tid}/children"
            with contextlib.suppress(OSError, ValueError), open(path) as f:
                found += [int(x) for x in f.read().split()]
    return found


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def reap_all(group: int | None, cgroup: PidsCgroup, keep: int | None = None) -> dict[int, int]:
    """Kills the run's process group, its cgroup and every child until none is left
    (but `keep`, a process of the worker that is not the run's: its spare or warm one).

    Returns the wait statuses of the children reaped, by pid."""
    if group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    statuses: dict[int, int] = {}
    deadline = time.monotonic() + REAP_DEADLINE_S
    while time.monotonic() < deadline:
        _kill([pid for pid in cgroup.pids() if pid != keep])
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return statuses
        if pid:
            statuses[pid] = status
            continue
        left = children()
        victims = [pid for pid in left if pid != keep]
        if left and not victims:  # only `keep` is left
            return statuses
        _kill(victims)
        if not victims:  # children we cannot list (no /proc): give them a moment
            time.sleep(0.001)
            continue
        with contextlib.suppress(ChildProcessError):  # one of those just killed exits
            pid, status = os.waitpid(-1, 0)
            statuses[pid] = status
    return statuses
