"""Several space servers on PostgreSQL against one on SQLite, over HTTP, in one run.

Run: .venv/bin/python bench/servers.py [--quick] [--seconds S] [--in-flight N]
         [--messages M] [--poll-every P]        (default: about 55 s)

Each server is a child process (`create_app`, real aiohttp on 127.0.0.1); this process is
the device. Three configurations, each on a fresh database: SQLite 1 server, PostgreSQL 1
server, PostgreSQL 3 servers (requests round-robin). In each: claims (distinct keys of 4
floating triggers, the lease held by the device, each claim minting its run's token, N in
flight) for S seconds; then the runs of those very fires, in lists of 20 as the device's
recorder posts them, N/5 lists in flight. Then chat fan-out (bench/fanout.py). CPU per
claim and per run: the servers' processes, PostgreSQL's, this client's. Details in
docs/performance.md, "Several servers on PostgreSQL" and "Benchmark notes".
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[0:1] = [str(ROOT), str(ROOT / "tests"), str(BENCH)]  # `space` the package first

import aiohttp  # noqa: E402
from claim import TICK, cpu_seconds  # noqa: E402
from pgcluster import Cluster, binaries  # noqa: E402
from run_batch import run  # noqa: E402

SPACE = "bench"
PEER = "bench-dev"
TRIGGERS = 4
LIST = 20  # runs a list: 5 of each trigger
WARM_S = 0.5  # claims, then runs, this long first in each configuration (not counted)
GAP_S = 0.01  # chat: a pause of up to this before each message (the poller's period when polling)


@dataclass
class Servers:
    """`n` server processes on one database, an admin and a device token, the lease's term."""

    procs: list[asyncio.subprocess.Process]
    urls: list[str]
    admin: dict[str, str]
    session: aiohttp.ClientSession
    device: dict[str, str] = field(default_factory=dict)
    term: int = 0
    tids: list[str] = field(default_factory=list)
    chat: str = ""
    space: str = SPACE
    keys: itertools.count[int] = field(default_factory=itertools.count)
    since: datetime = datetime(2000, 1, 1, tzinfo=UTC)  # the latest trigger's activeSince

    def url(self, n: int, path: str) -> str:
        return f"{self.urls[n % len(self.urls)]}/v1{path}"

    async def post(self, n: int, path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
        async with self.session.post(self.url(n, path), json=body, headers=headers) as resp:
            return resp.status, await resp.json()

    async def setup(self) -> None:
        """The space, the device's token, 4 floating triggers, the lease held by the device."""

        async def admin(path: str, body: Any, ok: int = 201) -> Any:
            status, answer = await self.post(0, path, body, self.admin)
            assert status == ok, (path, status, answer)
            return answer

        space = await admin("/spaces", {"id": SPACE})
        self.chat = space["generalChat"]
        token = (await admin("/tokens/device", {"peer": PEER, "space": SPACE}))["token"]
        self.device = {"Authorization": f"Bearer {token}"}
        for i in range(TRIGGERS):
            record = {"name": f"b{i}", "kind": "cron", "spec": {"expr": "0 0 1 1 *"}}
            made = await admin(f"/spaces/{SPACE}/triggers", {**record, "program": "p@v1"})
            self.tids.append(made["id"])
            self.since = datetime.fromisoformat(made["activeSince"])
        claim = {"peer": PEER, "term": 0}
        status, lease = await self.post(0, f"/spaces/{SPACE}/election/claim", claim, self.device)
        assert status == 200, lease
        self.term = int(lease["term"])

    async def stop(self) -> None:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.close()
        await asyncio.gather(*(proc.wait() for proc in self.procs))


async def spawn(db: str, token_file: Path, poll_every: float | None) -> tuple[Any, str]:
    args = [db, str(token_file)] + ([str(poll_every)] if poll_every is not None else [])
    pipe = asyncio.subprocess.PIPE  # the child prints its port once it listens
    with (token_file.parent / "server.log").open("ab") as log:  # summed up at the end
        proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--serve", *args, stdin=pipe, stdout=pipe, stderr=log
        )
    assert proc.stdout is not None
    port = int((await proc.stdout.readline()).decode())
    return proc, f"http://127.0.0.1:{port}"


async def start(
    db: str, tmp: Path, n: int, session: aiohttp.ClientSession, poll_every: float | None = None
) -> Servers:
    """`n` servers on `db`: the first alone (it migrates and mints the admin token)."""
    token_file = tmp / "admin.token"
    first = [await spawn(db, token_file, poll_every)]
    rest = await asyncio.gather(*(spawn(db, token_file, poll_every) for _ in range(n - 1)))
    made = first + list(rest)
    admin = {"Authorization": f"Bearer {token_file.read_text().strip()}"}
    servers = Servers([p for p, _ in made], [u for _, u in made], admin, session)
    await servers.setup()
    return servers


def slot(since: datetime, n: int) -> str:
    """Fire n's key: a distinct slot instant after the triggers' `activeSince` (a cron key is
    one; one not starting with a digit would be an event's message id, which the metrics look
    up: one read more), n // 4 ms on, so never ahead of the space's clock (`ahead_of_clock`)."""
    at = since + timedelta(milliseconds=1 + n // TRIGGERS)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def run_of(tid: str, key: str, run_id: str, term: int, n: int, now: str) -> dict[str, Any]:
    """A run as the device's recorder posts it (bench/run_batch.py's body), for fire `key`."""
    return {**run(tid, n, now), "runId": run_id, "key": key, "term": term}


class Cpu:
    """CPU seconds of the servers' processes, PostgreSQL's (postmaster and its children:
    backends, walwriter, checkpointer…) and this process, between `start` and `per`; and
    how many of the machine's cores were busy meanwhile, whoever's (/proc/stat)."""

    def __init__(self, servers: Servers, postmaster: int | None) -> None:
        self.pids = [p.pid for p in servers.procs]
        self.postmaster = postmaster

    def pg(self) -> float:
        if self.postmaster is None:
            return 0.0
        total = 0.0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # gone meanwhile
            if int(fields[1]) == self.postmaster or int(entry.name) == self.postmaster:
                total += (int(fields[11]) + int(fields[12])) / TICK
        return total

    def now(self) -> tuple[float, float, float]:
        return sum(cpu_seconds(p) for p in self.pids), self.pg(), time.process_time()

    @staticmethod
    def machine() -> float:
        """CPU seconds all cores spent busy since boot (not idle, not waiting for I/O)."""
        ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        return (sum(ticks) - ticks[3] - ticks[4]) / TICK

    def start(self) -> None:
        self.began, self.wall = (*self.now(), self.machine()), time.perf_counter()

    def per(self, count: int) -> tuple[float, float, float, float]:
        """ms per unit of (servers, PostgreSQL, client) since `start`, and the machine's
        cores busy meanwhile."""
        (s0, p0, c0, m0), k = self.began, 1e3 / max(count, 1)
        (s1, p1, c1), m1 = self.now(), self.machine()
        machine = (m1 - m0) / (time.perf_counter() - self.wall)
        return (s1 - s0) * k, (p1 - p0) * k, (c1 - c0) * k, machine


@dataclass
class Figures:
    claims_s: float = 0.0
    claim_cpu: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    runs_s: float = 0.0
    run_cpu: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    claimed: int = 0
    posted: int = 0


async def claims(s: Servers, seconds: float, in_flight: int, cpu: Cpu) -> tuple[Figures, list]:
    """Claims for `seconds`, `in_flight` at once; the fires claimed, in claim order."""
    counter, done = s.keys, []
    path = f"/spaces/{SPACE}/fires"

    async def worker() -> None:
        while time.perf_counter() < deadline:
            n = next(counter)
            tid, key, run_id = s.tids[n % TRIGGERS], slot(s.since, n), f"run_{n}"
            fire = {"triggerId": tid, "key": key, "term": s.term, "peer": PEER}
            fire |= {"claimId": f"clm_{n}", "run": {"runId": run_id, "ttlSeconds": 600}}
            status, answer = await s.post(n, path, fire, s.device)
            assert status == 201 and answer["token"], (status, answer)
            done.append((n, tid, key, run_id))

    cpu.start()
    t0 = time.perf_counter()
    deadline = t0 + seconds
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    elapsed = time.perf_counter() - t0
    fig = Figures(claims_s=len(done) / elapsed, claim_cpu=cpu.per(len(done)), claimed=len(done))
    return fig, sorted(done)


async def runs(s: Servers, fires: list, seconds: float, lists: int, cpu: Cpu, fig: Figures) -> None:
    """The claimed fires' runs in lists of 20, `lists` at once, for `seconds` at most."""
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    batches = [
        [run_of(tid, key, rid, s.term, n, now) for n, tid, key, rid in fires[i : i + LIST]]
        for i in range(0, len(fires) - LIST + 1, LIST)
    ]
    queue, posted, sent = list(reversed(batches)), [0], itertools.count()
    path = f"/spaces/{SPACE}/runs"

    async def worker() -> None:
        while queue and time.perf_counter() < deadline:
            batch = queue.pop()
            status, answer = await s.post(next(sent), path, batch, s.device)
            assert status == 200, (status, answer)
            assert all(r["status"] == 201 and r["stamps"] == 200 for r in answer["runs"]), answer
            posted[0] += len(batch)

    cpu.start()
    t0 = time.perf_counter()
    deadline = t0 + seconds
    await asyncio.gather(*(worker() for _ in range(lists)))
    fig.runs_s = posted[0] / (time.perf_counter() - t0)
    fig.run_cpu, fig.posted = cpu.per(posted[0]), posted[0]


def postmaster_of(cluster: Cluster) -> int:
    return int((cluster.data / "postmaster.pid").read_text().split()[0])


async def throughput(s: Servers, args: argparse.Namespace, postmaster: int | None) -> Figures:
    cpu, lists = Cpu(s, postmaster), max(1, args.in_flight // 5)
    warm, fires = await claims(s, WARM_S, args.in_flight, cpu)  # pools filled, statements
    await runs(s, fires, WARM_S, lists, cpu, warm)  # prepared on every connection: not counted
    fig, fires = await claims(s, args.seconds, args.in_flight, cpu)
    await runs(s, fires, args.seconds, lists, cpu, fig)
    return fig


def show_throughput(rows: list[tuple[str, Figures]]) -> None:
    print(
        "| configuration | claims/s | CPU ms a claim: servers / PostgreSQL / client "
        "| cores busy: these / the machine | runs/s (lists of 20) "
        "| CPU ms a run: servers / PostgreSQL / client | cores busy | counted |"
    )
    print("|---|---:|---|---|---:|---|---|---|")
    for name, f in rows:
        c, r = f.claim_cpu, f.run_cpu
        print(
            f"| {name} | {f.claims_s:,.0f} | {c[0]:.2f} / {c[1]:.2f} / {c[2]:.2f} "
            f"| {sum(c[:3]) * f.claims_s / 1e3:.2f} / {c[3]:.2f} "
            f"| {f.runs_s:,.0f} | {r[0]:.3f} / {r[1]:.3f} / {r[2]:.3f} "
            f"| {sum(r[:3]) * f.runs_s / 1e3:.2f} / {r[3]:.2f} "
            f"| {f.claimed:,} claims, {f.posted:,} runs |"
        )


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def bench(args: argparse.Namespace) -> None:
    from fanout import fanout, show_fanout

    print(f"load average before: {load()}   (1, 5, 15 min; {os.cpu_count()} cores)")
    rows: list[tuple[str, Figures]] = []
    lat: list[tuple[str, Any]] = []
    bin_dir = binaries()
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=60)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            (tmp / "sqlite").mkdir()
            s = await start(str(tmp / "sqlite" / "space.db"), tmp / "sqlite", 1, session)
            rows.append(("SQLite, 1 server", await throughput(s, args, None)))
            lat.append(
                ("SQLite, 1 server (post and stream on it)", await fanout(s, 0, args, GAP_S))
            )
            await s.stop()
            if bin_dir is None:
                print("postgresql: not installed; its rows are missing")
            else:
                cluster = Cluster(bin_dir)
                cluster.start()
                try:
                    await pg_rows(cluster, tmp, session, args, rows, lat)
                finally:
                    cluster.stop()
        logged = [line for f in tmp.rglob("server.log") for line in f.read_text().splitlines()]
    show_throughput(rows)
    print()
    show_fanout(lat, args)
    print(f"the servers' stderr: {len(logged)} lines", end="")
    print("".join(f"\n  {n} × {line[:150]}" for line, n in Counter(logged).most_common(3)))
    print(f"load average after: {load()}")


async def pg_rows(
    cluster: Cluster, tmp: Path, session: aiohttp.ClientSession, args: Any, rows: list, lat: list
) -> None:
    from fanout import fanout

    postmaster = postmaster_of(cluster)
    for n, poll in ((1, None), (3, None), (3, args.poll_every)):
        name = cluster.next_name()
        cluster.create_database(name)
        where = tmp / name
        where.mkdir()
        s = await start(cluster.dsn(name), where, n, session, poll)
        if poll is None:
            label = f"PostgreSQL, {n} server{'s' if n > 1 else ''}"
            rows.append((label, await throughput(s, args, postmaster)))
        if n == 3:
            mode = "LISTEN/NOTIFY" if poll is None else f"poll only, every {poll:g} s"
            got = await fanout(s, 1, args, GAP_S if poll is None else poll)
            lat.append((f"PostgreSQL, 3 servers, {mode} (post on A, stream on B)", got))
        await s.stop()


async def serve(db: str, token_file: str, poll_every: float | None) -> None:
    """Child: one space server until stdin closes; prints its port first."""
    from aiohttp import web

    from space.app import create_app
    from space.opening import PgOptions, is_dsn

    pg = None
    if is_dsn(db):
        pg = PgOptions() if poll_every is None else PgOptions(listen=False, poll_every=poll_every)
    app = create_app(db, admin_token_file=token_file, pg=pg, lease_seconds=600)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(runner.addresses[0][1], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await runner.cleanup()


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        poll = float(sys.argv[4]) if len(sys.argv) > 4 else None
        asyncio.run(serve(sys.argv[2], sys.argv[3], poll))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1.5 s a phase, 100 messages")
    parser.add_argument("--seconds", type=float, help="claims, then runs, this long (3)")
    parser.add_argument("--in-flight", type=int, default=20, help="claims at once (20)")
    parser.add_argument("--messages", type=int, help="chat messages each way (200)")
    parser.add_argument("--poll-every", type=float, default=0.1, help="poll-only mode's (0.1)")
    args = parser.parse_args()
    args.seconds = args.seconds or (1.5 if args.quick else 3.0)
    args.messages = args.messages or (100 if args.quick else 200)
    began = time.perf_counter()
    asyncio.run(bench(args))
    print(f"total {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
