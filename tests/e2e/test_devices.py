"""Devices as real processes on one real space server: who fires, what happens when one dies.

Three `baton device` processes join one `baton space serve` with a 3 s lease; the
devices are not told, they follow the length the space answers (their timings
scale with it), so failover takes seconds. Every wait polls the space
under a deadline; assertions read the run records and fire claims through the API.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pages import read_all
from support import (
    Proc,
    Procs,
    duplicates,
    eventually,
    fires_of,
    matched,
    runs_of,
    serve,
    write_token,
)

from core.chatwire import Message
from runtime.chat.responders import HELP
from runtime.client.api import SpaceClient

SPACE = "home"
LEASE = 3.0
POLL = LEASE / 7.5
MARGIN = 4.0  # a slot's period, the takeover's resync, the run itself, a busy machine
PEERS = ("a", "b", "c")
HEALTH = 1.0  # the health pass's period: a repin elsewhere gives the active device no diff
PAUSE_SLACK = timedelta(seconds=2)  # a slot due as the pause is written may still fire
QUICK = 'def main(args):\n    return {"ok": True}\n'
EVERY_SECOND = {"kind": "cron", "spec": {"expr": "* * * * * *"}, "program": "quick@v1"}

UP_URL = re.compile(r"space API on (http://127\.0\.0\.1:(\d+))/v1")

Runs = list[dict[str, Any]]


class Cluster:
    def __init__(self, api: SpaceClient, procs: Procs, devices: dict[str, Proc], url: str) -> None:
        self.api, self.procs, self.devices, self.url = api, procs, devices, url

    async def restart(self, peer: str, run: int) -> None:
        """Start `peer` again on its own data, as its `run`-th process."""
        self.devices[peer] = await _device(self.procs, self.api, self.url, peer, run)

    async def create(self, name: str, **fields: Any) -> str:
        created = await self.api.trigger_create(SPACE, {**EVERY_SECOND, "name": name, **fields})
        return created["id"]

    async def runs(self, trigger: str) -> Runs:
        return await runs_of(self.api, SPACE, trigger)

    def runs_by(
        self, trigger: str, n: int, peer: str | None = None, after: datetime | None = None
    ) -> Callable[[], Awaitable[Runs | None]]:
        """A check: all runs of `trigger` once `n` of them (by `peer`, after `after`) exist."""

        async def check() -> Runs | None:
            runs = await self.runs(trigger)
            hits = [r for r in runs if peer in (None, r["peer"]) and _later(r, after)]
            return runs if len(hits) >= n else None

        return check


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _later(run: dict[str, Any], after: datetime | None) -> bool:
    return after is None or at(run["key"]) > after


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with Procs(tmp_path) as procs:
        lease = ("--lease-seconds", str(LEASE))
        # Live = two leases: a device whose heartbeat lags once on a loaded machine stays live,
        # as it does with the defaults (15 s live, a heartbeat every 5 s).
        live = ("--live-seconds", str(2 * LEASE))
        _, url = await serve(procs, tmp_path / "space.db", *lease, *live)
        admin = (tmp_path / "admin.token").read_text().strip()
        async with SpaceClient(url, admin) as api:
            await api.space_create({"id": SPACE})
            await api.program_put(SPACE, "quick@v1", {"source": QUICK})
            started = await asyncio.gather(*(_device(procs, api, url, p) for p in PEERS))
            await eventually(lambda: _settled(api), timeout=30, what="3 live devices, 1 active")
            yield Cluster(api, procs, dict(zip(PEERS, started, strict=True)), url)


async def _device(procs: Procs, api: SpaceClient, url: str, peer: str, run: int = 1) -> Proc:
    token = procs.logs / f"{peer}.token"
    write_token(token, (await api.token_device({"peer": peer, "space": SPACE}))["token"])
    where = ("--url", url, "--token-file", str(token), "--space", SPACE)
    data = ("--data", str(procs.logs / peer))
    tuning = ("--health-seconds", str(HEALTH), "--workers", "1")  # the lease: the space's
    name = peer if run == 1 else f"{peer}-{run}"
    return await procs.start(name, "device", "--peer", peer, *where, *data, *tuning)


async def _settled(api: SpaceClient) -> bool:
    live = {d.peer for d in (await api.devices(SPACE)).devices if d.live}
    return live >= set(PEERS) and (await api.election(SPACE)).active is not None


async def test_one_device_fires_each_slot_and_another_takes_over_when_it_dies(
    cluster: Cluster,
) -> None:
    api, tid = cluster.api, await cluster.create("floating")
    await eventually(cluster.runs_by(tid, 4), timeout=20, what="four runs of a floating cron")
    lease = await api.election(SPACE)
    holder, term = lease.active, lease.term
    assert holder is not None
    before = await cluster.runs(tid)
    assert duplicates([r["key"] for r in before]) == []
    assert {(r["peer"], r["term"], r["status"]) for r in before} == {(holder, term, "ok")}

    killed = time.monotonic()
    await cluster.devices[holder].kill()
    others = [p for p in PEERS if p != holder]
    taken = await eventually(
        _runs_elsewhere(cluster, tid, holder),
        timeout=LEASE + POLL + MARGIN,
        what=f"a run on another device after {holder} was killed",
    )
    print(f"failover: first run elsewhere {time.monotonic() - killed:.1f} s after the kill")
    successor, new_term = taken[0]["peer"], taken[0]["term"]
    assert successor in others and new_term > term

    last_before = max(at(r["key"]) for r in before)
    runs = await eventually(
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
    assert (lease.active, lease.term) == (successor, new_term)


def _runs_elsewhere(
    cluster: Cluster, trigger: str, holder: str
) -> Callable[[], Awaitable[Runs | None]]:
    async def check() -> Runs | None:
        return [r for r in await cluster.runs(trigger) if r["peer"] != holder] or None

    return check


async def test_a_pinned_trigger_runs_on_its_owner_alone_and_follows_a_repin(
    cluster: Cluster,
) -> None:
    api = cluster.api
    holder = (await api.election(SPACE)).active
    first, second = (p for p in PEERS if p != holder)  # standbys: a floating run would show
    metronome = await cluster.create("metronome")
    tid = await cluster.create("pinned", owner=first)
    await eventually(cluster.runs_by(tid, 2), timeout=15, what=f"two runs on {first}")

    moved = await api.trigger_patch(SPACE, tid, {"owner": second})
    runs = await eventually(
        cluster.runs_by(tid, 2, peer=second), timeout=10, what=f"two runs on {second}"
    )
    assert {r["peer"] for r in runs} == {first, second}
    assert duplicates([r["key"] for r in runs]) == []
    last_first = max(at(r["key"]) for r in runs if r["peer"] == first)
    assert last_first < min(at(r["key"]) for r in runs if r["peer"] == second)
    fires = await fires_of(api, SPACE, tid)
    assert all(at(f["claimedAt"]) <= at(moved["updatedAt"]) for f in fires if f["peer"] == first)

    offline = await api.trigger_patch(SPACE, tid, {"owner": "ghost"})
    since = at(offline["updatedAt"])
    ghost = "pinned to ghost, which is not live"
    await eventually(_stamped(api, tid, "owner_offline", ghost), timeout=10, what="the stamp")
    await eventually(  # five slots pass on the active device while nobody runs the pinned one
        cluster.runs_by(metronome, 1, after=since + timedelta(seconds=5)),
        timeout=15,
        what="the metronome running on",
    )
    assert [r for r in await cluster.runs(tid) if at(r["key"]) > since] == []
    assert all(at(f["claimedAt"]) <= since for f in await fires_of(api, SPACE, tid))

    back = await api.trigger_patch(SPACE, tid, {"owner": first})
    await eventually(
        cluster.runs_by(tid, 1, peer=first, after=at(back["updatedAt"])),
        timeout=10,
        what=f"a run on {first} once it owns the trigger again",
    )
    cleared = await eventually(_stamped(api, tid, "ok"), timeout=10, what="the stamp cleared")
    assert cleared["owner"] == first


async def test_an_owner_that_stops_is_stamped_offline_and_cleared_when_it_is_back(
    cluster: Cluster,
) -> None:
    api = cluster.api
    holder = (await api.election(SPACE)).active
    owner = next(p for p in PEERS if p != holder)
    tid = await cluster.create("pinned", owner=owner)
    await eventually(cluster.runs_by(tid, 1, peer=owner), timeout=15, what=f"a run on {owner}")

    assert await cluster.devices[owner].stop(signal.SIGTERM) == 0  # signs off: not live at once
    offline = f"pinned to {owner}, which is not live"
    await eventually(_stamped(api, tid, "owner_offline", offline), timeout=10, what="the stamp")

    await cluster.restart(owner, run=2)
    back = datetime.now(UTC)
    await eventually(cluster.runs_by(tid, 1, after=back), timeout=15, what=f"{owner} running again")
    cleared = await eventually(_stamped(api, tid, "ok"), timeout=10, what="the stamp cleared")
    assert cleared["lastStatusDetail"] == ""
    assert {r["peer"] for r in await cluster.runs(tid)} == {owner}


def _stamped(
    api: SpaceClient, trigger: str, status: str, detail: str | None = None
) -> Callable[[], Awaitable[dict[str, Any] | None]]:
    async def check() -> dict[str, Any] | None:
        record = await api.trigger_get(SPACE, trigger)
        if record.get("lastStatus") != status:
            return None
        return record if detail is None or record.get("lastStatusDetail") == detail else None

    return check


async def test_a_paused_trigger_fires_nothing_and_its_resume_replays_nothing(
    cluster: Cluster,
) -> None:
    api = cluster.api
    metronome = await cluster.create("metronome")
    tid = await cluster.create("pausable")
    await eventually(cluster.runs_by(tid, 2), timeout=15, what="two runs before the pause")

    paused = at((await api.trigger_patch(SPACE, tid, {"enabled": False}))["updatedAt"])
    await eventually(
        cluster.runs_by(metronome, 1, after=paused + timedelta(seconds=5)),
        timeout=15,
        what="five slots passing while paused",
    )
    resumed = at((await api.trigger_patch(SPACE, tid, {"enabled": True}))["updatedAt"])
    runs = await eventually(
        cluster.runs_by(tid, 2, after=resumed), timeout=10, what="two runs after the resume"
    )
    keys = [at(r["key"]) for r in runs]
    assert duplicates([r["key"] for r in runs]) == []
    assert [k for k in keys if paused + PAUSE_SLACK < k < resumed] == []
    assert {r["status"] for r in runs} == {"ok"}


async def test_baton_up_runs_the_demo_answers_the_chat_and_stops_cleanly_on_sigint(
    tmp_path: Path,
) -> None:
    data, space = tmp_path / "up", "default"
    async with Procs(tmp_path) as procs:
        up = await procs.start(
            "up",
            "up",
            "--data",
            str(data),
            "--port",
            "0",
            "--demo",
            "--peer",
            "solo",
            "--lease-seconds",
            str(LEASE),
        )
        printed = await matched(up, UP_URL)
        url, port = printed.group(1), int(printed.group(2))
        assert port != 0
        admin = (data / "admin.token").read_text().strip()
        async with SpaceClient(url, admin) as api:
            heartbeat = await eventually(
                _named(api, space, "demo heartbeat"), timeout=10, what="the demo heartbeat"
            )
            await eventually(  # it fires every ten seconds
                _ok_run(api, space, heartbeat["id"]), timeout=25, what="an ok heartbeat run"
            )
            code, shown = await procs.run("status", "status", "--data", str(data))
            assert code == 0 and f"space {space}: active device solo," in shown
            assert (await api.election(space)).leaseSeconds == LEASE

            chat = (await api.space_get(space)).generalChat or ""
            sent = await api.chat_send(space, chat, {"text": "help"})
            reply = await eventually(
                _reply(api, space, chat, sent.seq), timeout=15, what="chat-watch's answer"
            )
            assert HELP in reply.text

        assert await up.stop(signal.SIGINT) == 0
        said = up.output()
        assert "released the lease" in said and "baton: stopped" in said
        _, again = await serve(procs, data / "space.db")
        async with SpaceClient(again, admin) as api:
            lease = await api.election(space)
        assert (lease.active, lease.expiresAt) == (None, None)  # released, not lapsing


def _named(
    api: SpaceClient, space: str, name: str
) -> Callable[[], Awaitable[dict[str, Any] | None]]:
    async def check() -> dict[str, Any] | None:
        found = [t for t in (await api.triggers(space))["triggers"] if t.get("name") == name]
        return found[0] if found else None

    return check


def _ok_run(api: SpaceClient, space: str, trigger: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return any(r["status"] == "ok" for r in await runs_of(api, space, trigger))

    return check


def _reply(
    api: SpaceClient, space: str, chat: str, after: int
) -> Callable[[], Awaitable[Message | None]]:
    async def check() -> Message | None:
        page = await api.chat_messages(space, chat, after=after)
        answers = [m for m in read_all(page) if m.agent and m.agent.name == "chat-watch"]
        return answers[0] if answers else None

    return check
