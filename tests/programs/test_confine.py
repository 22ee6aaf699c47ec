"""The Landlock binding, the privilege drop and the containment plan, in forked children.

Each test forks a child of the test process, confines it and has it try what a
hostile program would; the child reports what happened as JSON on a pipe and
exits. The confinement never touches the test process itself. The "ordinary user"
tests switch the child to `nobody` first, so the unprivileged path is exercised
although the suite runs as root.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from programs import confine, landlock, privileges
from programs.confine import Plan
from programs.runner import memory_cap

ABI = landlock.abi()
needs_landlock = pytest.mark.skipif(ABI < 6, reason="needs Landlock ABI 6 (signal scoping)")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
NOBODY = 65534
ALL_EMPTY = dict.fromkeys(["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"], 0)


def in_child(work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Runs `work` in a forked child; what it returned (or the exception it raised)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            found = work()
        except BaseException as exc:
            found = {"raised": repr(exc)}
        os.write(w, json.dumps(found).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def attempt(call: Callable[[], Any]) -> str:
    try:
        call()
    except (OSError, ValueError) as exc:
        return type(exc).__name__ + (f" {exc.errno}" if isinstance(exc, OSError) else "")
    return "done"


def attacks(secret: Path, scratch: Path) -> dict[str, Any]:
    parent = os.getppid()
    return {
        "read secret": attempt(lambda: secret.read_text()),
        "list /proc": attempt(lambda: os.listdir("/proc")),
        "signal parent": attempt(lambda: os.kill(parent, 0)),
        "write scratch": attempt(lambda: (scratch / "note").write_text("mine")),
        "read stdlib": attempt(lambda: Path(json.__file__).read_text()),
        "read system": attempt(lambda: Path("/etc/hosts").read_text()),
        "raise AS": attempt(lambda: resource.setrlimit(resource.RLIMIT_AS, (-1, -1))),
        "raise NPROC": attempt(lambda: resource.setrlimit(resource.RLIMIT_NPROC, (-1, -1))),
    }


def test_the_abi_is_probed_and_rights_follow_it() -> None:
    assert ABI >= 0
    assert landlock.fs_rights(0) == 0 and landlock.scopes(5) == 0
    assert landlock.fs_rights(1) == (1 << 13) - 1
    assert landlock.fs_rights(6) == (1 << 16) - 1
    assert landlock.scopes(6) == landlock.SCOPE_SIGNAL | landlock.SCOPE_ABSTRACT_UNIX_SOCKET


def test_read_only_rules_go_to_the_outermost_paths_only(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "ab").mkdir()  # beside `a`, not beneath it
    (tmp_path / "link").symlink_to(tmp_path / "a" / "b")
    (tmp_path / "file").write_text("")
    paths = [str(tmp_path / name) for name in ("a/b", "link", "a", "ab", "file", "missing")]
    found = confine.outermost([*paths, ""])
    assert found == tuple(str(tmp_path.resolve() / name) for name in ("a", "ab", "file"))


@needs_landlock
def test_a_ruleset_allows_what_it_grants_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("s3cret")
    scratch = tmp_path / "scratch"
    scratch.mkdir()

    def work() -> dict[str, Any]:
        rules = landlock.Ruleset(ABI)
        for path in confine.read_only_paths():
            rules.allow(path, landlock.READ)
        rules.allow(str(scratch), landlock.READ_WRITE)
        assert not rules.allow(str(tmp_path / "missing"), landlock.READ)
        rules.restrict()
        return attacks(tmp_path / "secret", scratch)

    found = in_child(work)
    assert found["read secret"] == "PermissionError 13", found
    assert found["list /proc"] == "PermissionError 13", found
    assert found["signal parent"] == "PermissionError 1", found  # scoped: outside its domain
    assert (found["write scratch"], found["read stdlib"]) == ("done", "done"), found
    assert (scratch / "note").read_text() == "mine"


@needs_root
def test_root_drops_every_capability_for_good() -> None:
    def work() -> dict[str, Any]:
        privileges.drop_capabilities()
        return {
            "caps": privileges.capabilities(),
            "euid": os.geteuid(),
            "chown": attempt(lambda: os.chown("/", 1, 1)),
            "raise AS": attempt(lambda: resource.setrlimit(resource.RLIMIT_AS, (-1, -1))),
            "setuid": attempt(lambda: os.setuid(1)),
        }

    found = in_child(work)
    assert found["caps"] == ALL_EMPTY and found["euid"] == 0, found
    assert found["chown"] == "PermissionError 1", found  # no CAP_CHOWN although uid 0
    assert found["setuid"] == "PermissionError 1", found  # no CAP_SETUID
    assert found["raise AS"] == "done", found  # still unlimited: nothing pinned here


@needs_root
def test_a_bounding_set_dropped_by_the_parent_leaves_the_child_its_own_sets_to_drop() -> None:
    def worker() -> dict[str, Any]:
        before = privileges.bounded()
        privileges.drop_bounding()  # as the worker does, once
        after, caps = privileges.bounded(), privileges.capabilities()
        run = in_child(
            lambda: {
                "drop": attempt(lambda: privileges.drop_capabilities(True)),
                "caps": privileges.capabilities(),
            }
        )
        return {"before": before, "after": after, "caps": caps, "run": run}

    found = in_child(worker)
    assert not found["before"] and found["after"], found
    assert found["caps"]["CapBnd"] == 0 and found["caps"]["CapEff"] != 0, found  # it keeps its own
    assert found["run"] == {"drop": "done", "caps": ALL_EMPTY}, found
    # A bounding set wrongly taken as dropped fails the check: the run does not go on.
    trusted = in_child(lambda: {"drop": attempt(lambda: privileges.drop_capabilities(True))})
    assert trusted == {"drop": "PrivilegeError 0"}


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory `nobody` can reach (a test's tmp_path is under a root-only one)."""
    path = Path(tempfile.mkdtemp(prefix="baton-confine-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


@needs_root
@needs_landlock
@pytest.mark.parametrize("user", ["root", "nobody"])
def test_confine_stops_the_attacks_as_root_and_as_an_ordinary_user(
    open_dir: Path, user: str
) -> None:
    secret = open_dir / "secret"
    secret.write_text("s3cret")
    secret.chmod(0o644)  # readable by file modes: only Landlock stands in the way
    scratch = open_dir / "scratch"
    scratch.mkdir()
    if user == "nobody":
        os.chown(scratch, NOBODY, NOBODY)

    # The worker looks the interpreter's paths up before any drop; here they sit under a
    # root-only home, so look them up now (sysconfig keeps them) as it does.
    confine.read_only_paths()

    def work() -> dict[str, Any]:
        if user == "nobody":
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
        plan = confine.plan(cgroup=False, subreaper=True)
        confine.confine(plan, str(scratch), memory_cap(512))
        # /proc is out of reach now (so is `capabilities()`): what no capability allows
        setuid, chown = attempt(lambda: os.setuid(1)), attempt(lambda: os.chown(scratch, 1, 1))
        return {**attacks(secret, scratch), "setuid": setuid, "chown": chown}

    found = in_child(work)
    assert found["read secret"] == "PermissionError 13", found
    assert found["list /proc"] == "PermissionError 13", found
    assert found["signal parent"] == "PermissionError 1", found
    assert found["write scratch"] == "done" and found["read system"] == "done", found
    if user == "root":  # this interpreter lives under /root, which `nobody` may not enter
        assert found["read stdlib"] == "done", found
    assert found["raise AS"] == "ValueError" and found["raise NPROC"] == "ValueError", found
    assert found["setuid"] == found["chown"] == "PermissionError 1", found  # no capability


@pytest.mark.parametrize(
    ("plan", "level", "weaker"),
    [
        (Plan(abi=7, root=True, cgroup=True, subreaper=True, read_only=()), "full", []),
        (
            Plan(abi=6, root=False, cgroup=False, subreaper=True, read_only=()),
            "full",
            ["no pids cgroup: the process count is a per-user rlimit"],
        ),
        (
            Plan(abi=6, root=True, cgroup=False, subreaper=True, read_only=()),
            "partial",
            ["no pids cgroup: the process count is a per-user rlimit (not enforced for root)"],
        ),
        (
            Plan(abi=4, root=False, cgroup=True, subreaper=True, read_only=()),
            "partial",
            ["Landlock ABI 4 < 6: no signal or abstract-socket scoping"],
        ),
        (
            Plan(abi=3, root=False, cgroup=True, subreaper=True, read_only=()),
            "partial",
            [
                "Landlock ABI 3 < 6: no signal or abstract-socket scoping",
                "Landlock ABI 3 < 4: limits.network is not enforced (a run may connect anywhere)",
            ],
        ),
        (
            Plan(abi=0, root=True, cgroup=True, subreaper=False, read_only=()),
            "none",
            [
                "no Landlock: a run can read and write what its user can",
                "Landlock ABI 0 < 4: limits.network is not enforced (a run may connect anywhere)",
                "root without Landlock ABI 6: a run may signal root's processes",
                "no subreaper: a descendant that leaves its process group may outlive it",
            ],
        ),
    ],
)
def test_the_containment_level_says_what_is_weaker(plan: Plan, level: str, weaker: list) -> None:
    found = confine.containment(plan)
    assert (found.level, found.weaker) == (level, weaker)


@needs_landlock
def test_a_ruleset_built_ahead_gives_its_run_its_own_scratch_only(tmp_path: Path) -> None:
    plan = confine.plan(cgroup=False, subreaper=True)
    rules = confine.Rules.make(plan)
    assert rules is not None
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    for scratch in (mine, theirs):
        scratch.mkdir()
    (theirs / "left").write_text("another run's file")
    ahead = [rules.ruleset(str(mine)), rules.ruleset(str(theirs))]  # both built before a fork

    def work() -> dict[str, Any]:
        confine.confine(plan, str(mine), memory_cap(512), ahead[0])
        return {
            "write mine": attempt(lambda: (mine / "note").write_text("mine")),
            "read theirs": attempt(lambda: (theirs / "left").read_text()),
            "write theirs": attempt(lambda: (theirs / "planted").write_text("x")),
            "read stdlib": attempt(lambda: Path(json.__file__).read_text()),
        }

    try:
        found = in_child(work)
    finally:
        for fd in ahead:
            os.close(fd)
        rules.close()
    assert found["write mine"] == "done" and found["read stdlib"] == "done", found
    assert found["read theirs"] == "PermissionError 13", found
    assert found["write theirs"] == "PermissionError 13", found
    assert not (theirs / "planted").exists()
