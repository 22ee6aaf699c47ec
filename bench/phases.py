"""Where a fresh run's CPU goes, phase by phase, in the worker and in the run process.

Run: .venv/bin/python bench/phases.py [runs]

As bench/containment.py, this process plays the worker and runs a trivial program with a new
trigger each run through the worker's own loop; each phase (a function of the worker or the
run process, wrapped here) is counted in CPU time and page faults, and the totals say what
the wrappers cost. Details in docs/performance.md, "Benchmark notes".
"""

from __future__ import annotations

import collections
import json
import os
import resource
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from programs import (  # noqa: E402
    channel,
    confine,
    forking,
    landlock,
    privileges,
    runchild,
    runner,
    runproc,
    warm,
    worker,
)
from programs.context import RunContext  # noqa: E402

CHILD = [
    (runchild, "_enter"),
    (runner, "address_space"),
    (confine, "limit"),
    (privileges, "drop_capabilities"),
    (landlock, "restrict_self"),
    (warm, "Snapshot"),
    (runchild, "_receive"),
    (runner, "run_request"),
]
WORKER = [
    (runproc.Place, "scratch"),
    (runproc.Place, "ruleset"),
    (runproc.Spare, "ready"),
    (runproc, "_await_reply"),
    (runproc, "_end"),
    (runproc.Spare, "keepable"),
    (warm, "status"),
    (runproc.Spare, "clear_scratch"),
]
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

cpu: dict[str, float] = collections.defaultdict(float)  # this process's, or a run process's
faults: dict[str, float] = collections.defaultdict(float)


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


def count(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        began, first = time.thread_time(), _faults()
        try:
            return call(*args, **kwargs)
        finally:
            cpu[name] += time.thread_time() - began
            faults[name] += _faults() - first

    return counted


def instrument() -> None:
    for owner, name in CHILD + WORKER:
        setattr(owner, name, count(name, getattr(owner, name)))
    real_fork, real_answer = forking.fork, runchild._answer

    def fork() -> int:
        began = time.thread_time()
        pid = real_fork()
        if pid == 0:  # the run process: its own counts from here
            cpu.clear(), faults.clear()
            cpu["at fork return"], faults["at fork return"] = time.thread_time(), _faults()
        else:
            cpu["fork"] += time.thread_time() - began
        return pid

    def answer(sock: socket.socket, reply: channel.Reply) -> None:
        cpu["run process until it answers"] = time.thread_time()
        faults["run process until it answers"] = _faults()
        os.write(2, f"PHASES {json.dumps([cpu, faults])}\n".encode())
        real_answer(sock, reply)

    forking.fork, runchild._answer = fork, answer  # type: ignore[assignment]


def request(key: str) -> channel.Request:
    return channel.Request(
        source=SOURCE,
        ref="bench@v1",
        args={},
        context=CONTEXT,
        memory_mb=512,
        timeout_seconds=10,
        marker=b"",
        key=key,
    )


def totals() -> tuple[float, int, float, int]:
    own, reaped = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return (
        own.ru_utime + own.ru_stime,
        own.ru_minflt,
        reaped.ru_utime + reaped.ru_stime,
        reaped.ru_minflt,
    )


def main(runs: int) -> None:
    if os.geteuid() == 0:
        privileges.drop_bounding()  # as the worker does
    worker._preload()
    instrument()
    place = runproc.Place()
    _control, theirs = socket.socketpair()  # the executor's end, never read here
    keys = iter(range(1 << 62))
    with tempfile.TemporaryFile() as out:
        saved = os.dup(2)
        os.dup2(out.fileno(), 2)  # where the run processes write their counts
        procs = worker.Processes(place, theirs.fileno())
        for _ in range(20):  # the first runs: caches
            procs.run(request(f"first-{next(keys)}"))
            procs.refill()
        cpu.clear(), faults.clear()
        out.truncate(0)
        began = totals()
        for _ in range(runs):
            procs.run(request(f"new-{next(keys)}"))
            procs.refill()
        ended = totals()
        procs.close()
        os.dup2(saved, 2)
        out.seek(0)
        lines = [
            json.loads(line[7:])
            for line in out.read().decode().splitlines()
            if line.startswith("PHASES ")
        ]
    place.close()
    report(runs, began, ended, lines)


def report(runs: int, began: tuple, ended: tuple, lines: list) -> None:
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {runs} runs")
    print("| phase | where | CPU ms/run | page faults/run |")
    print("|---|---|---:|---:|")
    for name in [name for _, name in WORKER] + ["fork"]:
        print(f"| {name} | worker | {cpu[name] * 1000 / runs:.3f} | {faults[name] / runs:.0f} |")
    for name in ["at fork return"] + [name for _, name in CHILD] + ["run process until it answers"]:
        took = sum(line[0].get(name, 0.0) for line in lines) * 1000 / max(1, len(lines))
        copied = sum(line[1].get(name, 0) for line in lines) / max(1, len(lines))
        print(f"| {name} | run process | {took:.3f} | {copied:.0f} |")
    for label, at in (("worker in all", 0), ("run processes in all, exit included", 2)):
        took, copied = (ended[at] - began[at]) * 1000 / runs, (ended[at + 1] - began[at + 1]) / runs
        print(f"| **{label}** | | **{took:.2f}** | **{copied:.0f}** |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
