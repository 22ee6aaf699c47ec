"""What one spare costs: memory (RSS, PSS, private) and the CPU of forking and confining it;
and a burst of runs through an `Executor` with spares prepared ahead or not.

Run: .venv/bin/python bench/spares.py [spares] [rounds]   (default 64 spares, 3 rounds)
     .venv/bin/python bench/spares.py --burst N [rounds] [spares]   (N runs at once, ABBA
     rounds; `spares` per worker, default `channel.SPARES`)

This process plays a worker (`programs.worker`'s preload, its `Place`: subreaper, pids cgroup,
Landlock rules) and readies `spares` spares the way a `Prepare` does
(`worker.Processes.prepare`), waits until each is confined and waiting, and reads /proc: the
memory of this process and of every spare (smaps_rollup) before and after, its own CPU for
the forks (getrusage) and each spare's (schedstat, ns). Then it ends them, and again.
`--burst`: two `Executor(size=2)` pools get N distinct runs at once in turn (each run its
own fresh process), one after `prepare(N)` and its spares ready, the other never told;
main() − the burst's start (`main_latency_ms`), runs/s, the workers' and run processes'
CPU per run (/proc).
"""

from __future__ import annotations

import asyncio
import resource
import socket
import statistics
import sys
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from programs import runproc, worker  # noqa: E402
from programs.channel import SPARES  # noqa: E402
from programs.executor import Executor, Job  # noqa: E402

TICK = 100  # os.sysconf("SC_CLK_TCK") on Linux
STAMP = "def main(args):\n    return 1\n"


def memory(pid: int) -> dict[str, float]:
    """RSS, PSS and private memory of `pid`, in kB."""
    found = {"Rss": 0.0, "Pss": 0.0, "Private": 0.0}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value = line.split(":", 1)
        kb = float(value.split()[0])
        if name in ("Rss", "Pss"):
            found[name] += kb
        elif name.startswith("Private_"):
            found["Private"] += kb
    return found


def run_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def round_of(procs: worker.Processes, count: int) -> dict[str, float]:
    me = Path("/proc/self").resolve().name
    base = [memory(int(me))] + [memory(s.pid) for s in procs.spares]
    cpu, wall = own_cpu(), time.perf_counter()
    procs.prepare(count)
    forked = time.perf_counter() - wall, own_cpu() - cpu
    assert all(s.ready(time.monotonic() + 30) for s in procs.spares)
    ready = time.perf_counter() - wall
    new = list(procs.spares)[1:]
    child_ns = sum(run_ns(s.pid) for s in new)
    after = [memory(int(me))] + [memory(s.pid) for s in procs.spares]
    n = len(new)
    total = {k: sum(m[k] for m in after) - sum(m[k] for m in base) for k in base[0]}
    row = {
        "fork wall ms": forked[0] * 1e3 / n,
        "fork CPU ms (worker)": forked[1] * 1e3 / n,
        "confine CPU ms (spare)": child_ns / 1e6 / n,
        "all ready, wall ms": ready * 1e3,
        "RSS kB": total["Rss"] / n,
        "PSS kB": total["Pss"] / n,
        "private kB": total["Private"] / n,
        "worker RSS MB": after[0]["Rss"] / 1024,
    }
    procs.wanted, procs.used = 1, 0.0  # the surplus ends now
    procs.expire_idle()
    return row


def tree_cpu(pids: list[int]) -> float:
    """CPU seconds of `pids` and of the children they reaped."""
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += sum(int(f) for f in fields[11:15]) / TICK
    return total


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def one_burst(executor: Executor, n: int, prepared: bool) -> tuple[float, ...]:
    """p50, p99 of main() − start (ms), runs/s, CPU ms per run; one burst of `n`."""
    workers = [w.pid for w in executor._workers]
    cpu = tree_cpu(workers)
    if prepared:
        want = min(executor.spares, -(-n // executor.size))
        executor.prepare(n)
        for pid in workers:
            while len(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()) < want:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.5 + want * 0.004)  # confined: each spare ≈ 2–4 ms of CPU
    start = time.monotonic()
    jobs = [Job(source=STAMP, ref="stamp@v1", timeout_seconds=30.0) for _ in range(n)]
    outcomes = await asyncio.gather(*(executor.run(job) for job in jobs))
    took = time.monotonic() - start
    mains = [o.main_latency_ms for o in outcomes if o.main_latency_ms is not None]
    assert len(mains) == n, [o.error for o in outcomes if o.error][:3]
    per_run = (tree_cpu(workers) - cpu) / n * 1e3
    await asyncio.sleep(1.0)  # the spare refilled, the CPU quiet again
    return pct(mains, 50), pct(mains, 99), n / took, per_run


async def bursts(n: int, rounds: int, spares: int) -> None:
    """Two pools side by side, one never told (so no spare of a prepared burst is left in
    it), bursts alternating between them."""
    found: dict[bool, list[tuple[float, ...]]] = {False: [], True: []}
    pools = {prepared: Executor(size=2, spares=spares) for prepared in found}
    try:
        for executor in pools.values():
            await executor.start()
            await one_burst(executor, 20, False)  # warm-up
        for i in range(rounds):
            for prepared in (False, True) if i % 2 == 0 else (True, False):
                found[prepared].append(await one_burst(pools[prepared], n, prepared))
    finally:
        for executor in pools.values():
            await executor.close()
    print(f"{n} runs at once, {rounds} rounds each way (ABBA); median (min–max)")
    print("| spares | main() p50 ms | main() p99 ms | runs/s | workers + runs CPU ms/run |")
    print("|---|---|---|---|---|")
    for prepared, rows in found.items():
        cells = []
        for col in zip(*rows, strict=True):
            cells.append(f"{statistics.median(col):.3g} ({min(col):.3g}–{max(col):.3g})")
        name = f"prepared ({spares} per worker)" if prepared else "one per worker"
        print(f"| {name} | " + " | ".join(cells) + " |")


def main() -> None:
    if sys.argv[1:2] == ["--burst"]:
        n, rounds = int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 4
        asyncio.run(bursts(n, rounds, int(sys.argv[4]) if len(sys.argv) > 4 else SPARES))
        return
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    worker._preload()
    place = runproc.Place()
    ours, theirs = socket.socketpair()
    procs = worker.Processes(place, theirs.fileno(), cap=count + 1)
    try:
        assert procs.spares[0].ready(time.monotonic() + 30)
        rows = [round_of(procs, count + 1) for _ in range(rounds)]
    finally:
        procs.close()
        place.close()
        ours.close()
    print(f"{count} spares beside the first, {rounds} rounds; per spare: median (min–max)")
    print("| what | per spare |\n|---|---|")
    for name in rows[0]:
        values = [r[name] for r in rows]
        print(f"| {name} | {statistics.median(values):.3g} ({min(values):.3g}–{max(values):.3g}) |")


if __name__ == "__main__":
    main()
