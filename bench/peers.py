"""bench/compare.py's other sides: APScheduler 3.11 two ways and the floor, in processes.

Run (compare.py starts it): python bench/peers.py threads|procs WORKLOAD N SECONDS → JSON

`threads`: a BackgroundScheduler running each job in its thread pool, in process (no
isolation). `procs`: the seeds' way of isolating a poller, an AsyncIOScheduler whose every
job is `asyncio.create_subprocess_exec` of `python bench/stamp.py` (printing the clock its
`main()` read at entry), read back from its stdout. Workloads: `one` (a cron every second
for SECONDS s), `burst` (N jobs of one cron due SECONDS s ahead; `procs` stops at CUT s
and counts the runs not done as that late), `rest` (N monthly crons added, then idle until
stdin closes). `floor()` runs bench/floor.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# s after the slot: the runs of a `procs` burst not done by then are killed, counted as cut
CUT = float(os.environ.get("BENCH_CUT", 40))
STAMP = HERE / "stamp.py"  # the program, as a script


def rest_expr(i: int) -> str:
    """Distinct monthly expressions in February (≈ 40k distinct among 100k): none due now."""
    return f"{i % 60} {(i // 60) % 24} {1 + (i // 1440) % 28} 2 *"


def next_slot(seconds: float) -> datetime:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).replace(microsecond=0)


def threads(workload: str, n: int, seconds: float) -> dict[str, Any]:
    """A BackgroundScheduler: each job a call in its thread pool."""
    from apscheduler.schedulers.background import BackgroundScheduler
    from apscheduler.triggers.cron import CronTrigger

    done: list[float] = []
    sched = BackgroundScheduler(timezone=UTC, job_defaults={"misfire_grace_time": 30})
    if workload == "rest":
        t0 = time.perf_counter()
        sched.start()
        for i in range(n):
            trigger = CronTrigger.from_crontab(rest_expr(i), timezone=UTC)
            sched.add_job(done.append, trigger, args=[0.0], id=f"j{i}")
        print(json.dumps({"ready": time.perf_counter() - t0}), flush=True)
        sys.stdin.read()
        return {}
    if workload == "one":
        sched.add_job(lambda: done.append(time.time() % 1.0), CronTrigger(second="*"))
        sched.start()
        time.sleep(seconds)
        return {"late": [d * 1e3 for d in done]}
    slot = next_slot(seconds)
    trig = CronTrigger(second=slot.second, minute=slot.minute, timezone=UTC)
    for _ in range(n):
        sched.add_job(lambda: done.append(time.time()), trig)
    sched.start()
    while len(done) < n and datetime.now(UTC) < slot + timedelta(seconds=60):
        time.sleep(0.05)
    late = [(d - slot.timestamp()) * 1e3 for d in done]
    return {"late": late, "last": max(late) / 1e3}


async def procs(workload: str, n: int, seconds: float) -> dict[str, Any]:
    """An AsyncIOScheduler: each job a fresh `python stamp.py`, its stdout read back."""
    from apscheduler.schedulers.asyncio import AsyncIOScheduler
    from apscheduler.triggers.cron import CronTrigger

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # a pipe or two per run
    done: list[tuple[float, float]] = []  # main() entered, run reaped

    async def run() -> None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(STAMP), stdout=asyncio.subprocess.PIPE
        )
        out, _ = await proc.communicate()
        done.append((json.loads(out)["t"], time.time()))
        if workload == "burst":  # as it comes: the parent may have to kill us (`procs_burst`)
            print(json.dumps(done[-1]), flush=True)

    # however late: every run of a burst runs (at 30 s of grace, a 1,000 burst here lost some)
    sched = AsyncIOScheduler(timezone=UTC, job_defaults={"misfire_grace_time": None})
    if workload == "one":
        sched.add_job(run, CronTrigger(second="*"))
        sched.start()
        await asyncio.sleep(seconds)
        sched.shutdown(wait=False)
        running = asyncio.all_tasks() - {asyncio.current_task()}
        if running:  # the last second's run, let end rather than cancelled
            await asyncio.wait(running, timeout=2)
        return {"late": [(t % 1.0) * 1e3 for t, _ in done]}
    slot = next_slot(seconds)
    print(json.dumps({"slot": slot.timestamp()}), flush=True)
    trig = CronTrigger(second=slot.second, minute=slot.minute, timezone=UTC)
    for _ in range(n):
        sched.add_job(run, trig)
    sched.start()
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    return {}


async def procs_burst(n: int, lead: float) -> dict[str, Any]:
    """`procs` with a burst of `n`: the runs read as they end; CUT s after the slot, the peer
    and every run still going killed (its event loop is busy starting processes then: only
    a signal stops it), the runs not done counted as CUT late. CPU from /proc (the peer's
    and its reaped runs') per run done."""
    from fire import cpu_with_children

    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, __file__, "procs", "burst", str(n), str(lead)),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        start_new_session=True,  # its runs in its process group
    )
    assert proc.stdout is not None and proc.stdin is not None
    slot = json.loads(await proc.stdout.readline())["slot"]
    await asyncio.sleep(max(0.0, slot - 0.5 - time.time()))
    cpu0, done = cpu_with_children(proc.pid), []
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, slot + CUT - time.time())):
            while len(done) < n:
                done.append(json.loads(await proc.stdout.readline()))
    spent, cut = cpu_with_children(proc.pid) - cpu0, n - len(done)
    os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()
    late = [(t - slot) * 1e3 for t, _ in done] + [CUT * 1e3] * cut
    last = CUT if cut else max(end for _, end in done) - slot
    found = {"late": late, "last": last, "cut": cut}
    return found | ({"cpu_ms": spent / len(done) * 1e3} if done else {})


async def peer(way: str, workload: str, n: int, seconds: float) -> dict[str, Any]:
    """One workload on one of the ways above, in a child process; its figures."""
    if (way, workload) == ("procs", "burst"):
        return await procs_burst(n, seconds)
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, __file__, way, workload, str(n), str(seconds)),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdin is not None
    found: dict[str, Any] = json.loads(await proc.stdout.readline())
    if workload == "rest":
        from fire import cpu_percent, rss_mb

        await asyncio.sleep(1.0)
        found["cpu"] = (await cpu_percent([proc.pid], seconds))[0]
        found["rss"] = rss_mb(proc.pid)
        proc.stdin.close()
    await proc.wait()
    return found


async def floor(workload: str, n: int, seconds: float, forkers: int = 2) -> dict[str, Any]:
    """bench/floor.py: `one` in one process, a burst of `n` split among `forkers`."""
    slot = next_slot(seconds).timestamp()
    count = [n] if workload == "one" else [n // forkers + (i < n % forkers) for i in range(forkers)]
    runs = [
        await asyncio.create_subprocess_exec(
            *(sys.executable, str(HERE / "floor.py"), workload, str(k), str(slot)),
            stdout=asyncio.subprocess.PIPE,
        )
        for k in count
    ]
    found = [json.loads((await proc.communicate())[0]) for proc in runs]
    late = [ms for f in found for ms in f["late"]]
    assert len(late) == n, f"floor: {len(late)} of {n} runs reached main()"
    cpu_ms = sum(f["cpu_ms"] * k for f, k in zip(found, count, strict=True)) / n
    return {"late": late, "last": max(f["last"] for f in found), "cpu_ms": cpu_ms}


if __name__ == "__main__":
    way, workload, n, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    if way == "threads":
        print(json.dumps(threads(workload, n, seconds)), flush=True)
    elif found := asyncio.run(procs(workload, n, seconds)):
        print(json.dumps(found), flush=True)
