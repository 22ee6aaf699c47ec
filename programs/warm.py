"""When a run process may serve another run of the same trigger: its cleanliness checks.

Owns the two checks that let a process that ran trigger T with program P serve the next run
of exactly (T, P): the run process's own `Snapshot` (module namespaces, environment, limits,
threads…) and the worker's `leftovers` read from /proc (threads, children, signals,
descriptors, timers). A trace on either side ends the process. What they can and cannot
catch is in docs/architecture.md, "Module notes". Must not fork, wait or kill.
"""

from __future__ import annotations

import ctypes
import operator
import os
import resource
import signal
import sys
import threading
from collections.abc import Mapping

MAX_RUNS = 1000  # runs of one warm process, then a fresh one
IDLE_SECONDS = 60.0  # a warm process idle this long ends
LIMITS = (
    resource.RLIMIT_AS,
    resource.RLIMIT_FSIZE,
    resource.RLIMIT_NPROC,
    resource.RLIMIT_NOFILE,
    resource.RLIMIT_CORE,
)
TIMERS = (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)
_VERSION_OFFSET = object.__basicsize__ + ctypes.sizeof(ctypes.c_ssize_t)  # after ma_used
_VALUE = operator.attrgetter("value")


def _version_view(namespace: Mapping[str, object]) -> ctypes.c_uint64:
    """CPython's `ma_version_tag` of a dict (PEP 509): it changes on every mutation."""
    return ctypes.c_uint64.from_address(id(namespace) + _VERSION_OFFSET)


def _versions_work() -> bool:
    if sys.implementation.name != "cpython" or not (3, 11) <= sys.version_info[:2] < (3, 14):
        return False
    probe: dict[str, int] = {}
    view = _version_view(probe)
    before = view.value
    probe["x"] = 1
    changed = view.value
    probe["x"] = 2
    return before != changed != view.value


SUPPORTED = _versions_work()


class Modules:
    """The namespaces of every loaded module (and the environment), watched by their
    dict versions; a module loaded by a run is watched from the next run on. Made in the
    worker, before it forks: a run process inherits the views and only reads them."""

    def __init__(self) -> None:
        self._kept: list[object] = []  # what is watched, kept alive so no address is reused
        self._names: list[str] = []
        self._views: list[ctypes.c_uint64] = []
        self._ids: set[int] = set()
        self._table, self._seen = _version_view(sys.modules), -1
        environ = getattr(os.environ, "_data", None)
        if isinstance(environ, dict):
            self._watch(environ, "the environment", environ)
        self.versions()

    def versions(self) -> list[int]:
        """Each watched namespace's version now (first watching those loaded since)."""
        if self._table.value != self._seen:
            for module in list(sys.modules.values()):
                namespace = getattr(module, "__dict__", None)
                if id(module) not in self._ids and isinstance(namespace, dict):
                    self._watch(module, f"module {getattr(module, '__name__', '?')}", namespace)
            self._seen = self._table.value
        return list(map(_VALUE, self._views))

    def changed(self, before: list[int]) -> str:
        now = list(map(_VALUE, self._views[: len(before)]))
        if now != before:
            which = next(i for i, (a, b) in enumerate(zip(now, before, strict=True)) if a != b)
            return f"{self._names[which]} was changed"
        if self._table.value != self._seen:  # modules were loaded, or unloaded
            loaded = {id(module) for module in list(sys.modules.values())}
            for kept, name in zip(self._kept[: len(before)], self._names, strict=False):
                if name.startswith("module ") and id(kept) not in loaded:
                    return f"{name} was unloaded"
        return ""

    def _watch(self, owner: object, name: str, namespace: Mapping[str, object]) -> None:
        self._kept.append(owner)
        self._names.append(name)
        self._views.append(_version_view(namespace))
        self._ids.add(id(owner))


class Snapshot:
    """What a run process looks like before a run; `changed()` says what a run left."""

    def __init__(self, modules: Modules) -> None:
        self._modules = modules
        self._versions = modules.versions()
        self._cwd = os.getcwd()
        self._paths = (list(sys.path), list(sys.meta_path), list(sys.path_hooks))
        self._limits = list(map(resource.getrlimit, LIMITS))

    def changed(self) -> str:
        """What the run left behind, in words; empty when nothing."""
        if threading.active_count() != 1:
            return "a thread was left running"
        if any(signal.getitimer(which) != (0.0, 0.0) for which in TIMERS):
            return "an interval timer was left armed"
        if self._cwd != os.getcwd():
            return "the working directory was changed"
        if self._paths != (sys.path, sys.meta_path, sys.path_hooks):
            return "the import path was changed"
        if self._limits != list(map(resource.getrlimit, LIMITS)):
            return "a resource limit was changed"
        return self._modules.changed(self._versions)


# --- the worker's side: what /proc says of a run process -----------------------------


def _read(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 1 << 16)
    except OSError:
        return None
    finally:
        os.close(fd)


def status(pid: int) -> tuple[bytes, ...] | None:
    """Its thread count, signal masks (pending, blocked, ignored, caught) and number of
    open descriptors, from /proc; None where it cannot be read."""
    text = _read(f"/proc/{pid}/stat")
    try:
        descriptors = str(len(os.listdir(f"/proc/{pid}/fd"))).encode()
    except OSError:
        return None
    # field 3 (state) on, after the command name in parentheses
    fields: list[bytes] = [] if text is None else text.rpartition(b") ")[2].split()
    return (fields[17], *fields[28:32], descriptors) if len(fields) >= 32 else None


def leftovers(
    pid: int, baseline: tuple[bytes, ...] | None, others: set[int], found: list[int] | None
) -> str:
    """What of a finished run is still there, in words; empty when nothing.

    `found` are the worker's children now; `others` the worker's processes that are not
    the run's (its spare). The worker is a subreaper, so a live descendant of the run is
    a child of the run process or, once its parent is gone, of the worker: no need to
    list the pids cgroup."""
    now = status(pid)
    if baseline is None or now is None or found is None:
        return "its state cannot be read from /proc"
    if now[0] != b"1":
        return f"{now[0].decode()} threads were left"
    if now != baseline:
        return "a descriptor was left open, or a signal pending, or signal masks changed"
    allowed = others | {pid}
    if not set(found) <= allowed:
        return "a process of the run is still alive"
    children, timers = _read(f"/proc/{pid}/task/{pid}/children"), _read(f"/proc/{pid}/timers")
    if children is None or timers is None:
        return "its children cannot be read from /proc"
    if children.strip():
        return "a child of the run is still alive"
    return "a POSIX timer was left" if timers.strip() else ""
