"""Fire → `main()` latency and throughput: a warm worker pool vs a fresh interpreter per run.

Run: .venv/bin/python bench/programs.py [warm_runs] [cold_runs]

A trivial program, so the figures are the executor's own cost: latency from the fire to
`main()` entered (CLOCK_MONOTONIC on both sides), CPU of the whole device side. Ways: the
pool with no trigger, one trigger (its warm process), two at once, distinct triggers, a
fresh worker per run, a bare `python -c`. Details in docs/performance.md, "Benchmark notes".
"""

from __future__ import annotations

import asyncio
import os
import resource
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

# Run as a file, this script's own directory would come first on sys.path and its name
# would shadow the `programs` package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import msgspec  # noqa: E402

from programs.context import RunContext  # noqa: E402
from programs.executor import Executor, Job, worker_env  # noqa: E402
from programs.process import WorkerProcess  # noqa: E402

JOB = Job(source="def main(args):\n    return {'ok': True}\n", ref="bench@v1", timeout_seconds=30)
CONTEXT = RunContext(
    run_id="bench",
    trigger_id="bench-trigger",
    program="bench@v1",
    peer="bench",
    space="bench",
    url="http://127.0.0.1:9",
    token="bench",
)
BARE = "import sys, time; sys.stdout.write(repr(time.monotonic()))"

Sample = Callable[[], Awaitable[float]]


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def cpu_seconds() -> float:
    """This process's CPU, its children's now (utime, stime, cutime, cstime) and theirs
    that were reaped."""
    own, reaped = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/children") as f:
            pids = f.read().split()
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rpartition(") ")[2].split()
            except FileNotFoundError:
                continue
            total += sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


async def measure(sample: Sample, runs: int, width: int = 1) -> tuple[list[float], float, float]:
    """Latencies, runs/s and CPU ms per run."""
    latencies: list[float] = []
    began, cpu = time.perf_counter(), cpu_seconds()
    for _ in range(runs // width):
        latencies += await asyncio.gather(*(sample() for _ in range(width)))
    took = (cpu_seconds() - cpu) * 1000 / len(latencies)
    return latencies, len(latencies) / (time.perf_counter() - began), took


def pooled(executor: Executor, trigger: str | None = None, distinct: bool = False) -> Sample:
    """Runs on `executor`: without a trigger, of one `trigger`, or of a new one each run."""
    runs = iter(range(1 << 62))

    def job() -> Job:
        if trigger is None:
            return JOB
        name = f"{trigger}-{next(runs)}" if distinct else trigger
        context = msgspec.structs.replace(CONTEXT, trigger_id=name)
        return msgspec.structs.replace(JOB, context=context)

    async def sample() -> float:
        outcome = await executor.run(job())
        assert outcome.main_latency_ms is not None, outcome
        return outcome.main_latency_ms

    return sample


async def fresh_worker() -> float:
    fired = time.monotonic()
    worker = await WorkerProcess.spawn(worker_env(), timeout=30)
    try:
        outcome = await worker.run(JOB, fired)
    finally:
        await worker.close()
    assert outcome.main_latency_ms is not None, outcome
    return outcome.main_latency_ms


async def bare_python() -> float:
    fired = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", BARE, stdout=asyncio.subprocess.PIPE, env=worker_env()
    )
    out, _ = await proc.communicate()
    return (float(out) - fired) * 1000


def row(name: str, latencies: list[float], rate: float, cpu: float) -> str:
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    return f"{name:<30} {len(latencies):>5} {p50:>9.3f} {p99:>9.3f} {rate:>9.0f} {cpu:>9.2f}"


async def main(warm_runs: int, cold_runs: int) -> None:
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'mode':<30} {'runs':>5} {'p50 ms':>9} {'p99 ms':>9} {'runs/s':>9} {'CPU ms':>9}")
    async with Executor(size=2) as executor:
        await measure(pooled(executor), 50)  # let caches settle
        print(row("pool, no trigger", *await measure(pooled(executor), warm_runs)))
        one = pooled(executor, "one")
        await measure(one, 10)
        print(row("pool, one trigger", *await measure(one, warm_runs)))
        print(row("pool, one trigger, 2 at once", *await measure(one, warm_runs, width=2)))
        distinct = pooled(executor, "new", distinct=True)
        print(row("pool, distinct triggers", *await measure(distinct, warm_runs)))
    print(row("fresh worker per run", *await measure(fresh_worker, cold_runs)))
    print(row("bare `python -c`", *await measure(bare_python, cold_runs)))
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    counts = [int(arg) for arg in sys.argv[1:3]]
    asyncio.run(main(*(counts + [2000, 100][len(counts) :])))
