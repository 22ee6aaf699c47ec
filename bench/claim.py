"""The space's side of a fire: its claim (with the run's token) and the run record that ends it.

Run: .venv/bin/python bench/claim.py [--quick]

The space in a child process, this process the device firing distinct keys of one pinned
trigger, both ways in turn each round (`claim` alone, `fire`: the claim then the run with
its stamps), one at a time and 20 in flight; prints the medians and each round's figures.
Details in docs/performance.md, "Benchmark notes".
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from serving import in_parallel, start_server, stop_server

SPACE = "bench"
PEER = "bench-dev"
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Device:
    """Claims fires of one trigger as the device would, one way or the other."""

    def __init__(self, session: aiohttp.ClientSession, base: str, token: str, tid: str) -> None:
        self.session, self.base, self.tid = session, f"{base}/v1/spaces/{SPACE}", tid
        self.h = {"Authorization": f"Bearer {token}"}
        self.n = 0

    async def post(self, path: str, body: Any, ok: int = 201) -> Any:
        async with self.session.post(self.base + path, json=body, headers=self.h) as resp:
            assert resp.status == ok, (resp.status, await resp.text())
            return await resp.json()

    async def fire(self, way: str) -> None:
        """One fire's claim (with its token), and for `fire` its run record and stamps."""
        self.n += 1
        key, run_id = f"k{self.n}-{way}", f"run_{way}{self.n}"
        claim = {
            "triggerId": self.tid,
            "key": key,
            "term": 0,
            "peer": PEER,
            "claimId": f"clm_{self.n}{way}",
            "run": {"runId": run_id, "ttlSeconds": 90},
        }
        answer = await self.post("/fires", claim)
        assert answer["token"]
        if way == "claim":
            return
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        stamps = {
            "lastStatus": "ok",
            "lastStatusDetail": "",
            "lastRunAt": now,
            "rollup": {"runs": self.n, "ok": self.n},
        }
        run = {
            "runId": run_id,
            "triggerId": self.tid,
            "program": "p@v1",
            "peer": PEER,
            "term": 0,
            "key": key,
            "startedAt": now,
            "finishedAt": now,
            "durationMs": 1.0,
            "status": "ok",
            "result": {"ok": True},
            "lateMs": 0.5,
            "stamps": stamps,
        }
        written = await self.post("/runs", [run], ok=200)
        assert written["runs"][0]["status"] == 201 and written["runs"][0]["stamps"] == 200


async def sequential(device: Device, way: str, count: int) -> list[float]:
    took = []
    for _ in range(count):
        t0 = time.perf_counter()
        await device.fire(way)
        took.append((time.perf_counter() - t0) * 1e3)
    return took


async def concurrent(device: Device, way: str, count: int, server: int) -> tuple[float, float]:
    """fires/s and server CPU ms per fire, 20 fires in flight."""

    def job() -> Callable[[], Awaitable[None]]:
        async def one() -> None:
            await device.fire(way)

        return one

    cpu, t0 = cpu_seconds(server), time.perf_counter()
    await in_parallel([job() for _ in range(count)], concurrency=20)
    elapsed = time.perf_counter() - t0
    return count / elapsed, (cpu_seconds(server) - cpu) / count * 1e3


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


async def bench(quick: bool) -> None:
    rounds, seq_n, conc_n = (3, 300, 600) if quick else (5, 1000, 2000)
    with tempfile.TemporaryDirectory() as tmp:
        server, base, h = await start_server(Path(tmp))
        async with aiohttp.ClientSession() as session:
            admin = f"{base}/v1"

            async def call(path: str, body: Any) -> dict[str, Any]:
                async with session.post(admin + path, json=body, headers=h) as resp:
                    assert resp.status == 201, await resp.text()
                    return await resp.json()

            await call("/spaces", {"id": SPACE})
            token = (await call("/tokens/device", {"peer": PEER, "space": SPACE}))["token"]
            record = {
                "name": "b",
                "kind": "cron",
                "spec": {"expr": "0 0 1 1 *"},
                "program": "p@v1",
                "owner": PEER,
            }
            tid = (await call(f"/spaces/{SPACE}/triggers", record))["id"]
            device = Device(session, base, token, tid)
            figures: dict[str, list[tuple[float, float, float, float]]] = {"claim": [], "fire": []}
            for _ in range(rounds):
                for way in ("claim", "fire"):
                    took = await sequential(device, way, seq_n)
                    rate, cpu = await concurrent(device, way, conc_n, server.pid)
                    figures[way].append((pct(took, 50), pct(took, 99), rate, cpu))
        await stop_server(server)
    print("way | sequential p50 ms | p99 ms | 20 in flight: fires/s | server CPU ms per fire")
    names = {"claim": "claim (answers the token)", "fire": "claim, then run + stamps"}
    for way, rows in figures.items():
        medians = [statistics.median(r[i] for r in rows) for i in range(4)]
        print(
            f"{names[way]} | {medians[0]:.2f} | {medians[1]:.2f} | {medians[2]:.0f} | "
            f"{medians[3]:.2f}"
        )
        for r in rows:
            print(f"  round: {r[0]:.2f} | {r[1]:.2f} | {r[2]:.0f} | {r[3]:.2f}")
    print(f"load average {os.getloadavg()[0]:.1f}")


def main() -> None:
    start = time.perf_counter()
    asyncio.run(bench(quick="--quick" in sys.argv))
    print(f"total {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
