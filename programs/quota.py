"""A run's scratch disk quota (`limits.diskMB`): what its scratch directory holds.

Owns measuring the disk a run uses: the blocks of every file beneath its scratch
directory, and of the files its processes hold open after unlinking them (which no
walk of the directory sees). Each file is capped at the quota by the run process's
file-size limit (`programs.confine.per_run`); the worker measures the total while it
waits for the run and ends a run past it (`programs.runproc`). Must not kill.
"""

from __future__ import annotations

import contextlib
import os
import stat

MiB = 1024 * 1024
CHECK_S = 0.05  # how often the worker measures a running run's scratch


def used(scratch: str, pids: list[int]) -> int:
    """Bytes on disk beneath `scratch`, plus unlinked files `pids` hold open."""
    seen: set[tuple[int, int]] = set()
    total, dirs = 0, [scratch]
    while dirs:
        with contextlib.suppress(OSError), os.scandir(dirs.pop()) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode):
                        dirs.append(entry.path)
                    total += _blocks(st, seen)
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    st = os.stat(f"/proc/{pid}/fd/{fd}")
                    if stat.S_ISREG(st.st_mode) and st.st_nlink == 0:
                        total += _blocks(st, seen)
    return total


def _blocks(st: os.stat_result, seen: set[tuple[int, int]]) -> int:
    inode = (st.st_dev, st.st_ino)
    if inode in seen:
        return 0
    seen.add(inode)
    return st.st_blocks * 512


def exceeded(scratch: str, pids: list[int], disk_mb: int) -> str:
    """Why the run is past its quota ("" while it is not)."""
    size = used(scratch, pids)
    if size <= disk_mb * MiB:
        return ""
    return (
        f"scratch disk quota exceeded: {size / MiB:.0f} MB written, "
        f"over the limit of {disk_mb} MB (limits.diskMB)"
    )
