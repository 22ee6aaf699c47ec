"""baton beside APScheduler 3.11 two ways and the floor: issue 21's figures, in one run.

Run: .venv/bin/python bench/compare.py [--quick] [--rounds N] [--only SCENARIOS]
        [--sides baton,threads,procs,floor] [--reverse] [--seconds S] [--count N]
        [--no-peer] [--idle S]   (needs the `bench` extra)

Every workload in real processes on 127.0.0.1: the space and a device; APScheduler's
threads and APScheduler with a subprocess per run (bench/peers.py); a fresh confined
process per run (bench/floor.py). A column per side, rounds alternating the order (ABBA),
each figure the median with its spread and baton's and the floor's ratio to the goal.
Workloads and options: docs/performance.md, "Benchmark notes".
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
from datetime import UTC, datetime
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
from peers import CUT, floor, peer, rest_expr
from serving import ROOT, in_parallel, start_server, stop_server

Figures = dict[str, float]
REST, QUICK_REST = 100_000, 25_000  # cron triggers at rest (full run, `--quick`)
BURST = 1000  # crons due in one second; event triggers on one chat
SCENARIOS = ("event", "one", "warm", "burst", "fan", "rest")
SIDES = ("baton", "threads", "procs", "floor")
OPTIONS: dict[str, Any] = {
    **{"only": None, "count": None, "idle": None, "seconds": None},
    **{"sides": SIDES, "reverse": False},
}


# ---------------------------------------------------------------- the others (bench/peers.py)


def rest_count(quick: bool) -> int:
    return OPTIONS["count"] or (QUICK_REST if quick else REST)


def idle_window(quick: bool) -> float:
    return OPTIONS["idle"] or (6 if quick else 30)


def one_window(quick: bool) -> float:
    return OPTIONS["seconds"] or (8 if quick else 30)


def wanted(scenario: str) -> bool:
    return OPTIONS["only"] is None or scenario in OPTIONS["only"]


def bursts(found: dict[str, Any]) -> Figures:
    """A burst's figures as the table names them (`cpu_ms`: CPU per run, where measured)."""
    figures = {"burst_p99": pct(found["late"], 99), "burst_last": found["last"]}
    figures["fires_s"] = (BURST - found.get("cut", 0)) / found["last"]
    figures |= {"burst_cut": found["cut"]} if "cut" in found else {}
    return figures | ({"cpu_fire": found["cpu_ms"]} if "cpu_ms" in found else {})


async def threads_round(quick: bool) -> Figures:
    """APScheduler's BackgroundScheduler: each job a call in its thread pool."""
    found: Figures = {}
    if wanted("one"):
        found["one_p99"] = pct((await peer("threads", "one", 1, one_window(quick)))["late"], 99)
    if wanted("burst"):
        found |= bursts(await peer("threads", "burst", BURST, 3))
    if wanted("rest"):
        rest = await peer("threads", "rest", rest_count(quick), idle_window(quick))
        found |= {"rest_ready": rest["ready"], "rest_rss": rest["rss"], "rest_cpu": rest["cpu"]}
    return found


async def procs_round(quick: bool) -> Figures:
    """The seeds' way: APScheduler's AsyncIOScheduler, a `python stamp.py` subprocess per run."""
    found: Figures = {}
    if wanted("one"):
        found["one_p99"] = pct((await peer("procs", "one", 1, one_window(quick)))["late"], 99)
    if wanted("burst"):
        found |= bursts(await peer("procs", "burst", BURST, 3))
    return found


async def floor_round(quick: bool) -> Figures:
    """A fresh Landlock-confined process per run (bench/floor.py), main() timed at its entry."""
    found: Figures = {}
    if wanted("one"):
        found["one_p99"] = pct((await floor("one", round(one_window(quick)), 1.5))["late"], 99)
    if wanted("burst") or wanted("fan"):  # fan-out's floor: the same 1,000 runs at one instant
        burst = bursts(await floor("burst", BURST, 2))
        found |= burst if wanted("burst") else {}
        found |= {"fan_p99": burst["burst_p99"]} if wanted("fan") else {}
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
        fresh = chat is None  # trigger names are unique in a space
        if chat is None:
            path = f"/spaces/{SPACE}/chats"
            chat = (await api.call("POST", path, {"name": f"c{i}"}, 201))["objectId"]
        spec = {"dataset": "chat_messages", "objectId": chat}
        return await api.trigger(f"{'sub' if fresh else 'fan'} {i}", "event", spec)

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
        return await work(api, server.pid)
    finally:
        await session.close()
        await stop_server(server)


async def baton_fires(quick: bool) -> Figures:
    with tempfile.TemporaryDirectory() as tmp:

        async def work(api: Api, server: int) -> Figures:
            device = await start_device(Path(tmp), api.base, api.device_token)  # type: ignore[attr-defined]
            try:
                await armed(api, 1, 30)
                await quiet(device.pid, 4 if quick else 20)
                return await baton_scenarios(api, device.pid, server, quick)
            finally:
                await stop_device(device)

        return await with_device(Path(tmp), work)


async def baton_scenarios(api: Api, device: int, server: int, quick: bool) -> Figures:
    """The fire scenarios `--only` wants, in this order, on one device."""
    found: Figures = {}
    if wanted("event"):
        floor = await sse_floor(api, 100 if quick else 500, 100)
        ev = await event_fires(api, 100, 250 if quick else 1000, device)
        found |= {"floor_p50": pct(floor, 50), "event_p50": pct(ev.latencies, 50)}
        found["event_p99"] = pct(ev.latencies, 99)
    if wanted("one"):
        found["one_p99"] = pct(await one_cron(api, one_window(quick)), 99)
    if wanted("warm"):
        found["warm_s"] = await warm_fires(api, 500)  # each trigger's runs fit one listing
    if wanted("burst"):
        b = await burst_fires(api, BURST, 8 if quick else 10, device, server=server)
        found |= {"burst_p99": pct(b.main, 99), "burst_last": b.last, "fires_s": BURST / b.last}
        found["cpu_fire"] = b.server_ms + b.cpu_ms + b.workers_ms
        found |= {"cpu_space": b.server_ms, "cpu_device": b.cpu_ms, "cpu_workers": b.workers_ms}
        found |= {"late_p99": pct(b.late, 99), "error_p99": pct([abs(e) for e in b.error], 99)}
        found["late_gap"] = abs(found["late_p99"] - found["burst_p99"])
    if wanted("fan"):
        grown, fan = await fan_in(api, device, BURST, 4 if quick else 20)
        found |= {"chats_rss": grown, "fan_p50": pct(fan, 50), "fan_p99": pct(fan, 99)}
    return found


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
            record = trigger_store.new_record(f"trg_rest{i:06d}", body, now)
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
            return parse(line.split(" ", 1)[0]).timestamp()  # RFC 3339, UTC
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


def num(value: float) -> str:
    if value == int(value) and abs(value) < 100:
        return f"{value:.0f}"
    return (
        f"{value:,.0f}"
        if abs(value) >= 100
        else f"{value:.1f}"
        if abs(value) >= 10
        else f"{value:.2f}"
    )


# a figure one side measures for another: the SSE floor is read beside baton's event fires
ALIAS = {("floor", "event_p50"): ("baton", "floor_p50")}


def side_key(sides: dict[str, list[Figures]], side: str, key: str) -> tuple[list[Figures], str]:
    side, key = ALIAS.get((side, key), (side, key))
    return sides[side], key


def cell(rounds: list[Figures], key: str, unit: str) -> str:
    mid, lo, hi = median(rounds, key)
    if mid != mid:  # not measured in this run (`--only`, `--sides`)
        return "—"
    spread = f" ({num(lo)}–{num(hi)})" if sum(key in r for r in rounds) > 1 else ""
    return f"{num(mid)} {unit}{spread}"


# what, key, unit, goal: (≤ or ≥, a number or the side whose figure it is, as issue 21 says)
ROWS: list[tuple[str, str, str, tuple[str, float | str] | None]] = [
    ("event fire, POST → main(), 100 msg/s, p50 (floor: bare SSE)", "event_p50", "ms", ("≤", 3)),
    ("event fire, p99", "event_p99", "ms", ("≤", 10)),
    ("one cron every second, main() − slot p99", "one_p99", "ms", ("≤", "threads")),
    ("1,000 crons due in one second, main() − slot p99", "burst_p99", "ms", ("≤", 300)),
    ("1,000 crons, the last run done − slot", "burst_last", "s", None),
    (
        f"1,000 crons: runs not done {CUT:.0f} s after the slot (killed; counted that late)",
        "burst_cut",
        "runs",
        None,
    ),
    ("distinct-trigger fires/s (1,000 / last done)", "fires_s", "/s", ("≥", 1000)),
    ("repeated fires of warm triggers/s", "warm_s", "/s", ("≥", 5000)),
    ("one message → 1,000 event triggers, main() p50", "fan_p50", "ms", None),
    ("one message → 1,000 event triggers, main() p99", "fan_p99", "ms", ("≤", 600)),
    ("CPU per distinct fire (baton: space + device + workers + runs)", "cpu_fire", "ms", ("≤", 2)),
    ("  of which the space server", "cpu_space", "ms", None),
    ("  of which the device", "cpu_device", "ms", None),
    ("  of which the workers and their run processes", "cpu_workers", "ms", None),
    ("1,000-burst: run records' startedAt − dueAt (lateMs) p99", "late_p99", "ms", None),
    ("1,000-burst: lateMs p99 − main() − slot p99, |gap|", "late_gap", "ms", ("≤", 5)),
    ("1,000-burst: |startedAt − main()'s own clock| p99", "error_p99", "ms", ("≤", 5)),
    ("crons at rest: time to ready", "rest_ready", "s", ("≤", 3)),
    ("crons at rest: device RSS", "rest_rss", "MB", ("≤", 180)),
    ("crons at rest: idle CPU, % of a core", "rest_cpu", "%", None),
    ("1,000 chat subscriptions: RSS growth", "chats_rss", "MB", ("≤", 21)),
]
HEAD = ("baton", "APScheduler threads", "APScheduler + subprocess", "floor")


def verdict(sides: dict[str, list[Figures]], key: str, goal: tuple[str, float | str]) -> str:
    """baton's ratio to the goal, met or short; the floor's where it has the figure."""
    sense, target = goal
    bound = median(sides[target], key)[0] if isinstance(target, str) else target
    name = HEAD[SIDES.index(target)] if isinstance(target, str) else num(target)
    said = []
    for side in ("baton", "floor"):
        value = median(*side_key(sides, side, key))[0]
        if value == value and bound == bound and bound:
            ratio = value / bound
            ok = ratio <= 1 if sense == "≤" else ratio >= 1
            said.append(f"{side} {ratio:.2f}× ({'met' if ok else 'short'})")
    return f"goal {sense} {name}: " + "; ".join(said) if said else f"goal {sense} {name}"


def table(sides: dict[str, list[Figures]], rest: int) -> list[str]:
    lines = ["what | " + " | ".join(HEAD) + " | goal, ratio", "|".join(["---"] * 6)]
    for what, key, unit, goal in ROWS:
        cells = [cell(*side_key(sides, side, key), unit) for side in SIDES]
        if all(c == "—" for c in cells):
            continue  # not measured in this run
        what = what.replace("crons at rest", f"{rest:,} crons at rest")
        lines.append(" | ".join([what, *cells, verdict(sides, key, goal) if goal else ""]))
    return lines


async def compare(quick: bool, rounds: int) -> None:
    sides: dict[str, list[Figures]] = {side: [] for side in SIDES}
    runs = {"baton": baton_round, "threads": threads_round, "procs": procs_round}
    runs["floor"] = floor_round
    for n in range(rounds):
        order = [s for s in SIDES if s in OPTIONS["sides"]]
        if (n % 2 == 1) != OPTIONS["reverse"]:  # ABBA: every other round the other way round
            order.reverse()
        for side in order:
            figures = await runs[side](quick)
            sides[side].append(figures)
            said = ", ".join(f"{k} {num(v)}" for k, v in figures.items())
            print(f"round {n + 1}: {side}: {said}; load average {load_average()}", flush=True)
    print()
    print("\n".join(table(sides, rest_count(quick))))
    print(f"\nmedian of {rounds} round(s) (spread in parentheses); load average {load_average()}")


async def baton_round(quick: bool) -> Figures:
    fires = await baton_fires(quick) if any(map(wanted, SCENARIOS[:-1])) else {}
    return {**fires, **(await baton_rest(quick) if wanted("rest") else {})}


def load_average() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())  # 1, 5 and 15 minutes


def main() -> None:
    args = sys.argv[1:]
    quick = "--quick" in args
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 1 if quick else 3
    for flag, key, kind in (("--count", "count", int), ("--idle", "idle", float)):
        if flag in args:
            OPTIONS[key] = kind(args[args.index(flag) + 1])
    if "--seconds" in args:
        OPTIONS["seconds"] = float(args[args.index("--seconds") + 1])
    if "--only" in args:
        named = set(args[args.index("--only") + 1].split(","))
        if "fires" in named:
            named |= set(SCENARIOS[:-1])
        OPTIONS["only"] = named
    if "--sides" in args:
        OPTIONS["sides"] = tuple(args[args.index("--sides") + 1].split(","))
    if "--no-peer" in args:
        OPTIONS["sides"] = ("baton",)
    OPTIONS["reverse"] = "--reverse" in args
    bad = set(OPTIONS["sides"]) - set(SIDES) | (OPTIONS["only"] or set()) - {*SCENARIOS, "fires"}
    if bad:
        raise SystemExit(f"compare.py: unknown side or scenario {sorted(bad)}")
    sys.path.insert(0, str(ROOT))
    start = time.perf_counter()
    print(f"load average at start {load_average()}")
    asyncio.run(compare(quick, rounds))
    print(f"total {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
