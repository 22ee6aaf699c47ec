"""`why` over a year of a minutely trigger's history: how long an answer takes.

Run: .venv/bin/python bench/why.py [--quick]

One space server (`create_app`, a fresh SQLite file, `history_days=400`) in this process,
its clock a year after the trigger was created. The history is written straight into the
file as the space itself would have written it: a claim with its run outcome for every
minute of the year (525,600; `--quick`: 30 days), a device window and a lease term per
day (each day one hour down: a gap), the device's applied position per day, a refused
claim per hour, the last 200 run records. Then `GET …/why?at=` for random instants of the
year, one at a time over HTTP on 127.0.0.1, and `?since=` ranges of 100 slots.

Printed: the rows written, the file's size and bytes per claim row, then p50/p95/p99/max
of each kind of answer, and how many of each reason came back.
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from space.app import create_app, default_admin_token_file

SPACE, PEER = "bench", "box"
START = datetime(2025, 12, 1, tzinfo=UTC)
MINUTE, DAY = 60.0, 86400.0
ASKED = 2000
RANGES = 200


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def key(t: float) -> str:
    """A fire key as the space stores it (canonical: milliseconds, `core.vocab.key_instant`)."""
    return iso(t)


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def fill(db: Path, tid: str, days: int) -> dict[str, int]:
    """A year (or `days`) of one minutely trigger's history, as the space writes it."""
    t0, conn, rows = START.timestamp(), sqlite3.connect(db), Counter[str]()
    with conn:
        for day in range(days):
            base = t0 + day * DAY
            down = base + 23 * 3600  # 23:00–24:00 every day: nobody up
            conn.execute(
                "INSERT INTO history_windows VALUES (?, ?, ?, ?, 0, NULL, ?)",
                [SPACE, PEER, base, down, day + 2],
            )
            conn.execute(
                "INSERT INTO history_terms VALUES (?, ?, ?, ?, ?, 'expired')",
                [SPACE, day + 1, PEER, base, down + 15],
            )
            conn.execute(
                "INSERT INTO history_applied VALUES (?, ?, ?, ?)", [SPACE, PEER, base, day + 2]
            )
            conn.execute(  # its clock's offset, noted at the window's first heartbeat
                "INSERT INTO history_offsets VALUES (?, ?, ?, ?)", [SPACE, PEER, base, -40.0]
            )
            claims = [
                (
                    SPACE,
                    tid,
                    key(s),
                    day + 1,
                    PEER,
                    iso(s - 0.05),
                    "",
                    f"r{int(s)}",
                    "ok",
                    "",
                    s + 0.01,
                    10.0,
                )
                for s in (base + m * MINUTE for m in range(23 * 60))
            ]
            conn.executemany(
                "INSERT INTO fires VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", claims
            )
            refused = [
                (
                    SPACE,
                    tid,
                    key(base + h * 3600 + 30),
                    base + h * 3600 + 30,
                    "laptop",
                    day,
                    "stale_term",
                    "old term",
                )
                for h in range(23)
            ]
            conn.executemany(
                "INSERT INTO history_refusals VALUES (?, ?, ?, ?, ?, ?, ?, ?)", refused
            )
            rows.update(windows=1, terms=1, applied=1, offsets=1, fires=len(claims))
            rows.update(refusals=len(refused))
        last = t0 + (days - 1) * DAY
        for m in range(200):
            s = last + m * MINUTE
            body = {
                "runId": f"r{int(s)}",
                "triggerId": tid,
                "peer": PEER,
                "key": key(s),
                "status": "ok",
                "lateMs": 10.0,
            }
            conn.execute(
                "INSERT INTO runs (space, run_id, trigger_id, status, started_at, failure, body) "
                "VALUES (?, ?, ?, 'ok', ?, 0, ?)",
                [SPACE, body["runId"], tid, s + 0.01, json.dumps(body)],
            )
        rows["runs"] = 200
    conn.close()
    return dict(rows)


def quantiles(ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=100)
    return f"p50 {q[49]:.2f} ms, p95 {q[94]:.2f} ms, p99 {q[98]:.2f} ms, max {max(ms):.2f} ms"


async def ask(session: aiohttp.ClientSession, url: str, head: dict[str, str]) -> tuple[float, Any]:
    began = time.perf_counter()
    async with session.get(url, headers=head) as resp:
        got = await resp.json()
        assert resp.status == 200, got
    return (time.perf_counter() - began) * 1000, got


async def main(quick: bool) -> None:
    days = 30 if quick else 365
    tmp = Path(tempfile.mkdtemp(prefix="bench-why-"))
    clock = Clock(START)
    app = create_app(tmp / "space.db", clock=clock, history_days=400, prune_every_seconds=0)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    head = {
        "Authorization": f"Bearer {default_admin_token_file(tmp / 'space.db').read_text().strip()}"
    }
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{base}/spaces", json={"id": SPACE}, headers=head) as resp:
            assert resp.status == 201
        body = {
            "name": "minutely",
            "kind": "cron",
            "spec": {"expr": "* * * * *"},
            "program": "p@v1",
            "owner": PEER,
        }
        async with session.post(f"{base}/spaces/{SPACE}/triggers", json=body, headers=head) as resp:
            tid = (await resp.json())["id"]
        began = time.perf_counter()
        rows = fill(tmp / "space.db", tid, days)
        size = (tmp / "space.db").stat().st_size + (tmp / "space.db-wal").stat().st_size
        print(f"history of {days} days written in {time.perf_counter() - began:.1f} s: {rows}")
        print(
            f"file {size / 1e6:.1f} MB, {size / rows['fires']:.0f} bytes per claim row (all tables)"
        )
        clock.now = START + timedelta(days=days)
        rng = random.Random(7)
        span = days * DAY
        where = f"{base}/spaces/{SPACE}/triggers/{tid}/why"
        for _ in range(50):  # warm up
            await ask(session, f"{where}?at={iso(START.timestamp() + rng.random() * span)}", head)
        latencies, reasons = [], Counter[str]()
        for _ in range(ASKED):
            at = START.timestamp() + rng.randrange(int(span // MINUTE)) * MINUTE  # a slot
            ms, got = await ask(session, f"{where}?at={iso(at)}", head)
            latencies.append(ms)
            reasons[got["reason"]] += 1
        print(f"why?at=      {ASKED} answers: {quantiles(latencies)}")
        print(f"  reasons: {dict(reasons)}")
        ranged = []
        for _ in range(RANGES):
            lo = START.timestamp() + rng.random() * (span - 2 * 3600)
            ms, got = await ask(
                session, f"{where}?since={iso(lo)}&until={iso(lo + 99 * MINUTE)}", head
            )
            assert len(got["answers"]) in (99, 100), len(got["answers"])
            ranged.append(ms)
        print(f"why?since=   {RANGES} ranges of 100 slots: {quantiles(ranged)}")
    await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main("--quick" in sys.argv))
