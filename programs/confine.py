"""What a run process does to itself before the program's first line: its containment.

Owns the plan (probed once per worker: the Landlock ABI, root or not, the paths Python
needs read-only) and `confine()`, applied in the forked run process: hard limits, every
capability dropped when root, then Landlock (read-only to the interpreter and packages,
read-write to the run's scratch only; ABI ≥ 6: no signal or abstract socket outside the
run); at the first request, the run's own network rule and file size (`per_run`). Also
`Containment`, what the device reports of it. A promised step that fails fails the run:
never less contained than reported. Must not fork, wait or kill (programs.runproc, .reaper).
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import sysconfig
from pathlib import Path

import msgspec

from programs import landlock, privileges

FILE_SIZE_MB = 256  # the largest file a run may write
MAX_TASKS = 64  # processes and threads of one run (a pids cgroup where we have one)
MiB = 1024 * 1024
PACKAGE_ROOT = Path(__file__).resolve().parent.parent
SYSTEM_READ = (
    *("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin"),
    *("/etc/ssl", "/etc/ca-certificates", "/etc/pki", "/etc/mime.types", "/etc/localtime"),
    *("/etc/resolv.conf", "/etc/hosts", "/etc/host.conf", "/etc/nsswitch.conf", "/etc/gai.conf"),
    *("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/passwd", "/etc/group"),
)
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


class Containment(msgspec.Struct, frozen=True, kw_only=True):
    """How contained this device's runs are: reported with the heartbeat."""

    level: str  # "full" | "partial" | "none"
    landlock: int  # the kernel's Landlock ABI, 0 for none
    filesystem: bool  # reads and writes limited to the scratch directory
    signals: bool  # no signal to a process outside the run
    network: bool = False  # `limits.network` enforced (TCP connect and bind)
    privileges: str  # "dropped" (root without a capability) | "unprivileged" | "kept"
    processes: str  # what bounds the process count: "pids cgroup" | "rlimit (per user)"
    reaper: str  # what ends every descendant: "subreaper" | "process group"
    weaker: list[str] = []  # what is weaker than SPEC, in words


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    abi: int
    root: bool
    cgroup: bool
    subreaper: bool
    read_only: tuple[str, ...]
    bounded: bool = False  # the worker's bounding set is empty already (`privileges.bounded`)


def read_only_paths() -> tuple[str, ...]:
    """What the interpreter needs to import and load: never the home or data directories."""
    prefixes = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix}
    paths = sysconfig.get_paths()
    stdlib = {paths.get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    packages = {str(PACKAGE_ROOT / "programs")}
    zone = {str(p) for p in map(Path, ("/usr/share/zoneinfo",)) if p.exists()}
    return outermost([*prefixes, *stdlib, *packages, *zone, *SYSTEM_READ])


def outermost(paths: list[str]) -> tuple[str, ...]:
    """The existing `paths`, resolved, but those beneath another: a Landlock rule grants
    what is beneath its path too, so one rule each for the rest is enough."""
    found = sorted({os.path.realpath(p) for p in paths if p and os.path.exists(p)})
    kept: list[str] = []
    for path in found:
        if not any(path.startswith(f"{parent}/") for parent in kept):
            kept.append(path)
    return tuple(kept)


def plan(*, cgroup: bool, subreaper: bool) -> Plan:
    root = os.geteuid() == 0
    return Plan(
        abi=landlock.abi(),
        root=root,
        cgroup=cgroup,
        subreaper=subreaper,
        read_only=read_only_paths(),
        bounded=root and privileges.bounded(),
    )


def containment(p: Plan) -> Containment:
    weaker = []
    if p.abi == 0:
        weaker.append("no Landlock: a run can read and write what its user can")
    elif p.abi < 6:
        weaker.append(f"Landlock ABI {p.abi} < 6: no signal or abstract-socket scoping")
    if p.abi < landlock.NET_ABI:
        weaker.append(
            f"Landlock ABI {p.abi} < {landlock.NET_ABI}: limits.network is not enforced "
            "(a run may connect anywhere)"
        )
    signals = p.abi >= 6
    if not signals and p.root:
        weaker.append("root without Landlock ABI 6: a run may signal root's processes")
    if not p.cgroup:
        weaker.append(
            "no pids cgroup: the process count is a per-user rlimit"
            + (" (not enforced for root)" if p.root else "")
        )
    if not p.subreaper:
        weaker.append("no subreaper: a descendant that leaves its process group may outlive it")
    full = p.abi >= 6 and p.subreaper and (p.cgroup or not p.root)
    level = "full" if full else "partial" if p.abi > 0 else "none"
    return Containment(
        level=level,
        landlock=p.abi,
        filesystem=p.abi > 0,
        signals=signals,
        network=p.abi >= landlock.NET_ABI,
        privileges="dropped" if p.root else "unprivileged",
        processes="pids cgroup" if p.cgroup else "rlimit (per user)",
        reaper="subreaper" if p.subreaper else "process group",
        weaker=weaker,
    )


def limit(memory_cap: int | None) -> None:
    """Hard limits: address space (when known), file size, processes, no core dumps."""
    if memory_cap is not None:
        privileges.pin(resource.RLIMIT_AS, memory_cap)
    privileges.pin(resource.RLIMIT_FSIZE, FILE_SIZE_MB * MiB)
    privileges.pin(resource.RLIMIT_CORE, 0)
    privileges.pin_current(resource.RLIMIT_NOFILE)
    privileges.pin_current(resource.RLIMIT_NPROC)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit raises EFBIG instead


def per_run(p: Plan, ports: tuple[int, ...] | None, disk_mb: int) -> None:
    """What depends on the run's record, set at its process's first request: no file larger
    than its disk quota, and (Landlock ABI ≥ 4) TCP connect to `ports` only, no bind
    (None: any network)."""
    privileges.pin(resource.RLIMIT_FSIZE, min(FILE_SIZE_MB, disk_mb) * MiB)
    if ports is not None and p.abi >= landlock.NET_ABI:
        landlock.restrict_network(p.abi, ports)


def restrict_files(p: Plan, scratch: str) -> None:
    if p.abi <= 0:
        return
    rules = landlock.Ruleset(p.abi)
    try:
        for path in p.read_only:
            rules.allow(path, landlock.READ)
        for path in DEVICES:
            rules.allow(path, landlock.READ_FILE | landlock.WRITE_FILE)
        if not rules.allow(scratch, landlock.READ_WRITE):
            raise landlock.LandlockError(2, f"scratch directory {scratch} is gone")
    except BaseException:
        rules.close()
        raise
    rules.restrict()


class Rules:
    """The Landlock rules every run of a worker shares (the read-only paths and the
    devices), opened once in the worker; `ruleset(scratch)` builds a new ruleset of them
    plus one run's scratch directory, ahead of the fork, for that run process alone to
    restrict itself with. One ruleset per run process: none is ever shared or changed
    after it is handed over, so no run gets another's scratch."""

    def __init__(self, abi: int, rules: list[tuple[int, int]]) -> None:
        self.abi, self._fds = abi, [fd for fd, _ in rules]
        self._rules = [landlock.rule(fd, rights) for fd, rights in rules]

    @classmethod
    def make(cls, p: Plan) -> Rules | None:
        if p.abi <= 0:
            return None
        probe = landlock.Ruleset(p.abi)
        rules: list[tuple[int, int]] = []
        try:
            wanted = [(path, landlock.READ) for path in p.read_only]
            wanted += [(path, landlock.READ_FILE | landlock.WRITE_FILE) for path in DEVICES]
            for path, rights in wanted:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue  # as `Ruleset.allow`: a path that is not there needs no rule
                rules.append((fd, probe.masked(fd, rights)))
        finally:
            probe.close()
        return cls(p.abi, rules)

    def ruleset(self, scratch: str) -> int:
        """A new ruleset's descriptor (the caller's to hand over and close): the shared
        rules and read-write beneath `scratch`."""
        rules = landlock.Ruleset(self.abi)
        try:
            for made in self._rules:
                rules.add_rule(made)
            if not rules.allow(scratch, landlock.READ_WRITE):
                raise landlock.LandlockError(2, f"scratch directory {scratch} is gone")
        except BaseException:
            rules.close()
            raise
        return rules.detach()

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds, self._rules = [], []


def confine(p: Plan, scratch: str, memory_cap: int | None, ruleset: int | None = None) -> None:
    """Applies the whole plan to this (forked, not yet running the program) process;
    `ruleset`, built ahead by `Rules.ruleset(scratch)`, spares building one here."""
    limit(memory_cap)
    if p.root:
        privileges.drop_capabilities(bounded=p.bounded)
    if ruleset is None or p.abi <= 0:
        restrict_files(p, scratch)
        return
    try:
        landlock.restrict_self(ruleset)
    finally:
        os.close(ruleset)
