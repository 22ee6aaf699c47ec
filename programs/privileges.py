"""Dropping what a run process may not keep: capabilities, and the hard limits it could lift.

Owns the prctl/capset calls of the run process (SPEC "Containment and credentials"): for
root, locked securebits and every capability set emptied; for everyone, hard resource
limits equal to the soft ones. The worker drops the bounding set once (`drop_bounding`);
its run processes inherit it. Must not decide what a run may read (that is Landlock,
`programs.confine`).
"""

from __future__ import annotations

import ctypes
import functools
import os
import resource

PR_CAPBSET_DROP, PR_GET_SECUREBITS, PR_SET_SECUREBITS, PR_CAP_AMBIENT = 24, 27, 28, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECURE_NOROOT, SECURE_NOROOT_LOCKED = 1 << 0, 1 << 1
SECURE_NO_SETUID_FIXUP, SECURE_NO_SETUID_FIXUP_LOCKED = 1 << 2, 1 << 3
SECURE_KEEP_CAPS_LOCKED, SECURE_NO_CAP_AMBIENT_RAISE = 1 << 5, 1 << 6
SECURE_NO_CAP_AMBIENT_RAISE_LOCKED = 1 << 7
LOCKED_SECUREBITS = (
    SECURE_NOROOT
    | SECURE_NOROOT_LOCKED
    | SECURE_NO_SETUID_FIXUP
    | SECURE_NO_SETUID_FIXUP_LOCKED
    | SECURE_KEEP_CAPS_LOCKED
    | SECURE_NO_CAP_AMBIENT_RAISE
    | SECURE_NO_CAP_AMBIENT_RAISE_LOCKED
)
CAP_VERSION_3 = 0x20080522


class PrivilegeError(OSError):
    """A step of the privilege drop failed: the run must not go on."""


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


_NO_CAPABILITIES = (ctypes.byref(_CapHeader(CAP_VERSION_3, 0)), (_CapData * 2)())  # capset's


@functools.cache
def libc() -> ctypes.CDLL:
    """The C library, loaded once (in the worker, so a run process finds it loaded)."""
    return ctypes.CDLL(None, use_errno=True)


def _prctl(what: str, *args: int) -> int:
    result: int = libc().prctl(*(ctypes.c_ulong(a) for a in args))
    if result < 0:
        errno = ctypes.get_errno()
        raise PrivilegeError(errno, f"{what}: {os.strerror(errno)}")
    return result


@functools.cache
def last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 40


CAP_SETS = (b"CapInh", b"CapPrm", b"CapEff", b"CapBnd", b"CapAmb")


def capabilities() -> dict[str, int]:
    """This process's capability sets (inheritable, permitted, effective, bounding,
    ambient) by their /proc/self/status names; {} where /proc cannot say."""
    try:
        fd = os.open("/proc/self/status", os.O_RDONLY)
    except OSError:
        return {}
    try:
        text = os.read(fd, 1 << 16)
    finally:
        os.close(fd)
    found = {}
    for key in CAP_SETS:  # lines like "CapEff:\t000001ffffffffff"
        at = text.find(b"\n" + key + b":")
        if at >= 0:
            found[key.decode()] = int(text[at + len(key) + 2 : text.find(b"\n", at + 1)], 16)
    return found


def drop_bounding() -> None:
    """Locks the securebits and empties the bounding and ambient sets of this process, for
    good. Needs CAP_SETPCAP; the process keeps its effective capabilities until it execs."""
    _prctl("securebits", PR_SET_SECUREBITS, LOCKED_SECUREBITS, 0, 0, 0)
    for cap in range(last_cap() + 1):
        _prctl(f"drop capability {cap}", PR_CAPBSET_DROP, cap, 0, 0, 0)
    _prctl("clear ambient capabilities", PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)


def bounded() -> bool:
    """Whether this process's securebits are locked and its bounding set is empty, so a
    process it forks has only its own sets left to drop (`drop_capabilities`)."""
    try:
        locked = _prctl("securebits", PR_GET_SECUREBITS, 0, 0, 0, 0) == LOCKED_SECUREBITS
    except PrivilegeError:
        return False
    return locked and capabilities().get("CapBnd") == 0


def drop_capabilities(bounded: bool = False) -> None:
    """Every capability gone for good, bounding set included (`bounded`: the parent
    already emptied it and locked the securebits, `drop_bounding`), then checks that all
    five sets are empty. Needs CAP_SETPCAP for the bounding set."""
    if not bounded:
        drop_bounding()
    # Empty permitted and inheritable sets empty the ambient set too (it holds only what
    # is both), and the effective one.
    if libc().capset(*_NO_CAPABILITIES) != 0:
        errno = ctypes.get_errno()
        raise PrivilegeError(errno, f"capset: {os.strerror(errno)}")
    left = capabilities()
    if len(left) != len(CAP_SETS) or any(left.values()):
        raise PrivilegeError(0, f"capabilities left after the drop: {left or 'unknown'}")


def warm() -> None:
    """Loads what the drop needs in the worker, before any fork (a run process finds the
    C functions it calls looked up already)."""
    for name in ("prctl", "capset"):
        getattr(libc(), name)
    last_cap()


def pin(limit: int, soft: int) -> None:
    """Sets `limit` to `soft` for both soft and hard (never above the current hard)."""
    _, hard = resource.getrlimit(limit)
    value = soft if hard == resource.RLIM_INFINITY else min(soft, hard)
    resource.setrlimit(limit, (value, value))


def pin_current(limit: int) -> None:
    """The hard limit lowered to the soft one, so it cannot be raised."""
    soft, _ = resource.getrlimit(limit)
    resource.setrlimit(limit, (soft, soft))
