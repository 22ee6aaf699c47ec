"""What containment costs per run: a warm call vs a fresh contained process per run.

Run: .venv/bin/python bench/containment.py [runs]

This process plays the worker (it becomes a subreaper and enters its pids cgroup,
as `programs.worker` does) and runs a trivial program (`return {"ok": True}`) `runs`
times each way; it prints a Markdown table of the cost of one run, wall time from
the request to the reply with every process of the run reaped, and of the program
entering `main()`:

- warm call:               `runner.run_request` in this process, no isolation between
                           runs (what a worker shared by every trigger did before)
- spare, forked ahead:     what the fire pays now: the request to a run process that
                           was forked and confined beforehand, its reply, the reap
- warm process, one trigger: the worker's loop (`programs.worker.Processes`: run, reply,
                           refill) for runs of one warm key: the process kept clean
                           after a run serves the next
- worker loop, distinct triggers: the same loop with a new key each run: a spare each,
                           the previous warm process ended and a new spare forked
                           after the reply (counted here)
- fork + confine + run:    the cold path (a spare that died while idle)
- fork + run, unconfined:  the same without Landlock or the privilege drop
- forking the next spare:  paid after the reply, off the fire path
"""

from __future__ import annotations

import socket
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import msgspec  # noqa: E402

from programs import channel, runner, runproc, worker  # noqa: E402
from programs.context import RunContext  # noqa: E402

SOURCE = 'def main(args):\n    return {"ok": True}\n'


CONTEXT = RunContext(run_id="bench", trigger_id="bench", program="bench@v1", peer="bench",
                     space="bench", url="http://127.0.0.1:9", token="bench")  # fmt: skip


def request(key: str = "") -> channel.Request:
    return channel.Request(source=SOURCE, ref="bench@v1", args={}, context=CONTEXT, memory_mb=512,
                        timeout_seconds=10, marker=b"", key=key)  # fmt: skip


Sample = tuple[float, float | None]


def timed(runs: int, one: Callable[[], Sample]) -> tuple[list[float], list[float]]:
    """(wall ms, ms to main) of each run; `one` returns them for one run."""
    walls, mains = [], []
    for _ in range(runs):
        wall, to_main = one()
        walls.append(wall)
        if to_main is not None:
            mains.append(to_main)
    return walls, mains


def since(start: float, entered: float | None = None) -> Sample:
    now = time.monotonic()
    return (now - start) * 1000, None if entered is None else (entered - start) * 1000


def row(name: str, walls: list[float], mains: list[float]) -> str:
    def p(values: list[float], q: float) -> str:
        return f"{statistics.quantiles(values, n=100)[int(q) - 1]:.3f}" if len(values) > 2 else "-"

    rate = f"{len(walls) / (sum(walls) / 1000):.0f}"
    return f"| {name} | {len(walls)} | {p(walls, 50)} | {p(walls, 99)} | {p(mains, 50)} | {rate} |"


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


def forking(place: runproc.Place, fd: int) -> Callable[[], Sample]:
    def one() -> Sample:
        start = time.monotonic()
        ahead = runproc.Spare.fork(place, fd)
        took = since(start)
        ahead.discard(place)
        return took

    return one


def main(runs: int) -> None:
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

    rows = [("warm call (no isolation)", warm), ("spare, forked ahead (the fire path)", spare),
            ("fork + confine + run (cold)", cold)]  # fmt: skip
    print(f"containment: {msgspec.to_builtins(runproc.confine.containment(place.plan))}")
    print("| per run | runs | wall p50 ms | wall p99 ms | to main() p50 ms | runs/s |")
    print("|---|---|---|---|---|---|")
    for name, one in rows:
        print(row(name, *timed(runs, one)), flush=True)
    looped_rows(place, fd, runs)
    confined = place.plan
    place.plan = msgspec.structs.replace(confined, abi=0, root=False)
    print(row("fork + run, unconfined", *timed(runs, cold)), flush=True)
    place.plan = confined
    print(row("forking the next spare (off the fire path)", *timed(runs, forking(place, fd))))
    place.close()
    ours.close()
    theirs.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
