"""baton side by side with APScheduler 3.11: the figures of the fire-path issue, in one run.

Run: .venv/bin/python bench/compare.py [--quick] [--rounds N] [--only rest|fires]
        [--count N] [--no-peer] [--idle S]   (needs the `bench` extra)

Every workload in real processes on 127.0.0.1 (the space, a device, APScheduler in a child
process), rounds alternating who goes first, each figure the median with its spread and its
ratio to the peer, the floor or the goal. The workloads and the options are in
docs/performance.md, "Benchmark notes".
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
from fire import (
    PEER,
    PROGRAM,
    SOURCE,
    SPACE,
    Api,
    armed,
    burst_fires,
    cpu_percent,
    event_fires,
    parse,
    pct,
    quiet,
    rss_mb,
    start_device,
    stop_device,
    subscribed,
    until,
)
from serving import ROOT, in_parallel, start_server, stop_server

Figures = dict[str, float]
REST, QUICK_REST = 100_000, 25_000  # cron triggers at rest (full run, `--quick`)
OPTIONS: dict[str, Any] = {"only": None, "count": None, "peer": True, "idle": None}


def rest_expr(i: int) -> str:
    """Distinct monthly expressions in February (≈ 40k distinct among 100k): none due now."""
    return f"{i % 60} {(i // 60) % 24} {1 + (i // 1440) % 28} 2 *"


# ---------------------------------------------------------------- the peer: APScheduler 3.11


def peer_main(workload: str, n: int, seconds: float) -> None:
    """Child: run one workload on APScheduler, print one JSON line of figures."""
    from apscheduler.schedulers.background import BackgroundScheduler
    from apscheduler.triggers.cron import CronTrigger

    done: list[float] = []
    sched = BackgroundScheduler(timezone=UTC, job_defaults={"misfire_grace_time": 30})
    if workload == "rest":
        t0 = time.perf_counter()
        sched.start()
        for i in range(n):
            sched.add_job(
                done.append,
                CronTrigger.from_crontab(rest_expr(i), timezone=UTC),
                args=[0.0],
                id=f"j{i}",
            )
        print(json.dumps({"ready": time.perf_counter() - t0}), flush=True)
        sys.stdin.read()
        return
    if workload == "one":
        sched.add_job(lambda: done.append(time.time() % 1.0), CronTrigger(second="*"))
        sched.start()
        time.sleep(seconds)
        print(json.dumps({"late": [d * 1e3 for d in done]}), flush=True)
        return
    slot = (datetime.now(UTC) + timedelta(seconds=seconds)).replace(microsecond=0)
    trig = CronTrigger(second=slot.second, minute=slot.minute, timezone=UTC)
    for _ in range(n):
        sched.add_job(lambda: done.append(time.time()), trig)
    sched.start()
    while len(done) < n and datetime.now(UTC) < slot + timedelta(seconds=60):
        time.sleep(0.05)
    late = [(d - slot.timestamp()) * 1e3 for d in done]
    print(json.dumps({"late": late, "last": max(late) / 1e3}), flush=True)


async def peer(workload: str, n: int, seconds: float) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--peer",
        workload,
        str(n),
        str(seconds),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdin is not None
    found = json.loads(await proc.stdout.readline())
    if workload == "rest":
        await asyncio.sleep(1.0)
        found["cpu"] = (await cpu_percent([proc.pid], seconds))[0]
        found["rss"] = rss_mb(proc.pid)
        proc.stdin.close()
    await proc.wait()
    return found


def rest_count(quick: bool) -> int:
    return OPTIONS["count"] or (QUICK_REST if quick else REST)


def idle_window(quick: bool) -> float:
    return OPTIONS["idle"] or (6 if quick else 30)


def wanted(half: str) -> bool:
    return OPTIONS["only"] in (None, half)


async def peer_round(quick: bool) -> Figures:
    found: Figures = {}
    if wanted("fires"):
        one = await peer("one", 1, 8 if quick else 30)
        burst = await peer("burst", 1000, 6)
        found |= {
            "one_p99": pct(one["late"], 99),
            "burst_p99": pct(burst["late"], 99),
            "burst_last": burst["last"],
        }
    if wanted("rest"):
        rest = await peer("rest", rest_count(quick), idle_window(quick))
        found |= {"rest_ready": rest["ready"], "rest_rss": rest["rss"], "rest_cpu": rest["cpu"]}
    return found


# ---------------------------------------------------------------- baton


async def sse_floor(api: Api, count: int, rate: float) -> list[float]:
    """A bare subscriber of a chat stream: POST → event parsed, ms."""
    chat = (await api.call("POST", f"/spaces/{SPACE}/chats", {"name": "floor"}, 201))["objectId"]
    sent: dict[str, float] = {}
    got: list[float] = []
    hello, all_in = asyncio.Event(), asyncio.Event()

    async def read() -> None:
        url = f"{api.base}/v1/spaces/{SPACE}/chats/{chat}/stream"
        timeout = aiohttp.ClientTimeout(total=None, sock_read=60)
        async with api.session.get(url, headers=api.h, timeout=timeout) as resp:
            event = ""
            async for raw in resp.content:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    event = line[7:]
                    hello.set() if event == "hello" else None
                elif line.startswith("data: ") and event == "message":
                    text = json.loads(line[6:])["text"]
                    got.append((time.perf_counter() - sent[text]) * 1e3)
                    if len(got) >= count:
                        all_in.set()

    reader = asyncio.create_task(read())
    await asyncio.wait_for(hello.wait(), 30)
    start = time.monotonic()
    for i in range(count):
        await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
        sent[f"f{i}"] = time.perf_counter()
        await api.post(chat, f"f{i}")
    await asyncio.wait_for(all_in.wait(), 60)
    reader.cancel()
    await asyncio.gather(reader, return_exceptions=True)
    return got


async def one_cron(api: Api, seconds: float) -> list[float]:
    """One cron trigger every second for `seconds`: `main()` entered − slot, ms."""
    body = {
        "name": "every second",
        "kind": "cron",
        "spec": {"expr": "* * * * * *"},
        "program": PROGRAM,
        "owner": PEER,
    }
    made = await api.call("POST", f"/spaces/{SPACE}/triggers", body, 201)
    since = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    await asyncio.sleep(seconds)
    await api.call("DELETE", f"/spaces/{SPACE}/triggers/{made['id']}")
    await asyncio.sleep(1.0)
    runs = await api.runs(trigger=made["id"], since=since)
    return [
        (r["result"]["t"] - parse(r["key"]).timestamp()) * 1e3 for r in runs if r["status"] == "ok"
    ]


async def fan_in(api: Api, device: int, count: int, settle: float) -> tuple[float, list[float]]:
    """RSS growth for `count` subscribed chats; then `count` triggers on one chat, one message."""
    await quiet(device, settle)
    before = rss_mb(device)

    async def chat_with_trigger(i: int, chat: str | None = None) -> str:
        if chat is None:
            path = f"/spaces/{SPACE}/chats"
            chat = (await api.call("POST", path, {"name": f"c{i}"}, 201))["objectId"]
        spec = {"dataset": "chat_messages", "objectId": chat}
        return await api.trigger(f"sub {i}", "event", spec)

    await in_parallel([lambda i=i: chat_with_trigger(i) for i in range(count)], 16)
    await armed(api, count, 60)
    await asyncio.sleep(2.0)
    await quiet(device, settle)
    grown = rss_mb(device) - before
    one = (await api.call("POST", f"/spaces/{SPACE}/chats", {"name": "fan"}, 201))["objectId"]
    made: list[str] = []

    async def on_one(i: int) -> None:
        made.append(await chat_with_trigger(i, one))

    await in_parallel([lambda i=i: on_one(i) for i in range(count)], 16)
    await armed(api, 2 * count, 60)
    await asyncio.sleep(3.0)  # the subscription of the one chat is already open
    t0 = time.time()
    mid = await api.post(one, "to all")
    since = datetime.fromtimestamp(t0 - 1, UTC).isoformat().replace("+00:00", "Z")
    runs: list[dict[str, Any]] = []

    async def all_ran() -> bool:
        nonlocal runs
        runs = [r for r in await api.runs(since=since) if r["key"] == mid]
        return len(runs) >= count

    await until(all_ran, 120, f"{count} fires of one message")
    return grown, [(r["result"]["t"] - t0) * 1e3 for r in runs if r["status"] == "ok"]


async def warm_fires(api: Api, messages: int) -> float:
    """Repeated fires of two warm triggers: fires per second, first post → last run done."""
    chat = (await api.call("POST", f"/spaces/{SPACE}/chats", {"name": "warm"}, 201))["objectId"]
    tids = []
    for i in range(2):
        body = {
            "name": f"warm {i}",
            "kind": "event",
            "program": PROGRAM,
            "owner": PEER,
            "spec": {"dataset": "chat_messages", "objectId": chat},
            "limits": {"maxQueue": messages},
        }
        tids.append((await api.call("POST", f"/spaces/{SPACE}/triggers", body, 201))["id"])
    for tid in tids:
        await subscribed(api, chat, tid)
    t0 = time.time()
    since = datetime.fromtimestamp(t0 - 1, UTC).isoformat().replace("+00:00", "Z")
    sent: set[str] = set()

    async def post(i: int) -> None:
        sent.add(await api.post(chat, f"w{i}"))

    await in_parallel([lambda i=i: post(i) for i in range(messages)], 4)
    runs: list[dict[str, Any]] = []

    async def all_ran() -> bool:
        nonlocal runs
        runs = [
            r for tid in tids for r in await api.runs(trigger=tid, since=since) if r["key"] in sent
        ]
        return len(runs) >= 2 * messages

    await until(all_ran, 120, f"{2 * messages} warm fires")
    last = max(parse(r["finishedAt"]).timestamp() for r in runs)
    return sum(r["status"] == "ok" for r in runs) / (last - t0)


async def with_device(tmp: Path, work: Callable[[Api, int], Awaitable[Figures]]) -> Figures:
    """A fresh space server and device in `tmp`; `work(api, device_pid)`."""
    server, base, h = await start_server(tmp, ok_runs_kept=5000)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=50))
    api = Api(session, base, h)
    try:
        await api.call("POST", "/spaces", {"id": SPACE}, 201)
        await api.call("PUT", f"/spaces/{SPACE}/programs/{PROGRAM}", {"source": SOURCE}, 201)
        body = {"peer": PEER, "space": SPACE}
        token = (await api.call("POST", "/tokens/device", body, 201))["token"]
        api.device_token = token  # type: ignore[attr-defined]
        return await work(api, 0)
    finally:
        await session.close()
        await stop_server(server)


async def baton_fires(quick: bool) -> Figures:
    with tempfile.TemporaryDirectory() as tmp:

        async def work(api: Api, _: int) -> Figures:
            device = await start_device(Path(tmp), api.base, api.device_token)  # type: ignore[attr-defined]
            try:
                settle = 4 if quick else 20
                await armed(api, 1, 30)
                await quiet(device.pid, settle)
                floor = await sse_floor(api, 100 if quick else 500, 100)
                ev = await event_fires(api, 100, 250 if quick else 1000, device.pid)
                one = await one_cron(api, 8 if quick else 30)
                warm = await warm_fires(api, 500)  # each trigger's runs fit one listing
                burst = await burst_fires(api, 1000, 8 if quick else 10, device.pid)
                grown, fan = await fan_in(api, device.pid, 1000, settle)
            finally:
                await stop_device(device)
            return {
                "floor_p50": pct(floor, 50),
                "event_p50": pct(ev.latencies, 50),
                "event_p99": pct(ev.latencies, 99),
                "one_p99": pct(one, 99),
                "burst_p99": pct(burst.main, 99),
                "burst_last": burst.last,
                "fires_s": 1000 / burst.last,
                "warm_s": warm,
                "chats_rss": grown,
                "fan_p50": pct(fan, 50),
                "fan_p99": pct(fan, 99),
            }

        return await with_device(Path(tmp), work)


def seed(db: Path, count: int) -> None:
    """`count` pinned cron records written straight into the space's file, one transaction."""
    from space import trigger_store

    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    conn = sqlite3.connect(db)
    with conn:
        for i in range(count):
            body = {
                "name": f"rest {i}",
                "kind": "cron",
                "program": PROGRAM,
                "owner": PEER,
                "spec": {"expr": rest_expr(i), "tz": "UTC"},
            }
            record = trigger_store._new(f"trg_rest{i:06d}", body, now)
            text = json.dumps(record, separators=(",", ":"))
            conn.execute("INSERT INTO trigger_ids VALUES (?, ?)", [SPACE, record["id"]])
            conn.execute("INSERT INTO triggers VALUES (?, ?, 1, ?)", [SPACE, record["id"], text])
            conn.execute(
                "INSERT INTO changes (space, trigger_id, op, rev, body, at) "
                "VALUES (?, ?, 'create', 1, ?, ?)",
                [SPACE, record["id"], text, now],
            )
    conn.close()


def ready_at(log: Path, count: int) -> float | None:
    """When the device's log says every entry was armed (wall seconds), else None."""
    for line in log.read_text(errors="replace").splitlines():
        _, sep, rest = line.partition("ticker: armed ")
        if sep and int(rest.split()[0]) >= count:
            return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return None


async def baton_rest(quick: bool) -> Figures:
    count = rest_count(quick)
    with tempfile.TemporaryDirectory() as tmp:

        async def work(api: Api, _: int) -> Figures:
            seed(Path(tmp) / "space.db", count)
            t0 = time.time()
            device = await start_device(Path(tmp), api.base, api.device_token)  # type: ignore[attr-defined]
            log = Path(tmp) / "device.log"
            try:
                await until(lambda: _true(ready_at(log, count)), 300, f"{count} armed")
                ready = (ready_at(log, count) or t0) - t0
                await quiet(device.pid, 10 if quick else 60)
                cpu = (await cpu_percent([device.pid], idle_window(quick)))[0]
                return {"rest_ready": ready, "rest_rss": rss_mb(device.pid), "rest_cpu": cpu}
            finally:
                await stop_device(device)
                if os.environ.get("BENCH_KEEP_LOG"):
                    Path(os.environ["BENCH_KEEP_LOG"]).write_bytes(log.read_bytes())

        return await with_device(Path(tmp), work)


async def _true(value: object) -> bool:
    return value is not None


# ---------------------------------------------------------------- the table


def median(rounds: list[Figures], key: str) -> tuple[float, float, float]:
    values = [r[key] for r in rounds if key in r] or [float("nan")]
    return statistics.median(values), min(values), max(values)


def cell(rounds: list[Figures], key: str, unit: str) -> str:
    mid, lo, hi = median(rounds, key)
    if mid != mid:  # not measured in this run (`--only`, `--no-peer`)
        return "—"
    spread = f" ({lo:.1f}–{hi:.1f})" if len(rounds) > 1 else ""
    return f"{mid:.1f} {unit}{spread}"


def table(ours: list[Figures], theirs: list[Figures], rest: int) -> list[str]:
    def r(a: str, b: list[Figures], k: str) -> str:
        return f"{median(ours, a)[0] / median(b, k)[0]:.2f}×"

    def g(a: str, goal: float) -> str:
        return f"{median(ours, a)[0] / goal:.2f}× goal"

    rows = [
        (
            "event fire, POST → main(), 100 msg/s, p50",
            cell(ours, "event_p50", "ms"),
            f"SSE floor {cell(ours, 'floor_p50', 'ms')}",
            f"{r('event_p50', ours, 'floor_p50')} floor; {g('event_p50', 3)} (≤ 3 ms)",
        ),
        ("event fire, p99", cell(ours, "event_p99", "ms"), "", f"{g('event_p99', 10)} (≤ 10 ms)"),
        (
            "one cron trigger, lateness of main() p99",
            cell(ours, "one_p99", "ms"),
            f"APScheduler {cell(theirs, 'one_p99', 'ms')}",
            f"{r('one_p99', theirs, 'one_p99')}",
        ),
        (
            "1,000 crons in one second, lateness p99",
            cell(ours, "burst_p99", "ms"),
            f"APScheduler {cell(theirs, 'burst_p99', 'ms')}",
            f"{r('burst_p99', theirs, 'burst_p99')}",
        ),
        (
            "1,000 crons, last done",
            cell(ours, "burst_last", "s"),
            f"APScheduler {cell(theirs, 'burst_last', 's')}",
            f"{r('burst_last', theirs, 'burst_last')}",
        ),
        (
            "end-to-end fires/s per device, distinct triggers",
            cell(ours, "fires_s", "/s"),
            "",
            f"{g('fires_s', 2000)} (≥ 2,000/s)",
        ),
        (
            "end-to-end fires/s per device, repeated fires of warm triggers",
            cell(ours, "warm_s", "/s"),
            "",
            f"{g('warm_s', 5000)} (≥ 5,000/s)",
        ),
        (
            f"{rest:,} crons at rest: time to ready",
            cell(ours, "rest_ready", "s"),
            f"APScheduler {cell(theirs, 'rest_ready', 's')}",
            f"{r('rest_ready', theirs, 'rest_ready')} (goal ≤ 0.2× and ≤ 3 s)",
        ),
        (
            f"{rest:,} crons at rest: device RSS",
            cell(ours, "rest_rss", "MB"),
            f"APScheduler {cell(theirs, 'rest_rss', 'MB')}",
            f"{r('rest_rss', theirs, 'rest_rss')} (goal ≤ 180 MB)",
        ),
        (
            f"{rest:,} crons at rest: idle CPU, % of a core",
            cell(ours, "rest_cpu", "%"),
            f"APScheduler {cell(theirs, 'rest_cpu', '%')}",
            "goal ≈ 0",
        ),
        (
            "1,000 chat subscriptions: RSS growth",
            cell(ours, "chats_rss", "MB"),
            "",
            f"{g('chats_rss', 21)} (hold 21 MiB)",
        ),
        ("one message → 1,000 triggers, p50", cell(ours, "fan_p50", "ms"), "", ""),
        (
            "one message → 1,000 triggers, p99",
            cell(ours, "fan_p99", "ms"),
            "",
            f"{g('fan_p99', 300)} (≤ 300 ms)",
        ),
    ]
    return [" | ".join(row) for row in rows if row[1] != "—"]  # `--only`: the rows measured


async def compare(quick: bool, rounds: int) -> None:
    ours: list[Figures] = []
    theirs: list[Figures] = []
    for n in range(rounds):
        order = [baton_round, peer_round] if n % 2 == 0 else [peer_round, baton_round]
        for side in (s for s in order if OPTIONS["peer"] or s is baton_round):
            figures = await side(quick)
            (ours if side is baton_round else theirs).append(figures)
            print(
                f"round {n + 1}: {side.__name__}: "
                + ", ".join(f"{k} {v:.1f}" for k, v in figures.items()),
                flush=True,
            )
    print("\nwhat | baton | peer / floor | ratio")
    print("\n".join(table(ours, theirs, rest_count(quick))))
    print(f"\nmedian of {rounds} round(s); load average {load_average()}")


async def baton_round(quick: bool) -> Figures:
    fires = await baton_fires(quick) if wanted("fires") else {}
    return {**fires, **(await baton_rest(quick) if wanted("rest") else {})}


def load_average() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())  # 1, 5 and 15 minutes


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--peer":
        peer_main(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
        return
    quick = "--quick" in sys.argv
    rounds = 1 if quick else 3
    if "--rounds" in sys.argv:
        rounds = int(sys.argv[sys.argv.index("--rounds") + 1])
    for flag, key, kind in (
        ("--only", "only", str),
        ("--count", "count", int),
        ("--idle", "idle", float),
    ):
        if flag in sys.argv:
            OPTIONS[key] = kind(sys.argv[sys.argv.index(flag) + 1])
    OPTIONS["peer"] = "--no-peer" not in sys.argv
    sys.path.insert(0, str(ROOT))
    start = time.perf_counter()
    print(f"load average at start {load_average()}")
    asyncio.run(compare(quick, rounds))
    print(f"total {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
