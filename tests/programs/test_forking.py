"""The worker's fork: libc's own while it has one thread, so a run process skips CPython's
after-fork hooks; what those hooks did that matters (random's state) is done in the worker.

Real workers (`Executor`) and real run processes; the fallback in a real child process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from core.vocab import RunStatus
from programs import forking
from programs.executor import Executor, Job

DRAW = "import random, os\ndef main(args):\n    return [os.getpid(), random.getrandbits(62)]\n"
THREADS_AND_LOGS = """
    import logging, threading
    def main(args):
        seen = []
        workers = [threading.Thread(target=seen.append, args=(n,)) for n in range(4)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()
        logging.getLogger("prog").warning("ran %d threads", len(seen))
        return {"seen": sorted(seen), "alive": threading.active_count()}
"""


def job(source: str) -> Job:
    return Job(source=textwrap.dedent(source), ref="prog@v1", timeout_seconds=10.0)


def test_libc_fork_is_found_here() -> None:
    assert forking.raw()


async def test_each_run_process_draws_its_own_random_numbers() -> None:
    async with Executor(size=1, spares=4) as executor:
        executor.prepare(8)
        ran = [await executor.run(job(DRAW)) for _ in range(8)]
    assert [o.status for o in ran] == [RunStatus.OK] * 8, ran
    assert len({pid for pid, _ in (o.result for o in ran)}) == 8  # eight processes
    assert len({draw for _, draw in (o.result for o in ran)}) == 8  # none shares a state


async def test_a_run_process_starts_threads_and_logs() -> None:
    async with Executor(size=1) as executor:
        ran = await executor.run(job(THREADS_AND_LOGS))
    assert ran.status is RunStatus.OK, ran
    assert ran.result == {"seen": [0, 1, 2, 3], "alive": 1}
    assert "ran 4 threads" in ran.stderr_tail


def test_with_a_second_thread_it_is_os_fork() -> None:
    # os.fork's child has only the forking thread in `threading`; libc's would list both.
    probe = """
        import os, threading
        from programs import forking
        stop = threading.Event()
        threading.Thread(target=stop.wait).start()
        pid = forking.fork()
        if pid == 0:
            os._exit(threading.active_count())
        stop.set()
        print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(probe)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
