"""Spares ahead of the slot: a worker readies several confined run processes when runs are
due, each run finds one, and a run's containment is the same however many wait beside it.

Real workers (`Executor`), real run processes; the counts are read from /proc.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from waiting import eventually

from core.vocab import RunStatus
from programs.confine import MAX_TASKS
from programs.executor import Executor, Job, worker_env

PID = "import os\ndef main(args):\n    return os.getpid()\n"
NAP = "import os, time\ndef main(args):\n    time.sleep(0.5)\n    return os.getpid()\n"
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
            return {"forked": forked, "errno": exc.errno}
        return {"forked": forked}
"""


def job(source: str) -> Job:
    return Job(source=textwrap.dedent(source), ref="prog@v1", timeout_seconds=10.0)


def children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def spares(executor: Executor) -> dict[int, list[int]]:
    """Each worker's children (idle: its spares), by worker pid."""
    return {w.pid: children(w.pid) for w in executor._workers}


def counts(executor: Executor) -> list[int]:
    return sorted(len(kids) for kids in spares(executor).values())


async def test_prepared_spares_are_ready_before_the_runs_and_each_run_takes_one() -> None:
    async with Executor(size=2, spares=4) as executor:
        assert counts(executor) == [1, 1]  # at rest: one spare each, as before
        executor.prepare(8)  # four runs each
        await eventually(lambda: counts(executor) == [4, 4], timeout=20)
        ready = {pid for kids in spares(executor).values() for pid in kids}
        ran = [await executor.run(job(PID)) for _ in range(8)]  # the idle worker longest first
        assert [o.status for o in ran] == [RunStatus.OK] * 8, ran
        assert {o.result for o in ran} == ready  # each in a spare forked before it, once
        await eventually(lambda: counts(executor) == [1, 1], timeout=20)  # the next: one each


async def test_a_worker_readies_no_more_spares_than_its_cap() -> None:
    async with Executor(size=2, spares=3) as executor:
        executor.prepare(1000)
        await eventually(lambda: counts(executor) == [3, 3], timeout=20)
        executor.prepare(1)  # one each is what a worker keeps anyway: nothing to tell
        outcome = await executor.run(job(PID))
        assert outcome.status is RunStatus.OK, outcome
        await eventually(lambda: counts(executor) == [2, 3], timeout=20)  # one used, 2 wanted


async def test_a_prepare_that_comes_mid_run_waits_for_the_reply() -> None:
    async with Executor(size=1, spares=4) as executor:
        (worker,) = executor._workers
        running = asyncio.ensure_future(executor.run(job(NAP)))
        await eventually(lambda: not executor.stats().idle, timeout=10)
        worker.prepare(4)  # the executor itself tells idle workers only
        outcome = await running
        assert outcome.status is RunStatus.OK, outcome  # not taken for the executor gone
        await eventually(lambda: counts(executor) == [4], timeout=20)
        assert executor._workers == {worker} and worker.usable


async def test_a_runs_process_bound_is_the_same_with_spares_beside_it() -> None:
    async with Executor(size=1, spares=8) as executor:
        cgroup = executor.containment is not None and executor.containment.processes
        executor.prepare(8)
        await eventually(lambda: counts(executor) == [8], timeout=20)
        (before,) = spares(executor).values()
        bomb = await executor.run(job(FORK_BOMB))
        assert bomb.status is RunStatus.OK, bomb
        assert bomb.result["errno"] == 11, bomb  # EAGAIN: the cap, not the 1,000
        if cgroup == "pids cgroup":  # the run's own 64 tasks, not more for the idle spares
            assert bomb.result["forked"] == MAX_TASKS - 1, bomb
        (after,) = spares(executor).values()  # the bomb's processes reaped, the spares kept
        assert set(after) == set(before[1:]), (before, after)
        outcome = await executor.run(job(PID))
        assert outcome.status is RunStatus.OK and outcome.result == before[1], outcome
        more = await executor.run(job(FORK_BOMB))  # 6 spares left beside it now
        assert more.result == bomb.result, more


SURPLUS_SCRIPT = """
import json, os, socket, sys, threading
from programs import runproc, worker
worker.SURPLUS_IDLE_S = 0.3
worker._preload()
place = runproc.Place()
ours, theirs = socket.socketpair()
procs = worker.Processes(place, theirs.fileno(), cap=5)
procs.prepare(9)
prepared = [s.pid for s in procs.spares]
ready = all(s.ready() for s in procs.spares)
threading.Timer(1.0, ours.close).start()  # end of file well after the surplus ended
ended = worker.next_message(theirs, procs) is None
left = [s.pid for s in procs.spares]
json.dump({"prepared": prepared, "ready": ready, "ended": ended, "left": left,
           "alive": [os.path.exists(f"/proc/{p}") for p in prepared]}, sys.stdout)
procs.close()
place.close()
"""


def test_spares_a_burst_did_not_use_end_after_a_while() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SURPLUS_SCRIPT],
        capture_output=True,
        text=True,
        env=worker_env(),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert len(found["prepared"]) == 5 and found["ready"], found  # the cap, all confined
    assert found["ended"], found
    assert found["left"] == found["prepared"][:1], found  # the oldest stays
    assert found["alive"] == [True, False, False, False, False], found  # and the rest reaped


PENDING_SCRIPT = """
import json, socket, sys
from programs import runproc, worker
worker._preload()
place = runproc.Place()
ours, theirs = socket.socketpair()
procs = worker.Processes(place, theirs.fileno(), cap=5)
asked = []
def waits():
    asked.append(len(procs.spares))
    return len(procs.spares) >= 3  # a request came in while the third was forked
procs.prepare(5, waits)
while_waiting = len(procs.spares)
while procs.spares:  # as runs take them
    procs.spares.popleft().discard(place, keep=procs.idle())
procs.top_up(lambda: True)  # all taken, a request waits: one comes all the same
after_taken = len(procs.spares)
json.dump({"while": while_waiting, "asked": asked, "after": after_taken}, sys.stdout)
procs.close()
place.close()
"""


def test_a_waiting_request_stops_the_top_up_but_for_a_first_spare() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PENDING_SCRIPT],
        capture_output=True,
        text=True,
        env=worker_env(),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["while"] == 3, found  # not the 5 asked: a request waits
    assert found["asked"] == [1, 2, 3], found  # asked before each fork but the first
    assert found["after"] == 1, found  # none left: one forked, no more while it waits


@pytest.mark.parametrize("spares", [0, -1])
def test_an_executor_needs_a_spare(spares: int) -> None:
    with pytest.raises(ValueError, match="spares: must be at least 1"):
        Executor(size=1, spares=spares)
