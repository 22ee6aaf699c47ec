"""Hostile programs run by a real `baton device` against a real `baton space serve`.

Each test publishes a program that attacks the device the way issue 10 found it
could: read `/proc/*/cmdline` and the token files, kill its parent or the baton
processes, leave a double-forked `setsid()` grandchild behind, lift its memory
limit or its file size limit, fork without end, patch modules for the next
trigger's run. Each attack fails, the run record says what was refused, and the
device and the space are still up and still fire afterwards. The device runs with
one worker, so every run goes through the same worker process. Waits poll the
space under a deadline.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support import (
    LISTENING,
    Proc,
    Procs,
    eventually,
    matched,
    runs_of,
    serve,
    write_token,
)

from runtime.client.api import SpaceClient

SPACE = "home"
PEER = "box"
EVERY_SECOND = {"kind": "cron", "spec": {"expr": "* * * * * *"}}
RAN = {"ok", "error", "timeout", "crashed"}
ECHO = "def main(args):\n    return {'ok': True}\n"
DEADLINE = 30.0


class Rig:
    """One space server and one device (one worker), as processes."""

    def __init__(
        self, api: SpaceClient, procs: Procs, space: Proc, device: Proc, tmp: Path
    ) -> None:
        self.api, self.procs, self.space, self.device, self.tmp = api, procs, space, device, tmp
        self.count = 0

    @property
    def secret_files(self) -> list[Path]:
        return [self.tmp / "admin.token", self.tmp / "device.token", self.tmp / "space.db"]

    def workers(self) -> list[int]:
        return children(self.device.proc.pid)

    async def run(
        self, source: str, args: dict[str, Any] | None = None, limits: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Publishes `source`, fires it once (a cron that is paused after its first run),
        and returns that run's record."""
        self.count += 1
        ref = f"attack{self.count}@v1"
        await self.api.program_put(SPACE, ref, {"source": textwrap.dedent(source)})
        body = {
            **EVERY_SECOND,
            "name": ref,
            "program": ref,
            "args": args or {},
            "limits": limits or {},
        }
        tid = (await self.api.trigger_create(SPACE, body))["id"]

        async def ran() -> dict[str, Any] | None:
            return next(
                (r for r in await runs_of(self.api, SPACE, tid) if r["status"] in RAN), None
            )

        run = await eventually(ran, timeout=DEADLINE, what=f"a run of {ref}")
        await self.api.trigger_patch(SPACE, tid, {"enabled": False})
        return run

    async def still_up(self) -> None:
        """Both processes run, the space answers and the device still fires."""
        assert self.space.running, self.space.tail()
        assert self.device.running, self.device.tail()
        run = await self.run(ECHO)
        assert (run["status"], run["result"]) == ("ok", {"ok": True}), run


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


async def only_the_spare(rig: Rig) -> None:
    """Nothing of the last run is left: the worker's one child is the spare for the next run
    (forked after the reply, so it may come a moment after the run record)."""
    worker = rig.workers()[0]

    async def one_child() -> bool:
        return len(children(worker)) == 1

    await eventually(one_child, timeout=DEADLINE, what="the worker's one child, its spare")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async with Procs(tmp_path) as procs:
        admin_file = tmp_path / "admin.token"
        space, url = await serve(
            procs,
            tmp_path / "space.db",
            "--admin-token-file",
            str(admin_file),
            "--lease-seconds",
            "3",
        )
        async with SpaceClient(url, admin_file.read_text().strip()) as api:
            await api.space_create({"id": SPACE})
            minted = await api.token_device({"peer": PEER, "space": SPACE})
            token = write_token(tmp_path / "device.token", minted["token"])
            device = await procs.start(
                "device",
                "device",
                "--peer",
                PEER,
                "--url",
                url,
                "--token-file",
                str(token),
                "--space",
                SPACE,
                "--data",
                str(tmp_path / "data"),
                "--workers",
                "1",
            )

            async def active() -> bool:
                return (await api.election(SPACE)).active == PEER

            await eventually(active, timeout=DEADLINE, what="the device holding the lease")
            yield Rig(api, procs, space, device, tmp_path)


READ = """
    import os, sys
    refused = []
    def attempt(what, read):
        try:
            got = read()
        except OSError as exc:
            refused.append(exc)
            print(f"{what}: {exc}", file=sys.stderr)
            return None
        print(f"{what}: READ {got!r}"[:300], file=sys.stderr)
        return got
    def main(args):
        attempt("list /proc", lambda: os.listdir("/proc"))
        paths = list(args["paths"])
        for pid in args["pids"]:
            proc = f"/proc/{pid}"
            cmdline = attempt(f"cmdline of {pid}", lambda: open(f"{proc}/cmdline", "rb").read())
            attempt(f"environ of {pid}", lambda: open(f"/proc/{pid}/environ", "rb").read())
            words = (cmdline or b"").decode().split("\\0")
            paths += [b for a, b in zip(words, words[1:]) if a.endswith(("token-file", "--db"))]
        for path in paths:
            attempt(f"read {path}", lambda: open(path, "rb").read())
        attempt("list home", lambda: os.listdir(args["home"]))
        attempt("list data", lambda: os.listdir(args["data"]))
        raise refused[0]
"""


async def test_a_run_reads_neither_proc_nor_the_token_files(rig: Rig) -> None:
    pids = [rig.space.proc.pid, rig.device.proc.pid, *rig.workers()]
    paths = [str(p) for p in rig.secret_files]
    args = {"pids": pids, "paths": paths, "home": str(Path.home()), "data": str(rig.tmp)}
    run = await rig.run(READ, args)
    assert run["status"] == "error", run
    assert run["error"].startswith("permission denied: /proc\n"), run["error"]
    tail = run["stderrTail"]
    assert "READ" not in tail, tail
    for path in paths:
        assert f"read {path}: [Errno 13] Permission denied" in tail, tail
    assert f"cmdline of {rig.device.proc.pid}: [Errno 13] Permission denied" in tail, tail
    assert "list home: [Errno 13]" in tail and "list data: [Errno 13]" in tail, tail
    recorded = json.dumps(run)
    for secret in (rig.tmp / "admin.token", rig.tmp / "device.token"):
        assert secret.read_text().strip() not in recorded
    await rig.still_up()


KILL_PARENT = """
    import os, signal
    def main(args):
        os.kill(os.getppid(), signal.SIGKILL)
        return "killed my parent"
"""


async def test_a_run_cannot_kill_its_parent(rig: Rig) -> None:
    workers = rig.workers()
    run = await rig.run(KILL_PARENT)
    assert run["status"] == "error", run
    assert run["error"].startswith(f"signal refused: {workers[0]} is outside this run\n"), run
    assert rig.workers() == workers  # the same worker: it was never killed
    await rig.still_up()


SCAN_AND_KILL = """
    import os, signal, sys
    def main(args):
        victims = list(args["pids"])
        try:
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
                except OSError:
                    continue
                if b"runtime.cli" in cmdline and args["marker"].encode() in cmdline:
                    victims.append(int(pid))  # only this test's baton processes
        except OSError as exc:
            print(f"scan: {exc}", file=sys.stderr)
        refused = []
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError as exc:
                refused.append(exc)
                print(f"kill {pid}: {exc}", file=sys.stderr)
        if refused:
            raise refused[0]
        return {"killed": victims}
"""


async def test_a_run_that_scans_proc_and_kills_baton_processes_kills_nothing(rig: Rig) -> None:
    pids = [rig.space.proc.pid, rig.device.proc.pid, *rig.workers()]
    run = await rig.run(SCAN_AND_KILL, {"pids": pids, "marker": str(rig.tmp)})
    assert run["status"] == "error", run
    assert run["error"].startswith(f"signal refused: {pids[0]} is outside this run"), run
    assert "scan: [Errno 13] Permission denied: '/proc'" in run["stderrTail"], run
    for pid in pids:
        assert f"kill {pid}: [Errno 1] signal refused" in run["stderrTail"], run
        assert alive(pid), pid
    await rig.still_up()


ESCAPE = """
    import os, sys, time
    def main(args):
        r, w = os.pipe()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.write(w, str(os.getpid()).encode())
                while True:
                    time.sleep(0.05)
            os._exit(0)
        os.wait()
        pid = int(os.read(r, 32))
        print(f"grandchild {pid}", file=sys.stderr, flush=True)
        while args["hang"]:
            time.sleep(0.05)
        return {"grandchild": pid}
"""


@pytest.mark.parametrize("hang", [True, False], ids=["timeout", "returns"])
async def test_a_double_forked_setsid_grandchild_dies_with_its_run(rig: Rig, hang: bool) -> None:
    run = await rig.run(ESCAPE, {"hang": hang}, {"timeoutSeconds": 3})
    if hang:
        assert (run["status"], run["error"]) == ("timeout", "exceeded the timeout of 3 s"), run
    else:
        assert run["status"] == "ok", run
    grandchild = int(run["stderrTail"].split("grandchild ")[1].split()[0])
    assert not alive(grandchild), f"grandchild {grandchild} outlived its run"
    await only_the_spare(rig)
    await rig.still_up()


LIFT_AND_ALLOCATE = """
    import resource, sys
    def main(args):
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
        try:
            resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY,) * 2)
        except (ValueError, OSError) as exc:
            print(f"lift: {exc}", file=sys.stderr)
        block = bytearray(300 * 1024 * 1024)
        return len(block)
"""


async def test_a_run_cannot_lift_its_memory_limit(rig: Rig) -> None:
    run = await rig.run(LIFT_AND_ALLOCATE, limits={"memoryMB": 64})
    assert run["status"] == "error", run
    assert run["error"].startswith("memory limit of 64 MB exceeded\n"), run
    assert "MemoryError" in run["error"]
    assert "lift: not allowed to raise maximum limit" in run["stderrTail"], run
    await rig.still_up()


FILE_SIZE = """
    import resource, sys
    def main(args):
        try:
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
        except (ValueError, OSError) as exc:
            print(f"lift: {exc}", file=sys.stderr)
        with open("big", "wb") as f:  # in its scratch directory
            f.seek(300 * 1024 * 1024)
            f.write(b"x")
            f.flush()
        return "wrote 300 MiB"
"""


async def test_a_run_cannot_lift_its_file_size_limit(rig: Rig) -> None:
    run = await rig.run(FILE_SIZE)
    assert run["status"] == "error", run
    assert run["error"].startswith("file size limit exceeded\n"), run
    assert "lift: not allowed to raise maximum limit" in run["stderrTail"], run
    await rig.still_up()


FORK_BOMB = """
    import os, time
    def main(args):
        forked = 0
        try:
            while forked < 1000:
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                forked += 1
        except OSError as exc:
            raise OSError(exc.errno, f"forked {forked}, then {exc.strerror}") from None
        return forked
"""


async def test_a_run_cannot_fork_past_its_process_limit(rig: Rig) -> None:
    run = await rig.run(FORK_BOMB)
    assert run["status"] == "error", run
    forked = int(run["error"].rsplit("forked ", 1)[1].split(",")[0])
    assert forked < 100, run["error"]
    assert "Resource temporarily unavailable" in run["error"], run
    await only_the_spare(rig)
    await rig.still_up()


PATCH = """
    import builtins, json, os
    import programs.anyv1 as anyv1
    def main(args):
        builtins.baton_marker = "left by another trigger"
        json.dumps = lambda *a, **k: "patched"
        original = anyv1.AnyV1.__init__
        def spy(self, ctx, **kw):
            builtins.stolen = [*getattr(builtins, "stolen", []), ctx.token]
            original(self, ctx, **kw)
        anyv1.AnyV1.__init__ = spy
        return {"worker": os.getppid()}
"""
OBSERVE = """
    import builtins, json, os
    def main(args):
        use("any@v1").cursor_set("seen", 1)
        return {"worker": os.getppid(), "marker": getattr(builtins, "baton_marker", None),
                "json": json.dumps([1]), "stolen": getattr(builtins, "stolen", None)}
"""


async def test_nothing_of_one_triggers_run_reaches_another_triggers_run(rig: Rig) -> None:
    patched = await rig.run(PATCH)
    assert patched["status"] == "ok", patched
    observed = await rig.run(OBSERVE)
    assert observed["status"] == "ok", observed
    assert observed["result"] == {
        "worker": patched["result"]["worker"],
        "marker": None,
        "json": "[1]",
        "stolen": None,
    }


async def test_the_device_reports_how_contained_its_runs_are(rig: Rig) -> None:
    async def reported() -> dict[str, Any] | None:
        devices = (await rig.api.devices(SPACE)).devices
        return next((d.status.get("containment") for d in devices if d.peer == PEER), None)

    found = await eventually(reported, timeout=DEADLINE, what="the device's containment")
    assert found["level"] == "full", found  # this kernel: Landlock ABI >= 6, pids cgroup
    assert found["landlock"] >= 6 and found["signals"] and found["filesystem"], found
    admin = str(rig.tmp / "admin.token")
    url = (await matched(rig.space, LISTENING)).group(1)
    code, out = await rig.procs.run(
        "status", "status", "--url", url, "--token-file", admin, "--space", SPACE
    )
    assert code == 0, out
    row = next(line for line in out.splitlines() if line.startswith(PEER))
    assert row.split()[5] == "full", out  # the CONTAINMENT column (CLOCK follows)
