"""The space's side of recording runs: `POST …/runs` in list form, as the device's recorder
sends it (each run with its trigger's stamps), by a device token.

Run: .venv/bin/python bench/run_batch.py [--quick]

The space in a child process (bench/serving.py). Every fire is claimed first; then the
runs are posted one list after another, in two shapes: 3 runs of 3 distinct triggers per
list (a burst of distinct triggers: what issue 21 profiled) and 20 runs of 4 triggers.
Prints, per shape, the space's CPU ms per run and the wall ms per list (medians of the
rounds, and each round). Figures in docs/performance.md, "Recording runs".
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from claim import cpu_seconds
from serving import start_server, stop_server

SPACE = "bench"
PEER = "bench-dev"
SHAPES = {"3 runs of 3 triggers": (3, 1), "20 runs of 4 triggers": (4, 5)}


class Poster:
    def __init__(self, session: aiohttp.ClientSession, base: str, token: str) -> None:
        self.session, self.base = session, f"{base}/v1/spaces/{SPACE}"
        self.h = {"Authorization": f"Bearer {token}"}
        self.n = 0
        self.tids: list[str] = []

    async def post(self, path: str, body: Any) -> Any:
        async with self.session.post(self.base + path, json=body, headers=self.h) as resp:
            assert resp.status == 200, (resp.status, await resp.text())
            return await resp.json()

    async def claimed(self, tids: list[str], per: int) -> list[dict[str, Any]]:
        """A list of runs, one per fire claimed now (`per` fires of each trigger)."""
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        runs = []
        for tid in tids:
            for _ in range(per):
                self.n += 1
                runs.append(run(tid, self.n, now))
        claims = [
            {"triggerId": r["triggerId"], "key": r["key"], "term": 0, "peer": PEER} for r in runs
        ]
        answer = await self.post("/fires", claims)
        assert all(c["status"] == 201 for c in answer["claims"]), answer
        return runs


def run(tid: str, n: int, now: str) -> dict[str, Any]:
    return {
        "runId": f"run_{n}",
        "triggerId": tid,
        "program": "p@v1",
        "peer": PEER,
        "term": 0,
        "key": f"k{n}",
        "dueAt": now,
        "startedAt": now,
        "finishedAt": now,
        "durationMs": 1.0,
        "status": "ok",
        "result": {"ok": True},
        "lateMs": 0.5,
        "phases": {"wakeMs": 0.2, "claimMs": 0.1, "queueMs": 0.1, "spawnMs": 0.1},
        "stamps": {"lastStatus": "ok", "lastRunAt": now, "rollup": {"runs": n, "ok": n}},
    }


async def one_round(
    poster: Poster, tids: list[str], shape: tuple[int, int], lists: int, pid: int
) -> tuple[float, float]:
    triggers, per = shape
    batches = [await poster.claimed(tids[:triggers], per) for _ in range(lists)]
    took: list[float] = []
    cpu = cpu_seconds(pid)
    for batch in batches:
        t0 = time.perf_counter()
        answer = await poster.post("/runs", batch)
        took.append((time.perf_counter() - t0) * 1e3)
        assert all(r["status"] == 201 and r["stamps"] == 200 for r in answer["runs"]), answer
    runs = lists * triggers * per
    return (cpu_seconds(pid) - cpu) / runs * 1e3, statistics.median(took)


async def setup(session: aiohttp.ClientSession, base: str, h: dict[str, str]) -> Poster:
    async def call(path: str, body: Any) -> dict[str, Any]:
        async with session.post(f"{base}/v1{path}", json=body, headers=h) as resp:
            assert resp.status == 201, await resp.text()
            return await resp.json()

    await call("/spaces", {"id": SPACE})
    token = (await call("/tokens/device", {"peer": PEER, "space": SPACE}))["token"]
    poster = Poster(session, base, token)
    for i in range(4):
        record = {"name": f"b{i}", "kind": "cron", "spec": {"expr": "0 0 1 1 *"}}
        made = await call(f"/spaces/{SPACE}/triggers", {**record, "program": "p@v1", "owner": PEER})
        poster.tids.append(made["id"])
    return poster


async def bench(quick: bool) -> None:
    rounds, runs_per_round = (3, 600) if quick else (5, 2400)
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in SHAPES}
    with tempfile.TemporaryDirectory() as tmp:
        server, base, h = await start_server(Path(tmp))
        async with aiohttp.ClientSession() as session:
            poster = await setup(session, base, h)
            for _ in range(rounds):
                for name, shape in SHAPES.items():
                    lists = runs_per_round // (shape[0] * shape[1])
                    figures[name].append(
                        await one_round(poster, poster.tids, shape, lists, server.pid)
                    )
        await stop_server(server)
    print("list shape | space CPU ms per run | wall ms per list")
    for name, rows in figures.items():
        cpu, wall = (statistics.median(r[i] for r in rows) for i in range(2))
        print(f"{name} | {cpu:.3f} | {wall:.2f}")
        for r in rows:
            print(f"  round: {r[0]:.3f} | {r[1]:.2f}")
    print(f"load average {os.getloadavg()[0]:.1f}")


def main() -> None:
    start = time.perf_counter()
    asyncio.run(bench(quick="--quick" in sys.argv))
    print(f"total {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
