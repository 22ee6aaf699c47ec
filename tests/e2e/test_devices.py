"""Devices as real processes on one real space server: who fires, what happens when one dies.

Three `baton device` processes join one `baton space serve` with a 3 s lease (the
timings scale with it), so failover takes seconds. Every wait polls the space
under a deadline; assertions read the run records and fire claims through the API.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from support import Proc, Procs, duplicates, fires_of, runs_of, serve, wait_until

from runtime.client import SpaceClient

SPACE = "home"
LEASE = 3.0
POLL = LEASE / 7.5
MARGIN = 4.0  # a slot's period, the takeover's resync, the run itself, a busy machine
PEERS = ("a", "b", "c")
QUICK = 'def main(args):\n    return {"ok": True}\n'
EVERY_SECOND = {"kind": "cron", "spec": {"expr": "* * * * * *"}, "program": "quick@v1"}

Runs = list[dict[str, Any]]


class Cluster:
    def __init__(self, api: SpaceClient, procs: Procs, devices: dict[str, Proc]) -> None:
        self.api, self.procs, self.devices = api, procs, devices

    async def create(self, name: str, **fields: Any) -> str:
        created = await self.api.trigger_create(SPACE, {**EVERY_SECOND, "name": name, **fields})
        return created["id"]

    async def runs(self, trigger: str) -> Runs:
        return await runs_of(self.api, SPACE, trigger)

    def runs_by(
        self, trigger: str, n: int, peer: str | None = None, after: str = ""
    ) -> Callable[[], Awaitable[Runs | None]]:
        """A check: all runs of `trigger` once `n` of them (by `peer`, keys after `after`) exist."""

        async def check() -> Runs | None:
            runs = await self.runs(trigger)
            hits = [r for r in runs if peer in (None, r["peer"]) and r["key"] > after]
            return runs if len(hits) >= n else None

        return check


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Procs(tmp_path) as procs:
        lease = ("--lease-seconds", str(LEASE))
        _, url = await serve(procs, tmp_path / "space.db", *lease, "--live-seconds", str(LEASE))
        admin = (tmp_path / "admin.token").read_text().strip()
        async with SpaceClient(url, admin) as api:
            await api.space_create({"id": SPACE})
            await api.program_put(SPACE, "quick@v1", {"source": QUICK})
            started = await asyncio.gather(*(_device(procs, api, url, p) for p in PEERS))
            await wait_until(lambda: _settled(api), timeout=30, what="3 live devices, 1 active")
            yield Cluster(api, procs, dict(zip(PEERS, started, strict=True)))


async def _device(procs: Procs, api: SpaceClient, url: str, peer: str) -> Proc:
    token = procs.logs / f"{peer}.token"
    token.write_text((await api.token_device({"peer": peer}))["token"] + "\n")
    where = ("--url", url, "--token-file", str(token), "--space", SPACE)
    data = ("--data", str(procs.logs / peer))
    tuning = ("--lease-seconds", str(LEASE), "--workers", "1")
    return await procs.start(peer, "device", "--peer", peer, *where, *data, *tuning)


async def _settled(api: SpaceClient) -> bool:
    live = {d["peer"] for d in (await api.devices(SPACE))["devices"] if d["live"]}
    return live >= set(PEERS) and (await api.election(SPACE))["active"] is not None


async def test_one_device_fires_each_slot_and_another_takes_over_when_it_dies(
    cluster: Cluster,
) -> None:
    api, tid = cluster.api, await cluster.create("floating")
    await wait_until(cluster.runs_by(tid, 4), timeout=20, what="four runs of a floating cron")
    lease = await api.election(SPACE)
    holder, term = lease["active"], lease["term"]
    before = await cluster.runs(tid)
    assert duplicates([r["key"] for r in before]) == []
    assert {(r["peer"], r["term"], r["status"]) for r in before} == {(holder, term, "ok")}

    killed = time.monotonic()
    await cluster.devices[holder].kill()
    others = [p for p in PEERS if p != holder]
    taken = await wait_until(
        _runs_elsewhere(cluster, tid, holder),
        timeout=LEASE + POLL + MARGIN,
        what=f"a run on another device after {holder} was killed",
    )
    print(f"failover: first run elsewhere {time.monotonic() - killed:.1f} s after the kill")
    successor, new_term = taken[0]["peer"], taken[0]["term"]
    assert successor in others and new_term > term

    last_before = max(r["key"] for r in before)
    runs = await wait_until(
        cluster.runs_by(tid, 3, peer=successor, after=last_before),
        timeout=10,
        what=f"three runs on {successor}",
    )
    fires = await fires_of(api, SPACE, tid)
    assert duplicates([r["key"] for r in runs]) == []
    assert duplicates([f["key"] for f in fires]) == []
    assert {(r["peer"], r["term"]) for r in runs} == {(holder, term), (successor, new_term)}
    claims = {f["key"]: (f["peer"], f["term"]) for f in fires}
    assert all(claims.get(r["key"]) == (r["peer"], r["term"]) for r in runs)
    lease = await api.election(SPACE)
    assert (lease["active"], lease["term"]) == (successor, new_term)


def _runs_elsewhere(
    cluster: Cluster, trigger: str, holder: str
) -> Callable[[], Awaitable[Runs | None]]:
    async def check() -> Runs | None:
        return [r for r in await cluster.runs(trigger) if r["peer"] != holder] or None

    return check
