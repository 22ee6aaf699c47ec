"""What containment costs per run: a warm call vs a fresh contained process per run.

Run: .venv/bin/python bench/containment.py [runs]

This process plays the worker (a subreaper in its pids cgroup, as `programs.worker`) and runs
a trivial program `runs` times each way: a warm call, a spare forked ahead, a warm process
for one trigger, the worker loop with distinct triggers, the spare with and without the
network layer and the scratch measured, the cold paths, a real worker process. Prints a
Markdown table of wall and CPU time per run; the ways are in docs/performance.md,
"Benchmark notes".
"""

from __future__ import annotations

import os
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import msgspec  # noqa: E402

from programs import channel, confine, privileges, quota, runner, runproc, worker  # noqa: E402
from programs.context import RunContext  # noqa: E402

SOURCE = 'def main(args):\n    return {"ok": True}\n'


CONTEXT = RunContext(
    run_id="bench",
    trigger_id="bench",
    program="bench@v1",
    peer="bench",
    space="bench",
    url="http://127.0.0.1:9",
    token="bench",
)


SLEEPER = 'import time\n\ndef main(args):\n    time.sleep(0.2)\n    return {"ok": True}\n'


def request(
    key: str = "", ports: tuple[int, ...] | None = None, source: str = SOURCE
) -> channel.Request:
    return channel.Request(
        source=source,
        ref="bench@v1",
        args={},
        context=CONTEXT,
        memory_mb=512,
        timeout_seconds=10,
        marker=b"",
        key=key,
        ports=ports,
    )


Sample = tuple[float, float | None]
Timings = tuple[list[float], list[float], float]


def cpu_seconds() -> float:
    """CPU time of this process and of the children it reaped."""
    own, reaped = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def timed(runs: int, one: Callable[[], Sample]) -> Timings:
    """(wall ms, ms to main) of each run and CPU ms per run; `one` runs one."""
    walls, mains = [], []
    began = cpu_seconds()
    for _ in range(runs):
        wall, to_main = one()
        walls.append(wall)
        if to_main is not None:
            mains.append(to_main)
    return walls, mains, (cpu_seconds() - began) * 1000 / runs


def since(start: float, entered: float | None = None) -> Sample:
    now = time.monotonic()
    return (now - start) * 1000, None if entered is None else (entered - start) * 1000


def row(name: str, walls: list[float], mains: list[float], cpu: float) -> str:
    def p(values: list[float], q: float) -> str:
        return f"{statistics.quantiles(values, n=100)[int(q) - 1]:.3f}" if len(values) > 2 else "-"

    rate = f"{len(walls) / (sum(walls) / 1000):.0f}"
    cells = f"{p(walls, 50)} | {p(walls, 99)} | {p(mains, 50)} | {cpu:.2f} | {rate}"
    return f"| {name} | {len(walls)} | {cells} |"


def looped_rows(place: runproc.Place, fd: int, runs: int) -> None:
    """The worker's own loop: run, reply, refill (all counted in the wall time)."""
    procs = worker.Processes(place, fd)
    keys = iter(range(1 << 62))

    def looped(key: Callable[[], str]) -> Callable[[], Sample]:
        def one() -> Sample:
            start = time.monotonic()
            entered = procs.run(request(key())).entered_at
            procs.refill()
            return since(start, entered)

        return one

    print(row("warm process, one trigger (worker loop)", *timed(runs, looped(lambda: "one"))))
    distinct = looped(lambda: f"new-{next(keys)}")
    print(row("worker loop, distinct triggers", *timed(runs, distinct)), flush=True)
    procs.close()


def round_two_rows(place: runproc.Place, fd: int, runs: int) -> None:
    """What least privilege round 2 adds to a run: the Landlock TCP layer of
    `limits.network: space` at the run's first request, and the worker measuring the
    scratch directory every `quota.CHECK_S` while a run is out (a 200 ms program)."""

    def spare_with(req: channel.Request) -> Callable[[], Sample]:
        def one() -> Sample:
            ahead = runproc.Spare.fork(place, fd)
            ahead.ready()
            start = time.monotonic()
            entered = ahead.run(req, place, fd).entered_at
            ahead.discard(place)
            return since(start, entered)

        return one

    print(row("spare, network any (no TCP layer)", *timed(runs, spare_with(request()))))
    network = spare_with(request(ports=(9,)))
    print(row("spare, network space (TCP layer)", *timed(runs, network)), flush=True)
    sleepy = max(10, runs // 10)
    slow = spare_with(request(source=SLEEPER))
    print(row("spare, 200 ms run, scratch measured", *timed(sleepy, slow)), flush=True)
    every, quota.CHECK_S = quota.CHECK_S, 1e9
    try:
        print(row("spare, 200 ms run, not measured", *timed(sleepy, slow)), flush=True)
    finally:
        quota.CHECK_S = every


def forking(place: runproc.Place, fd: int) -> Callable[[], Sample]:
    def one() -> Sample:
        start = time.monotonic()
        ahead = runproc.Spare.fork(place, fd)
        took = since(start)
        ahead.discard(place)
        return took

    return one


def drain(pipe: BinaryIO) -> None:
    while pipe.read1(1 << 16):
        pass


def worker_process_row(runs: int) -> str:
    """A real worker process, a new trigger each run; CPU from its /proc stat."""
    from programs.executor import worker_env  # only now: the rows above measure this process

    ours, theirs = socket.socketpair()
    proc = subprocess.Popen(
        [sys.executable, "-m", "programs.worker", str(theirs.fileno())],
        env=worker_env(),
        pass_fds=(theirs.fileno(),),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    theirs.close()
    for pipe in (proc.stdout, proc.stderr):  # drained, as the executor does
        threading.Thread(target=drain, args=(pipe,), daemon=True).start()
    stream, keys = ours.makefile("rb"), iter(range(1 << 62))

    def receive() -> channel.Reply | channel.Ready:
        return channel.decode_to_parent(stream.read(channel.body_length(stream.read(4))))

    def one() -> Sample:
        start = time.monotonic()
        ours.sendall(channel.frame(request(f"new-{next(keys)}")))
        return since(start, receive().entered_at)

    def cpu() -> float:  # utime, stime, cutime, cstime
        with open(f"/proc/{proc.pid}/stat") as f:
            fields = f.read().rpartition(") ")[2].split()
        return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")

    receive()
    timed(min(runs, 50), one)  # its first runs: caches, the first spares
    began = cpu()
    walls, mains, _ = timed(runs, one)
    took = (cpu() - began) * 1000 / runs
    stream.close()
    ours.close()
    proc.wait()
    return row("worker process, distinct triggers (its /proc CPU)", walls, mains, took)


def main(runs: int) -> None:
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| per run | runs | wall p50 ms | wall p99 ms | to main() p50 ms | CPU ms/run | runs/s |")
    print("|---|---|---|---|---|---|---|")
    print(worker_process_row(runs), flush=True)  # first: nothing is exec'd after the drop below
    if os.geteuid() == 0:
        privileges.drop_bounding()  # as the worker does, once for all its run processes
    worker._preload()  # as the worker does: what runs import is loaded before any run
    place = runproc.Place()
    ours, theirs = socket.socketpair()
    fd = theirs.fileno()
    req = request()

    def warm() -> Sample:
        start = time.monotonic()
        return since(start, runner.run_request(req).entered_at)

    def spare() -> Sample:
        ahead = runproc.Spare.fork(place, fd)
        ahead.ready()
        start = time.monotonic()
        entered = ahead.run(req, place, fd).entered_at
        ahead.discard(place)
        return since(start, entered)

    def cold() -> Sample:
        start = time.monotonic()
        return since(start, runproc.run(req, place, fd).entered_at)

    rows = [
        ("warm call (no isolation)", warm),
        ("spare, forked ahead (the fire path)", spare),
        ("fork + confine + run (cold)", cold),
    ]
    for name, one in rows:
        print(row(name, *timed(runs, one)), flush=True)
    round_two_rows(place, fd, runs)
    looped_rows(place, fd, runs)
    confined, rules = place.plan, place.rules
    place.plan, place.rules = msgspec.structs.replace(confined, abi=0, root=False), None
    print(row("fork + run, unconfined", *timed(runs, cold)), flush=True)
    place.plan, place.rules = confined, rules
    print(row("forking the next spare (off the fire path)", *timed(runs, forking(place, fd))))
    place.close()
    ours.close()
    theirs.close()
    print(f"containment: {msgspec.to_builtins(confine.containment(place.plan))}")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
