"""How long the cycle collector stalls a device's loop, with and without the heap frozen.

Run: .venv/bin/python bench/gcpause.py [messages]

A real device (`python -m runtime.cli device`, as bench/fire.py starts it) and the space
server (bench/serving.py) on 127.0.0.1; one event trigger, `messages` messages (default
1,000) posted at 100/s. The device runs with a `gc.callbacks` hook that writes the length of
every collection to a file; the other variant is the same with `gc.freeze` made a no-op, so
the heap is never frozen (`runtime/commands/up.py` freezes it after the imports and again
after the first sync). Printed
per variant: the collections of each generation from the first sync to the last message's
run (each one stalls the device's loop for as long as it takes), the longest, and the event
fires' POST → `main()` latency. The variants alternate, twice each.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from fire import PEER, PROGRAM, SOURCE, SPACE, Api, armed, event_fires, pct, quiet, stop_device
from serving import ROOT, start_server, stop_server

# `python -c HOOKED OUT NOFREEZE ARGS…`: `python -m runtime.cli ARGS…` with each collection's
# (end time, generation, seconds) appended to OUT as a JSON line.
HOOKED = """
import gc, json, runpy, sys, time
out, nofreeze, sys.argv = sys.argv[1], sys.argv[2] == "1", ["baton", *sys.argv[3:]]
started = {}
def hook(phase, info):
    if phase == "start":
        started["t"] = time.perf_counter()
    else:
        took = time.perf_counter() - started.get("t", time.perf_counter())
        with open(out, "a") as f:
            f.write(json.dumps([time.time(), info["generation"], took]) + "\\n")
gc.callbacks.append(hook)
if nofreeze:
    gc.freeze = lambda: None
runpy.run_module("runtime.cli", run_name="__main__", alter_sys=True)
"""


async def device(tmp: Path, base: str, token: str, out: Path, frozen: bool):
    (tmp / "device.token").touch(mode=0o600)
    (tmp / "device.token").write_text(token + "\n")
    log = (tmp / "device.log").open("wb")
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOOKED, str(out), "0" if frozen else "1", "device",
        "--peer", PEER, "--url", base, "--token-file", str(tmp / "device.token"),
        "--space", SPACE, "--data", str(tmp), stdout=log, stderr=log, cwd=str(ROOT),
    )  # fmt: skip


async def variant(frozen: bool, messages: int) -> str:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        server, base, h = await start_server(tmp, ok_runs_kept=5000)
        session = aiohttp.ClientSession()
        api, proc = Api(session, base, h), None
        try:
            await api.call("POST", "/spaces", {"id": SPACE}, 201)
            await api.call("PUT", f"/spaces/{SPACE}/programs/{PROGRAM}", {"source": SOURCE}, 201)
            body = {"peer": PEER, "space": SPACE}
            token = (await api.call("POST", "/tokens/device", body, 201))["token"]
            out = tmp / "gc.jsonl"
            proc = await device(tmp, base, token, out, frozen)
            await armed(api, 1, 30)
            t0 = time.time()  # the first sync is in: frozen from here, or not
            await quiet(proc.pid, 10)
            fires = await event_fires(api, 100, messages, proc.pid)
            t1 = time.time()
        finally:
            if proc is not None:
                await stop_device(proc)
            await session.close()
            await stop_server(server)
        seen = [json.loads(line) for line in out.read_text().splitlines()]
        during = [(gen, took * 1e3) for at, gen, took in seen if t0 <= at <= t1]
        per = {g: [t for gen, t in during if gen == g] for g in (0, 1, 2)}
        lat = fires.latencies
        return " | ".join([
            "frozen after the first sync" if frozen else "never frozen",
            *(f"{len(per[g])} / {max(per[g], default=0):.2f}" for g in (0, 1, 2)),
            f"{pct(lat, 50):.1f} / {pct(lat, 99):.1f}",
        ])  # fmt: skip


async def main(messages: int) -> None:
    print("heap | gen 0: collections / longest ms | gen 1 | gen 2 | event p50 / p99 ms")
    for frozen in (True, False, True, False):
        print(await variant(frozen, messages), flush=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000))
