"""A real device firing: event latency, cron lateness, and the cost of 10,000 armed triggers.

Run: .venv/bin/python bench/fire.py [--quick] [--fires]   (BENCH_BURST=N: only a burst of N)

The space and the device (`python -m runtime.cli device`) in child processes; every fire runs
`stamp@v1`, which returns the instant its `main()` is entered. Scenarios: event N/s, a cron
burst, idle CPU and RSS with 10,000 armed triggers (`--fires`: the first two only;
`BENCH_PROFILE=DIR`: both processes under cProfile). Details in docs/performance.md,
"Benchmark notes".
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
from serving import in_parallel, python, start_server, stop_server

SPACE = "bench"
PEER = "bench-dev"
PROGRAM = "stamp@v1"
SOURCE = (
    "import time\n\n\ndef main(args):\n"
    "    t = time.time()\n"
    "    ev = args.get('event') or {}\n"
    "    return {'ok': True, 't': t, 'm': ev.get('messageId')}\n"
)
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


# ---------------------------------------------------------------- processes


async def start_device(tmp: Path, base: str, token: str) -> asyncio.subprocess.Process:
    (tmp / "device.token").touch(mode=0o600)  # a token file others may read is refused
    (tmp / "device.token").write_text(token + "\n")
    log = (tmp / "device.log").open("wb")
    root = str(Path(__file__).resolve().parent.parent)
    return await asyncio.create_subprocess_exec(
        *python("device", "-m", "runtime.cli", "device"),
        "--peer",
        PEER,
        "--url",
        base,
        "--token-file",
        str(tmp / "device.token"),
        "--space",
        SPACE,
        "--data",
        str(tmp),
        stdout=log,
        stderr=log,
        cwd=root,
    )


async def stop_device(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
    await proc.wait()


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` so far, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def cpu_with_children(pid: int) -> float:
    """utime + stime of `pid` and of the children it reaped (cutime + cstime), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / TICK


def kids(pid: int) -> list[int]:
    try:
        return [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def workers_cpu(device: int) -> float:
    """CPU seconds of the device's workers and of the run processes they reaped so far."""
    total = 0.0
    for worker in kids(device):
        with contextlib.suppress(OSError):
            total += cpu_with_children(worker)
    return total


def pss_mb(pid: int) -> tuple[float, float]:
    """RSS and PSS of `pid` in MB (smaps_rollup); zeros if it is gone."""
    found = {"Rss:": 0.0, "Pss:": 0.0}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            name, _, rest = line.partition(" ")
            if name in found:
                found[name] = int(rest.split()[0]) / 1024
    return found["Rss:"], found["Pss:"]


def workers_memory(device: int) -> str:
    """The device's workers and their run processes (spares, warm ones): count, RSS, PSS."""
    workers = kids(device)
    procs = workers + [k for w in workers for k in kids(w)]
    sizes = [pss_mb(p) for p in procs]
    rss, pss = sum(r for r, _ in sizes), sum(p for _, p in sizes)
    runs = len(procs) - len(workers)
    return f"{len(workers)} workers + {runs} run processes: RSS {rss:.1f}, PSS {pss:.1f} MB"


def rss_mb(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20


def children_rss_mb(pid: int) -> tuple[int, float]:
    kids = [
        k
        for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if Path(f"/proc/{k}").exists()
    ]
    return len(kids), sum(rss_mb(int(k)) for k in kids)


async def cpu_percent(pids: list[int], seconds: float) -> list[float]:
    before = [cpu_seconds(p) for p in pids]
    t0 = time.monotonic()
    await asyncio.sleep(seconds)
    elapsed = time.monotonic() - t0
    return [100 * (cpu_seconds(p) - b) / elapsed for p, b in zip(pids, before, strict=True)]


# ---------------------------------------------------------------- the API


class Api:
    """The few space calls the bench makes, on one session."""

    def __init__(self, session: aiohttp.ClientSession, base: str, headers: dict[str, str]):
        self.session, self.base, self.h = session, base, headers

    async def call(self, method: str, path: str, body: Any = None, ok: int = 200) -> Any:
        url = f"{self.base}/v1{path}"
        async with self.session.request(method, url, json=body, headers=self.h) as r:
            assert r.status == ok, f"{method} {path}: {r.status} {await r.text()}"
            return await r.json()

    async def trigger(self, name: str, kind: str, spec: dict[str, Any]) -> str:
        body = {"name": name, "kind": kind, "spec": spec, "program": PROGRAM, "owner": PEER}
        return (await self.call("POST", f"/spaces/{SPACE}/triggers", body, 201))["id"]

    async def runs(self, **query: str) -> list[dict[str, Any]]:
        q = "&".join(f"{k}={v}" for k, v in query.items())
        return (await self.call("GET", f"/spaces/{SPACE}/runs?{q}&limit=1000"))["runs"]

    async def post(self, chat: str, text: str) -> str:
        path = f"/spaces/{SPACE}/chats/{chat}/messages"
        return (await self.call("POST", path, {"text": text}, 201))["messageId"]

    async def report(self) -> dict[str, Any]:
        devices = (await self.call("GET", f"/spaces/{SPACE}/devices"))["devices"]
        return next((d.get("status") or {} for d in devices if d["peer"] == PEER), {})


async def until(check: Callable[[], Awaitable[bool]], seconds: float, what: str) -> None:
    try:
        async with asyncio.timeout(seconds):
            while not await check():
                await asyncio.sleep(0.25)
    except TimeoutError:
        raise SystemExit(f"bench: {what} did not happen within {seconds:.0f} s") from None


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# ---------------------------------------------------------------- scenarios


class EventFires(NamedTuple):
    latencies: list[float]  # ms, POST -> main() entered, ok runs
    statuses: dict[str, int]
    cpu_ms: float  # device CPU per fire
    posting: float  # seconds the posting took


async def event_fires(
    api: Api, rate: float, count: int, device: int, chat: str | None = None
) -> EventFires:
    """`count` messages at `rate`/s on a fresh chat with one event trigger."""
    if chat is None:
        made = await api.call("POST", f"/spaces/{SPACE}/chats", {"name": f"r{rate}"}, 201)
        chat = made["objectId"]
    tid = await api.trigger(
        f"event {rate}/s", "event", {"dataset": "chat_messages", "objectId": chat}
    )
    await subscribed(api, chat, tid)
    sent: dict[str, float] = {}

    async def send(i: int) -> None:
        t0 = time.time()
        sent[await api.post(chat, f"m{i}")] = t0

    start, cpu = time.monotonic(), cpu_seconds(device)
    tasks = []
    for i in range(count):
        await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
        tasks.append(asyncio.create_task(send(i)))
    await asyncio.gather(*tasks)
    posting = time.monotonic() - start
    runs = await settled_runs(api, tid, set(sent))
    per_fire = (cpu_seconds(device) - cpu) / count * 1e3
    lat = [(r["result"]["t"] - sent[r["result"]["m"]]) * 1e3 for r in runs if r["status"] == "ok"]
    statuses = {s: sum(r["status"] == s for r in runs) for s in {r["status"] for r in runs}}
    return EventFires(lat or [float("nan")], statuses, per_fire, posting)


async def event_rate(api: Api, rate: float, count: int, device: int) -> list[str]:
    """`count` messages at `rate`/s on a fresh chat with one event trigger; rows to print."""
    lat, statuses, per_fire, posting = await event_fires(api, rate, count, device)
    return [
        f"event fire, {rate:g} msg/s (posted in {posting:.1f} s; device CPU "
        f"{per_fire:.1f} ms per fire)",
        f"{count}",
        f"{statuses}",
        f"{min(lat):.1f}",
        f"{pct(lat, 50):.1f}",
        f"{pct(lat, 99):.1f}",
        f"{max(lat):.1f}",
    ]


async def subscribed(api: Api, chat: str, tid: str) -> None:
    """Post warm-up messages until one fires: the device has armed and subscribed."""

    async def fired() -> bool:
        await api.post(chat, "warm-up")
        await asyncio.sleep(0.5)
        return bool(await api.runs(trigger=tid))

    await until(fired, 60, f"the first fire of {tid}")


async def settled_runs(api: Api, tid: str, messages: set[str]) -> list[dict[str, Any]]:
    """The runs of `tid` for `messages`, once there is one per message (or 60 s passed)."""
    found: list[dict[str, Any]] = []

    async def done() -> bool:
        nonlocal found
        runs = await api.runs(trigger=tid)
        found = [r for r in runs if (r.get("result") or {}).get("m") in messages]
        found += [r for r in runs if r["status"] != "ok"]
        return len(found) >= len(messages)

    await until(done, 120, f"{len(messages)} runs of {tid}")
    return found


async def create_many(api: Api, count: int, spec: Callable[[int], dict[str, Any]]) -> float:
    """Create `count` cron triggers, 16 requests in flight; seconds taken."""

    def job(i: int) -> Callable[[], Awaitable[str]]:
        return lambda: api.trigger(f"cron {i}", "cron", spec(i))

    t0 = time.perf_counter()
    await in_parallel([job(i) for i in range(count)], concurrency=16)
    return time.perf_counter() - t0


async def armed(api: Api, count: int, seconds: float) -> None:
    async def check() -> bool:
        return int((await api.report()).get("armed", 0)) >= count

    await until(check, seconds, f"{count} armed triggers")


class Burst(NamedTuple):
    late: list[float]  # ms, the run records' lateMs
    main: list[float]  # ms, main() entered - slot
    error: list[float]  # ms, the run records' startedAt - main()'s own reading of the clock
    last: float  # seconds from the slot to the last run's finish
    statuses: dict[str, int]
    cpu_ms: float
    took: float  # seconds the creation took
    workers_ms: float  # CPU of the workers and their run processes per fire
    memory: str  # the workers' memory just before the slot
    server_ms: float = 0.0  # CPU of the space server per fire (when its pid is given)


async def burst_fires(
    api: Api, count: int, lead: float, device: int, expr: str = "", server: int = 0
) -> Burst:
    """`count` cron triggers due at one second `lead` s ahead (or all of `expr`'s next slot);
    the space server's CPU too when `server` is its pid."""
    slot = (datetime.now(UTC) + timedelta(seconds=lead)).replace(microsecond=0)
    expr = expr or f"{slot.second} {slot.minute} * * * *"  # hourly: due once during the bench
    took = await create_many(api, count, lambda i: {"expr": expr, "tz": "UTC"})
    assert datetime.now(UTC) < slot - timedelta(seconds=2), "creation ran into the slot"
    since = (slot - timedelta(seconds=1)).isoformat().replace("+00:00", "Z")
    runs: list[dict[str, Any]] = []
    await asyncio.sleep(max(0.0, (slot - datetime.now(UTC)).total_seconds() - 3))
    cpu, workers = cpu_seconds(device), workers_cpu(device)  # spares prepared ahead included
    served = cpu_seconds(server) if server else 0.0
    await asyncio.sleep(max(0.0, (slot - datetime.now(UTC)).total_seconds() - 0.3))
    memory = workers_memory(device)
    key = slot.strftime("%Y-%m-%dT%H:%M:%S")

    async def done() -> bool:
        nonlocal runs
        runs = [r for r in await api.runs(since=since) if r["key"].startswith(key)]
        return len(runs) >= count

    await until(done, lead + 120, f"{count} cron runs")
    per_fire = (cpu_seconds(device) - cpu) / count * 1e3
    workers_ms = (workers_cpu(device) - workers) / count * 1e3
    server_ms = (cpu_seconds(server) - served) / count * 1e3 if server else 0.0
    late = [r["lateMs"] for r in runs if r["lateMs"] is not None]
    ok = [r for r in runs if r["status"] == "ok"]
    main = [(r["result"]["t"] - slot.timestamp()) * 1e3 for r in ok]
    error = [(parse(r["startedAt"]).timestamp() - r["result"]["t"]) * 1e3 for r in ok]
    last = (max(parse(r["finishedAt"]) for r in runs) - slot).total_seconds()
    statuses = {s: sum(r["status"] == s for r in runs) for s in {r["status"] for r in runs}}
    return Burst(late, main, error, last, statuses, per_fire, took, workers_ms, memory, server_ms)


async def feed_seq(api: Api) -> int:
    """The change feed's last `seq` (a listing page answers it)."""
    return int((await api.call("GET", f"/spaces/{SPACE}/triggers?limit=1"))["seq"])


async def feed_ops(api: Api, since: int) -> dict[str, int]:
    """The changes on the feed after `since`, counted by op."""
    ops: dict[str, int] = {}
    while True:
        page = await api.call("GET", f"/spaces/{SPACE}/changes?since={since}&limit=5000")
        for change in page["changes"]:
            ops[change["op"]] = ops.get(change["op"], 0) + 1
        if not page["more"]:
            return ops
        since = page["next"]


async def received(api: Api, after: datetime) -> int | None:
    """The changes the device's feed brought, from its first heartbeat after `after`
    (None: a build that does not say)."""
    report: dict[str, Any] = {}

    async def beat() -> bool:
        nonlocal report
        devices = (await api.call("GET", f"/spaces/{SPACE}/devices"))["devices"]
        mine = next(d for d in devices if d["peer"] == PEER)
        report = mine.get("status") or {}
        return parse(mine["lastSeen"]) > after

    await until(beat, 20, "a heartbeat")
    got = report.get("changesReceived")
    return got if isinstance(got, int) else None


async def cron_burst(
    api: Api, count: int, lead: float, device: int, server: int
) -> tuple[list[str], float]:
    """`count` cron triggers due at one second `lead` s ahead; rows and the creation time."""
    before = await received(api, datetime.now(UTC))
    seq, cpu = await feed_seq(api), cpu_seconds(server)
    late, main, error, last, statuses, per_fire, took, workers_ms, memory, _ = await burst_fires(
        api, count, lead, device
    )
    server_ms = (cpu_seconds(server) - cpu) / count * 1e3  # the creation's included
    ops = await feed_ops(api, seq)
    after = await received(api, datetime.now(UTC))
    creates = ops.get("create", 0)  # the feed brings the records' creation too
    got = "n/a" if before is None or after is None else f"{(after - before - creates) / count:.2f}"
    changes = sum(ops.values()) - creates
    rows = [
        [
            f"cron, same: feed changes per fire {changes / count:.2f} (besides the creates: "
            f"{ops}); brought to the device per fire {got}; server CPU {server_ms:.1f} ms per "
            "fire (creation included)",
            f"{count}",
            "",
            "",
            "",
            "",
            "",
        ],
        [
            f"cron, {count} due in one second: lateMs (device CPU {per_fire:.1f} ms per fire)",
            f"{count}",
            f"{statuses}",
            f"{min(late):.0f}",
            f"{pct(late, 50):.0f}",
            f"{pct(late, 99):.0f}",
            f"{max(late):.0f}",
        ],
        [
            f"cron, same: main() entered - slot (last run done {last:.1f} s: {count / last:.0f}"
            f" fires/s; workers + run processes CPU {workers_ms:.2f} ms per fire; at the slot "
            f"{memory})",
            f"{len(main)}",
            "",
            f"{min(main):.0f}",
            f"{pct(main, 50):.0f}",
            f"{pct(main, 99):.0f}",
            f"{max(main):.0f}",
        ],
        [
            "cron, same: the run's startedAt - main()'s own clock (|error|)",
            f"{len(error)}",
            "",
            *(f"{v:.1f}" for v in spread([abs(e) for e in error])),
        ],
    ]
    return [" | ".join(r) for r in rows], took


def spread(values: list[float]) -> tuple[float, float, float, float]:
    """min, p50, p99, max."""
    return min(values), pct(values, 50), pct(values, 99), max(values)


async def idle(device: int, server: int, seconds: float) -> str:
    dev, srv = await cpu_percent([device, server], seconds)
    workers, workers_mb = children_rss_mb(device)
    return (
        f"device CPU {dev:.2f} % of a core, RSS {rss_mb(device):.1f} MB "
        f"({workers} workers: {workers_mb:.1f} MB); server CPU {srv:.2f} % "
        f"[{seconds:.0f} s window]"
    )


async def quiet(pid: int, limit: float) -> float:
    """Wait until `pid` uses under 5 % of a core over 2 s (at most `limit` s); seconds waited."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if (await cpu_percent([pid], 2.0))[0] < 5.0:
            break
    return time.monotonic() - t0


# ---------------------------------------------------------------- main


async def bench(quick: bool, fires_only: bool) -> None:
    window = 10.0 if quick else 25.0
    with tempfile.TemporaryDirectory() as tmp:
        server, base, h = await start_server(Path(tmp), ok_runs_kept=5000)
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=50))
        api = Api(session, base, h)
        device = None
        try:
            await api.call("POST", "/spaces", {"id": SPACE}, 201)
            await api.call("PUT", f"/spaces/{SPACE}/programs/{PROGRAM}", {"source": SOURCE}, 201)
            body = {"peer": PEER, "space": SPACE}
            token = (await api.call("POST", "/tokens/device", body, 201))["token"]
            device = await start_device(Path(tmp), base, token)
            await armed(api, 1, 30)
            await quiet(device.pid, 20)
            print("idle, 1 trigger (chat-watch):", await idle(device.pid, server.pid, window / 2))
            rates = (
                ()
                if os.environ.get("BENCH_BURST")
                else ((10, 50 if quick else 200), (100, 250 if quick else 1000))
            )
            for rate, count in rates:
                print(" | ".join(await event_rate(api, rate, count, device.pid)), flush=True)
            burst = int(os.environ.get("BENCH_BURST") or (200 if quick else 1000))
            rows, took = await cron_burst(
                api, burst, lead=8 + burst / 250, device=device.pid, server=server.pid
            )
            print(f"created {burst} cron triggers in {took:.1f} s ({burst / took:.0f}/s)")
            print("\n".join(rows), flush=True)
            if fires_only:
                return
            more = 10_000 - burst
            cpu = cpu_seconds(device.pid), cpu_seconds(server.pid)
            took = await create_many(api, more, lambda i: {"expr": "0 0 1 1 *", "tz": "UTC"})
            print(f"created {more} more cron triggers in {took:.1f} s ({more / took:.0f}/s)")
            t0 = time.monotonic()
            await armed(api, 10_000, 120)
            settle = await quiet(device.pid, 90) + time.monotonic() - t0
            dev, srv = cpu_seconds(device.pid) - cpu[0], cpu_seconds(server.pid) - cpu[1]
            listing = (await api.call("GET", f"/spaces/{SPACE}/triggers"))["triggers"]
            stamped = sum(bool(t.get("nextFireAt")) for t in listing)
            print(
                f"device armed 10,000 and went quiet {settle:.0f} s after the last create; "
                f"CPU from the first create to quiet: device {dev:.1f} s, server {srv:.1f} s; "
                f"records with nextFireAt: {stamped}"
            )
            print(
                f"idle, {(await api.report()).get('armed')} armed:",
                await idle(device.pid, server.pid, window),
            )
        finally:
            if device is not None:
                await stop_device(device)
            await session.close()
            await stop_server(server)
            if device is not None and device.returncode not in (0, -15):
                print((Path(tmp) / "device.log").read_text()[-3000:])
            if os.environ.get("BENCH_KEEP_LOG"):
                Path(os.environ["BENCH_KEEP_LOG"]).write_bytes(
                    (Path(tmp) / "device.log").read_bytes()
                )


def main() -> None:
    start = time.perf_counter()
    print("scenario | n | statuses | min ms | p50 ms | p99 ms | max ms")
    asyncio.run(bench(quick="--quick" in sys.argv, fires_only="--fires" in sys.argv))
    print(f"total {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
