"""The worker's fork of a run process: libc's own, without CPython's after-fork work.

`os.fork()` runs CPython's after-fork hooks in the child (threading's, logging's,
random's, each writing to pages shared with the worker), so a run process pays copy-on-
write faults before it reads its request. The worker has one thread when it forks a
spare, which is all those hooks exist to mend: there a plain `fork(2)` through ctypes
(`PyDLL`: called holding the GIL, so no other Python code runs in between) gives the same
process for less. What the hooks would have done that still matters is done here:
random's state, which a child would otherwise share with its siblings, is drawn anew in
the worker after each fork. With a second thread alive it falls back to `os.fork()`.
Must not know about runs.
"""

from __future__ import annotations

import ctypes
import os
import random
import threading

_libc = ctypes.PyDLL(None, use_errno=True)
_fork = getattr(_libc, "fork", None)
if _fork is not None:
    _fork.restype, _fork.argtypes = ctypes.c_int, []


def fork() -> int:
    """Like `os.fork()`: 0 in the child, the child's pid in the parent."""
    if _fork is None or threading.active_count() != 1:
        return os.fork()
    pid: int = _fork()
    if pid < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    if pid > 0:
        random.seed()  # the next child starts from a state this one never saw
    return pid


def raw() -> bool:
    """Whether `fork` can be libc's own here (it falls back to `os.fork()` otherwise)."""
    return _fork is not None
