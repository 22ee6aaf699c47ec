"""Memory and time of repeated full resyncs at N records (default 100,000).

Run: .venv/bin/python bench/resync.py [N]

The space server in a child process (bench/serving.py), N pinned cron records written to its
file (bench/compare.py's `seed`), and a `Reconciler` in this process that runs six full syncs
in a row; prints each sync's wall time and this process's RSS after it.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from compare import seed
from fire import PEER, SPACE, Api, rss_mb
from serving import ROOT, start_server, stop_server


async def resyncs(count: int, times: int = 6) -> None:
    from core.clock import SystemClock
    from runtime.client.api import SpaceClient
    from runtime.client.seat import Seat
    from runtime.events import Bus
    from runtime.feeds.reconciler import Reconciler
    from triggers.records import PeerId

    with tempfile.TemporaryDirectory() as tmp:
        server, base, h = await start_server(Path(tmp))
        try:
            async with aiohttp.ClientSession() as session:
                await Api(session, base, h).call("POST", "/spaces", {"id": SPACE}, 201)
            seed(Path(tmp) / "space.db", count)
            async with SpaceClient(base, h["Authorization"].split()[1]) as client:
                seat = Seat(client, SPACE, PeerId(PEER), SystemClock())
                rec = Reconciler(seat, is_active=lambda: True, bus=Bus())
                for i in range(times):
                    t0 = time.perf_counter()
                    await rec.sync()
                    gc.collect()
                    print(
                        f"sync {i}: {time.perf_counter() - t0:.2f} s, armed {len(rec.registry)}, "
                        f"RSS {rss_mb(os.getpid()):.1f} MB",
                        flush=True,
                    )
        finally:
            await stop_server(server)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    asyncio.run(resyncs(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000))
