"""The stages of a device's start at N cron records, in one process: CPU and memory of each.

Run: .venv/bin/python bench/atrest.py [N] [--traced]   (default 100,000; about 10 s)

Each stage as the device runs it (`records.load`, `diffing.reconcile`, `Ticker.apply`,
`Ticker.arm_pending`), on bench/compare.py's at-rest records; prints each stage's CPU
seconds and the RSS growth per record (`--traced`: traced memory instead, slower CPU).
What it measures exactly is in docs/performance.md, "Benchmark notes".
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any

from compare import PEER, rest_expr
from fire import rss_mb
from serving import ROOT

BASE = {"rss": 0.0}


def stored(count: int, at: str) -> list[bytes]:
    """`count` records as the space stores them (`trigger_store._new`'s fields)."""
    rows = []
    for i in range(count):
        body = {
            "id": f"trg_rest{i:06d}",
            "name": f"rest {i}",
            "kind": "cron",
            "program": "stamp@v1",
            "owner": PEER,
            "spec": {"expr": rest_expr(i), "tz": "UTC"},
            "rev": 1,
            "createdAt": at,
            "updatedAt": at,
            "activeSince": at,
        }
        rows.append(json.dumps(body, separators=(",", ":")).encode())
    return rows


class Nowhere:
    """The ticker's dispatcher: nothing comes due (February's slots, armed in December)."""

    async def fire(self, *requests: Any) -> None:
        raise AssertionError("nothing is due at rest")


async def stages(count: int) -> None:
    from core.clock import FakeClock
    from runtime.fire.ticker import Ticker
    from triggers import diffing
    from triggers import registry as reg
    from triggers.records import load

    now = datetime(2026, 12, 2, 14, 5, tzinfo=UTC)
    rows = stored(count, (now - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S.000Z"))
    if "--traced" in sys.argv:
        tracemalloc.start()
    BASE["rss"] = rss_mb(os.getpid())
    t0 = time.process_time()
    loaded = [load(r) for r in rows]
    report("decode (first time)", t0, count)
    records = {r.id: r for r in loaded}
    t0 = time.process_time()
    diff = diffing.reconcile(reg.Registry(), loaded, PEER, True)
    registry = reg.absorb(reg.Registry(), diff)
    report("reconcile", t0, count)
    ticker = Ticker(Nowhere(), clock=FakeClock(now))  # type: ignore[arg-type]
    t0 = time.process_time()
    ticker.apply(diff, now)
    report("ticker.apply", t0, count)
    t0 = time.process_time()
    await ticker.arm_pending()
    if hasattr(ticker, "touched"):  # (a build before the health pass judged what changed)
        ticker.touched.take()  # the health pass takes these in a device
    loaded.clear()
    report(f"arm ({len(ticker.next_fires())} entries)", t0, count)
    assert len(records) == len(registry) == count


def report(name: str, t0: float, count: int) -> None:
    took = time.process_time() - t0
    gc.collect()
    if tracemalloc.is_tracing():
        per, what = tracemalloc.get_traced_memory()[0] / count, "traced"
    else:
        per, what = (rss_mb(os.getpid()) - BASE["rss"]) * 2**20 / count, "more RSS"
    print(f"{name:<26} {took:5.2f} s CPU   {per:5.0f} B {what} per record so far", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    counts = [int(a) for a in sys.argv[1:] if a.isdigit()]
    asyncio.run(stages(counts[0] if counts else 100_000))
