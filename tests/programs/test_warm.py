"""Warm run processes through a real pool: repeated runs of one trigger reuse a clean one.

The pid a program sees tells which process ran it: the same pid is a reused (warm)
process, a new pid a fresh one.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

from core.vocab import RunStatus
from programs import warm
from programs.confine import MiB
from programs.context import RunContext
from programs.executor import Executor, Job, worker_env
from programs.outcome import Outcome

pytestmark = pytest.mark.skipif(not warm.SUPPORTED, reason="no dict versions on this Python")

PID = "import os\ndef main(args):\n    return os.getpid()\n"


def job(source: str, trigger: str = "T", **overrides: object) -> Job:
    context = RunContext(
        run_id=f"run-{os.urandom(4).hex()}",
        trigger_id=trigger,
        program="prog@v1",
        peer="p",
        space="s",
        url="http://127.0.0.1:9",
        token=f"token-{os.urandom(4).hex()}",
    )
    fields: dict = {"ref": "prog@v1", "timeout_seconds": 5.0, "context": context} | overrides
    return Job(source=textwrap.dedent(source), **fields)


@pytest.fixture
async def pool():
    async with Executor(size=2) as executor:
        if executor.containment is None or executor.containment.landlock < 6:
            pytest.skip("warm run processes need Landlock ABI 6")
        yield executor


async def ok(pool: Executor, j: Job) -> Outcome:
    outcome = await pool.run(j)
    assert outcome.status is RunStatus.OK, outcome
    return outcome


async def test_repeated_runs_of_one_trigger_reuse_one_process(pool: Executor) -> None:
    pids = [(await ok(pool, job(PID))).result for _ in range(20)]
    assert len(set(pids)) == 1
    plain = [(await ok(pool, job(PID, context=None))).result for _ in range(3)]
    assert len(set(plain)) == 3 and pids[0] not in plain  # no trigger: a fresh process each


async def test_each_warm_run_gets_its_own_token_and_an_empty_scratch_directory(
    pool: Executor,
) -> None:
    source = """
        import os
        def main(args):
            found = os.listdir(".")
            open("left.txt", "w").write("x")
            return [os.getpid(), found, os.getcwd(), args["token"]]
    """
    seen = []
    for _ in range(3):
        j = job(source)
        assert j.context is not None
        j = msgspec.structs.replace(j, args={"token": j.context.token})
        seen.append((await ok(pool, j)).result)
    assert len({pid for pid, *_ in seen}) == 1  # one warm process
    assert [found for _, found, *_ in seen] == [[], [], []]  # what a run left was removed
    assert len({cwd for _, _, cwd, _ in seen}) == 1
    assert len({token for *_, token in seen}) == 3  # each run its own token


LEFTOVERS = {
    "a thread": "import threading\n"
    "threading.Thread(target=threading.Event().wait, args=(30,), daemon=True).start()",
    "a child": "import subprocess, sys\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])",
    "an orphan": "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
    "        import time; time.sleep(30)\n    os._exit(0)\nos.wait()",
    "builtins": "import builtins\nbuiltins.marker = 1",
    "a module": "import json\njson.dumps = lambda *a, **k: 'x'",
    "the import path": "import sys\nsys.path.append('/x')",
    "the environment": "os.environ['X'] = '1'",
    "a signal handler": "import signal\nsignal.signal(signal.SIGUSR1, lambda *a: None)",
    "an alarm": "import signal\nsignal.alarm(30)",
    "an error": "raise ValueError('no')",
    "a descriptor": "os.open('/dev/null', os.O_RDONLY)",
    "a timeout": "import time\ntime.sleep(30)",
    "a crash": "os._exit(3)",
}


@pytest.mark.parametrize("what", sorted(LEFTOVERS))
async def test_a_run_that_leaves_something_is_not_reused(pool: Executor, what: str) -> None:
    leave = textwrap.indent(LEFTOVERS[what], " " * 8)
    source = f"import os\ndef main(args):\n    if args.get('leave'):\n{leave}\n"
    source += "    return os.getpid()\n"
    first = (await ok(pool, job(source, timeout_seconds=1.0))).result
    assert (await ok(pool, job(source, timeout_seconds=1.0))).result == first  # warm
    left = await pool.run(job(source, args={"leave": True}, timeout_seconds=1.0))
    if left.status is RunStatus.OK:
        assert left.result == first  # it ran in the warm process
    after = (await ok(pool, job(source, timeout_seconds=1.0))).result
    assert after != first  # a fresh process, not the one the run left something in
    assert not os.path.exists(f"/proc/{first}") or _zombie(first)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"
    except (OSError, IndexError):
        return True


async def test_another_trigger_never_lands_in_a_warm_process(pool: Executor) -> None:
    t1 = (await ok(pool, job(PID, "T"))).result
    u1 = (await ok(pool, job(PID, "U"))).result
    for _ in range(3):  # two workers: each key keeps its own warm process
        assert (await ok(pool, job(PID, "T"))).result == t1
        assert (await ok(pool, job(PID, "U"))).result == u1
    assert t1 != u1
    others = [(await ok(pool, job(PID, f"V{i}"))).result for i in range(4)]
    assert t1 not in others and u1 not in others
    other_ref = (await ok(pool, job(PID, "T", ref="other@v1"))).result
    other_memory = (await ok(pool, job(PID, "T", memory_mb=128))).result
    assert len({t1, u1, other_ref, other_memory, *others}) == 8


async def test_a_warm_run_is_as_contained_as_a_fresh_one(pool: Executor, tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("device-token")
    source = f"""
        import os, resource
        def attempt(call):
            try:
                call()
            except Exception as exc:
                return type(exc).__name__
            return "done"
        def main(args):
            hard = resource.getrlimit(resource.RLIMIT_AS)[1]
            lift = lambda: resource.setrlimit(resource.RLIMIT_AS, (hard + {MiB}, hard + {MiB}))
            return {{"pid": os.getpid(),
                    "read": attempt(lambda: open({str(secret)!r}).read()),
                    "signal": attempt(lambda: os.kill({os.getpid()}, signal.SIGTERM)),
                    "lift": attempt(lift),
                    "memory": attempt(lambda: bytearray(900 * {MiB})),
                    "hard": hard}}
        import signal
    """
    first = (await ok(pool, job(source, memory_mb=64))).result
    for _ in range(3):
        result = (await ok(pool, job(source, memory_mb=64))).result
        assert result["pid"] == first["pid"]  # a warm process
        assert (result["read"], result["signal"]) == ("PermissionError", "PermissionError")
        assert (result["lift"], result["memory"]) == ("ValueError", "MemoryError")
        assert result["hard"] == first["hard"] != resource.RLIM_INFINITY


async def test_a_warm_process_ends_with_the_pool() -> None:
    async with Executor(size=1) as executor:
        pid = (await executor.run(job(PID))).result
        assert (await executor.run(job(PID))).result == pid
    assert not os.path.exists(f"/proc/{pid}") or _zombie(pid)


async def test_a_warm_run_cannot_reach_the_spare_beside_it(pool: Executor) -> None:
    source = """
        import os
        def main(args):
            me, reached = os.getpid(), []
            for pid in range(max(2, me - 200), me + 200):
                try:
                    os.kill(pid, 0)
                except OSError:
                    continue
                reached.append(pid)
            return [me, reached]
    """
    first, _ = (await ok(pool, job(source))).result
    pid, reached = (await ok(pool, job(source))).result
    assert pid == first  # a warm process, with its worker's spare alive beside it
    assert reached == [pid]  # nothing but itself: not the spare, the worker or the device


IDLE_SCRIPT = """
import json, os, socket, sys, threading, time
from programs import runproc, warm, channel, worker
from programs.context import RunContext
warm.IDLE_SECONDS = 0.3
worker._preload()
place = runproc.Place()
ours, theirs = socket.socketpair()
procs = worker.Processes(place, theirs.fileno())
context = RunContext(run_id="r", trigger_id="T", program="p@v1", peer="p", space="s",
                     url="http://127.0.0.1:9", token="t")
request = channel.Request(source="import os\\ndef main(args):\\n    return os.getpid()\\n",
                       ref="p@v1", args={}, context=context, memory_mb=256, marker=b"", key="K")
pids = []
for _ in range(2):
    pids.append(int(procs.run(request).result))
    procs.refill()
kept = procs.warm is not None and procs.warm.pid == pids[0]
threading.Timer(1.0, ours.close).start()  # end of file after the idle limit
ended = worker.next_message(theirs, procs) is None
json.dump({"enabled": place.warm, "pids": pids, "kept": kept, "ended": ended,
           "warm_after": procs.warm is not None,
           "alive": os.path.exists(f"/proc/{pids[0]}")}, sys.stdout)
procs.close()
place.close()
"""


def test_a_warm_process_idle_too_long_ends() -> None:
    done = subprocess.run(
        [sys.executable, "-c", IDLE_SCRIPT],
        capture_output=True,
        text=True,
        env=worker_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    if not found["enabled"]:
        pytest.skip("warm run processes need Landlock ABI 6 and a subreaper")
    assert found["pids"][0] == found["pids"][1] and found["kept"]
    assert found["ended"] and not found["warm_after"] and not found["alive"]


DIED_IDLE_SCRIPT = """
import json, os, signal, socket, time
from programs import runproc
place = runproc.Place()
ours, theirs = socket.socketpair()
spare = runproc.Spare.fork(place, theirs.fileno())
assert spare.ready(time.monotonic() + 10)
os.kill(spare.pid, signal.SIGKILL)  # ended while idle, as by the OOM killer
while spare.waiting:
    time.sleep(0.01)
signalled = []
real = os.killpg
os.killpg = lambda pgid, sig: (signalled.append(pgid), real(pgid, sig))
spare.discard(place)
json.dump({"pid": spare.pid, "signalled": signalled, "status": spare._status}, sys.stdout)
place.close()
""".replace("import json,", "import json, sys,")


def test_a_spare_reaped_after_dying_idle_is_never_signalled_again() -> None:
    """Its pid may belong to a new process by then: `discard` must not kill that group."""
    done = subprocess.run(
        [sys.executable, "-c", DIED_IDLE_SCRIPT],
        capture_output=True,
        text=True,
        env=worker_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["signalled"] == []
    assert os.waitstatus_to_exitcode(found["status"]) == -9  # its death is still told
