"""A small ctypes binding of Linux Landlock: what a run process may touch, for good.

Owns the three syscalls (create_ruleset 444, add_rule 445, restrict_self 446 on
every Linux architecture), the ABI probe and the access bits of each ABI. `abi()`
says which ABI the kernel has (0: none); `Ruleset(abi)` handles every
filesystem right that ABI knows plus, from ABI 6, signal and abstract-socket
scoping; `allow(path, rights)` grants rights beneath a path; `restrict()` makes
the calling process (and all it starts later) live under them, irreversibly;
`restrict_network` adds a layer of TCP rules (ABI ≥ 4).
Must not decide which paths a run gets (that is `programs.confine`).
"""

from __future__ import annotations

import ctypes
import functools
import os
import stat
from typing import Any

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
BIND_TCP, CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4: network rights
RULE_NET_PORT = 2
NET_ABI = 4

FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the ones a file may hold
READ = READ_FILE | READ_DIR | EXECUTE
READ_WRITE = (1 << 16) - 1


def fs_rights(abi: int) -> int:
    """Every filesystem right the kernel's ABI knows (so all of them are handled)."""
    if abi <= 0:
        return 0
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def scopes(abi: int) -> int:
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0


def restrict_self(ruleset_fd: int) -> None:
    """No new privileges, then the ruleset `ruleset_fd` on this process: irreversible.
    Works with a ruleset built by another process (the worker) and inherited."""
    if _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise LandlockError(errno, f"no_new_privs: {os.strerror(errno)}")
    _call(SYS_RESTRICT_SELF, ctypes.c_int(ruleset_fd), ctypes.c_uint32(0))


class LandlockError(OSError):
    """A Landlock call the kernel refused."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def restrict_network(version: int, connect_ports: tuple[int, ...]) -> None:
    """One more Landlock layer on this process, of the network alone (ABI ≥ 4): no TCP bind,
    and TCP connect to `connect_ports` only (none: no TCP at all). Irreversible."""
    attr = _RulesetAttr(handled_access_fs=0, handled_access_net=BIND_TCP | CONNECT_TCP, scoped=0)
    size = ctypes.c_size_t(_attr_size(version))
    fd = _call(SYS_CREATE_RULESET, ctypes.byref(attr), size, ctypes.c_uint32(0))
    try:
        for port in connect_ports:
            allowed = ctypes.byref(_NetPort(allowed_access=CONNECT_TCP, port=port))
            rule_type = ctypes.c_int(RULE_NET_PORT)
            _call(SYS_ADD_RULE, ctypes.c_int(fd), rule_type, allowed, ctypes.c_uint32(0))
        restrict_self(fd)
    finally:
        os.close(fd)


Rule = Any  # a rule's argument to landlock_add_rule, made once by `rule`
_PATH_BENEATH, _NO_FLAGS = ctypes.c_int(RULE_PATH_BENEATH), ctypes.c_uint32(0)


def rule(fd: int, rights: int) -> Rule:
    """The rule "`rights` beneath the path open as `fd`" (already masked), made once to be
    added to many rulesets (`Ruleset.add_rule`); it keeps no copy of `fd`."""
    return ctypes.byref(_PathBeneath(allowed_access=rights, parent_fd=fd))


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)  # its own handle: `syscall` gets a restype
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int  # looked up now: a process forked later finds it
    return libc


def _call(*args: object) -> int:
    result = _libc().syscall(*args)
    if result < 0:
        errno = ctypes.get_errno()
        raise LandlockError(errno, f"landlock syscall {args[0]}: {os.strerror(errno)}")
    return int(result)


def abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (old kernel, disabled)."""
    try:
        flags = ctypes.c_uint32(CREATE_RULESET_VERSION)
        return _call(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), flags)
    except (LandlockError, OSError, AttributeError):
        return 0


def _attr_size(version: int) -> int:
    return 8 if version < 4 else 16 if version < 6 else 24


class Ruleset:
    """One ruleset being built; `restrict()` applies it to this process and closes it."""

    def __init__(self, version: int) -> None:
        self.version, self.handled = version, fs_rights(version)
        attr = _RulesetAttr(
            handled_access_fs=self.handled, handled_access_net=0, scoped=scopes(version)
        )
        self._fd = _call(
            SYS_CREATE_RULESET,
            ctypes.byref(attr),
            ctypes.c_size_t(_attr_size(version)),
            ctypes.c_uint32(0),
        )

    def allow(self, path: str, rights: int) -> bool:
        """Grants `rights` (masked to what the ABI handles, and to a file's rights for a
        file) beneath `path`; False when the path does not exist."""
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            return self.allow_fd(fd, rights)
        finally:
            os.close(fd)

    def allow_fd(self, fd: int, rights: int) -> bool:
        self.add(fd, self.masked(fd, rights))
        return True

    def masked(self, fd: int, rights: int) -> int:
        """`rights` as a rule beneath `fd` may hold them (a file holds fewer than a directory)."""
        mask = self.handled if stat.S_ISDIR(os.fstat(fd).st_mode) else self.handled & FILE_RIGHTS
        return rights & mask

    def add(self, fd: int, rights: int) -> None:
        """Adds a rule already masked (`masked`)."""
        self.add_rule(rule(fd, rights))

    def add_rule(self, made: Rule) -> None:
        """Adds a rule made beforehand (`rule`): the syscall only."""
        _call(SYS_ADD_RULE, ctypes.c_int(self._fd), _PATH_BENEATH, made, _NO_FLAGS)

    def restrict(self) -> None:
        """No new privileges, then the ruleset on this process: irreversible."""
        try:
            restrict_self(self._fd)
        finally:
            self.close()

    def detach(self) -> int:
        """The ruleset's descriptor, now the caller's to restrict with and close."""
        fd, self._fd = self._fd, -1
        return fd

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
