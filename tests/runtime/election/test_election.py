"""The Elector against a real space server, in fake time shared by the server and the devices.

Each test scripts devices joining, crashing, stopping, sleeping and losing the
space, advancing one fake clock in small steps. After every step each running
elector is asleep again (the world is quiet), and no two devices may fire at
the same instant: a crashed device keeps its last state, as a frozen process
would, and is checked too.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from waiting import eventually

from core.clock import FakeClock
from core.peerwire import LeaseOut
from runtime.client.api import SpaceClient
from runtime.client.offset import ClockOffset, SpaceTime
from runtime.client.seat import Seat
from runtime.election.decision import Config
from runtime.election.heartbeat import Heartbeat
from runtime.election.loop import Elector
from runtime.events import RoleChanged
from space.app import create_app, default_admin_token_file
from triggers.records import PeerId

SPACE = "home"
CFG = Config()  # the defaults: lease 15 s, renew 5 s, margin 5 s, poll 2 s, settle 10 s
STEP = 0.25


class Device:
    """An elector with its own client and token, and the edges it reported (time, value)."""

    def __init__(self, world: World, peer: str, elector: Elector, client: SpaceClient) -> None:
        self.world, self.peer, self.elector, self.client = world, peer, elector, client
        self.edges: list[tuple[float, bool]] = []
        self.task: asyncio.Task[None] | None = None
        elector.bus.subscribe(
            RoleChanged, lambda e: self.edges.append((world.clock.monotonic(), e.active))
        )

    def fires(self) -> bool:
        return self.elector.may_fire()


class World:
    """One space server and the devices of a test, all on one fake clock."""

    def __init__(self, clock: FakeClock, url: str, admin: SpaceClient, server) -> None:
        self.clock, self.url, self.admin, self.server = clock, url, admin, server
        self.devices: list[Device] = []

    async def device(
        self, peer: str, priority: int = 0, token: str | None = None, report=None
    ) -> Device:
        minted = None if token else await self.admin.token_device({"peer": peer, "space": SPACE})
        token = token or minted["token"]
        client = SpaceClient(self.url, token, clock=self.clock)
        elector = Elector(
            Seat(client, SPACE, PeerId(peer), self.clock),
            name=peer.upper(),
            priority=priority,
            config=CFG,
            report=report,
        )
        dev = Device(self, peer, elector, client)
        dev.task = asyncio.create_task(elector.run())
        self.devices.append(dev)
        await self.quiet()
        return dev

    def running(self) -> list[Device]:
        return [d for d in self.devices if d.task and not d.task.done()]

    async def quiet(self) -> None:
        """Every elector asleep, and each holder's renewal task too (holding may change
        while the world settles, so the count is looked at again)."""

        def settled() -> bool:
            running = self.running()
            return self.clock.sleepers >= sum(1 + d.elector.renewing for d in running)

        await eventually(settled, every=0.001, what="every elector asleep")

    def check(self) -> None:
        firing = [d.peer for d in self.devices if d.fires()]
        assert len(firing) <= 1, f"{firing} may fire at once at t={self.clock.monotonic()}"

    async def step(self, seconds: float = STEP) -> None:
        self.clock.advance(seconds)
        await self.quiet()
        self.check()

    async def run_for(self, seconds: float) -> None:
        for _ in range(round(seconds / STEP)):
            await self.step()

    async def until(self, predicate, limit: float) -> float:
        """Step until `predicate()`; the fake time it took. Fails past `limit` seconds."""
        start = self.clock.monotonic()
        while not predicate():
            assert self.clock.monotonic() - start <= limit, f"not within {limit} s"
            await self.step()
        return self.clock.monotonic() - start

    async def crash(self, dev: Device) -> None:
        assert dev.task is not None
        dev.task.cancel()
        await asyncio.gather(dev.task, return_exceptions=True)

    async def stop(self, dev: Device) -> None:
        await self.crash(dev)
        await dev.elector.release()

    async def lease(self) -> LeaseOut:
        return await self.admin.election(SPACE)

    async def close(self) -> None:
        for dev in self.devices:
            await self.crash(dev)
            await dev.client.close()


@pytest.fixture
async def world(tmp_path: Path, aiohttp_server):
    clock = FakeClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    db = tmp_path / "space.db"
    app = create_app(db, clock=clock.wall, lease_seconds=15, live_seconds=15)
    server = await aiohttp_server(app)
    url = str(server.make_url("/"))
    admin = SpaceClient(url, default_admin_token_file(db).read_text().strip(), clock=clock)
    await admin.space_create({"id": SPACE, "name": "Home"})
    w = World(clock, url, admin, server)
    try:
        yield w
    finally:
        await w.close()
        await admin.close()


async def test_the_first_device_acquires_renews_and_a_peer_never_preempts(world: World) -> None:
    a = await world.device("a")
    assert a.fires() and a.elector.term == 1 and a.edges == [(0.0, True)]
    b = await world.device("b")
    for _ in range(6):  # six renew rounds: the incumbent keeps its term, the peer waits
        await world.run_for(CFG.renew_s)
        assert a.fires() and not b.fires()
    assert a.elector.term == 1 and b.edges == []
    lease = await world.lease()
    assert (lease.active, lease.term, lease.want) == ("a", 1, None)
    assert a.elector.live == {"a", "b"} and b.elector.active == "a"
    assert b.elector.heartbeat.priorities == {"a": 0, "b": 0}
    devices = {d.peer: d for d in (await world.admin.devices(SPACE)).devices}
    assert devices["a"].name == "A" and devices["b"].live
    status = a.elector.status()
    assert status.active == "a" and status.term == 1 and status.holding
    assert status.acts_until and status.last_error is None


async def test_a_crashed_holder_is_replaced_once_the_space_says_its_lease_lapsed(
    world: World,
) -> None:
    a = await world.device("a")
    b = await world.device("b")
    await world.run_for(7.0)
    expires = datetime.fromisoformat(str((await world.lease()).expiresAt))
    await world.crash(a)  # no release: the lease must lapse by the server's clock
    took = await world.until(b.fires, limit=CFG.lease_s + CFG.poll_s + STEP)
    assert world.clock.wall() >= expires  # not a moment before the space said so
    assert took >= CFG.lease_s - CFG.renew_s
    assert b.elector.term == 2 and b.edges == [(world.clock.monotonic(), True)]
    assert not a.fires()


async def test_a_clean_stop_hands_over_within_a_poll(world: World) -> None:
    a = await world.device("a")
    b = await world.device("b")
    await world.run_for(3.0)
    await world.stop(a)
    assert not a.fires() and [on for _, on in a.edges] == [True, False]
    took = await world.until(b.fires, limit=CFG.poll_s + STEP)
    assert took <= CFG.poll_s and b.elector.term == 2


async def test_a_preferred_device_gets_the_lease_at_the_holders_next_renewal(
    world: World,
) -> None:
    a = await world.device("a", priority=0)
    await world.run_for(2.0)
    c = await world.device("c", priority=10)
    took = await world.until(c.fires, limit=CFG.settle_s + CFG.poll_s + CFG.renew_s + STEP)
    assert took >= CFG.settle_s
    assert c.elector.term == 2 and [on for _, on in a.edges] == [True, False]
    handed = a.edges[-1][0]
    assert not a.fires() and handed <= world.clock.monotonic()
    await world.run_for(30.0)  # no flapping back
    assert c.fires() and c.elector.term == 2 and len(a.edges) == 2
    lease = await world.lease()
    assert (lease.active, lease.term, lease.want) == ("c", 2, None)


async def test_a_holder_cut_off_from_the_space_fails_closed_before_its_lease_lapses(
    world: World,
) -> None:
    a = await world.device("a")
    await world.run_for(6.0)
    lease = await world.lease()
    await world.admin.close()
    await world.server.close()
    acts_until = datetime.fromisoformat(a.elector.status().acts_until or "")
    expires = datetime.fromisoformat(str(lease.expiresAt))
    assert (expires - acts_until).total_seconds() == pytest.approx(CFG.margin_s)
    start_wall = world.clock.wall()
    await world.until(lambda: not a.fires(), limit=CFG.lease_s)
    assert world.clock.wall() == acts_until  # the edge came exactly at the deadline
    assert [on for _, on in a.edges] == [True, False]
    assert a.edges[-1][0] == world.clock.monotonic()
    assert (world.clock.wall() - start_wall).total_seconds() <= CFG.lease_s - CFG.margin_s
    await world.run_for(20.0)  # the loop goes on, backing off
    assert not a.task.done() and not a.fires()
    assert "unreachable" in (a.elector.status().last_error or "")


async def test_a_turn_seen_between_rounds_is_reported_so_the_regain_bridges(
    world: World,
) -> None:
    """A stalled loop passes its acting deadline; a fire asked for then is dropped, and the
    edges say so, though the next round renews at the same term before it looks."""
    a = await world.device("a")
    await world.run_for(2.0)
    world.clock.advance(CFG.lease_s - CFG.margin_s)  # past actsUntil, inside the lease
    assert not a.fires()
    assert [on for _, on in a.edges] == [True, False]
    await world.until(a.fires, limit=CFG.poll_s)
    assert [on for _, on in a.edges] == [True, False, True] and a.elector.term == 1


async def test_slept_stops_acting_until_a_renewal_succeeds(world: World) -> None:
    a = await world.device("a")
    await world.run_for(2.0)
    a.elector.slept()
    assert not a.fires() and a.edges[-1][1] is False
    await world.quiet()  # the loop renews at once, without waiting for time to pass
    async with asyncio.timeout(5):
        while not a.fires():
            await world.quiet()
            await asyncio.sleep(0)
    assert [on for _, on in a.edges] == [True, False, True] and a.elector.term == 1


async def test_a_wall_jump_past_the_lease_is_a_sleep_and_ends_the_term(world: World) -> None:
    a = await world.device("a")
    b = await world.device("b")
    await world.run_for(3.0)
    world.clock.jump_wall(60.0)  # suspended a minute: the server's clock moved, monotonic did not
    assert not a.fires()  # noticed inside may_fire, before any watcher runs
    await world.until(lambda: a.fires() or b.fires(), limit=CFG.poll_s + STEP)
    holder = a if a.fires() else b
    assert holder.elector.term == 2 and (await world.lease()).term == 2
    await world.run_for(10.0)


async def test_errors_never_end_the_loop(world: World) -> None:
    stranger = await world.device("x", token="btd_not-a-token")
    await world.run_for(10.0)
    assert not stranger.task.done() and not stranger.fires()
    assert "401" in (stranger.elector.status().last_error or "")


async def test_a_scripted_day_never_has_two_devices_firing(world: World) -> None:
    a = await world.device("a")
    b = await world.device("b")
    await world.run_for(12.0)
    box = await world.device("box", priority=5)
    await world.until(box.fires, limit=30.0)
    await world.crash(box)
    await world.until(lambda: a.fires() or b.fires(), limit=CFG.lease_s + CFG.poll_s + STEP)
    follower = b if a.fires() else a
    leader = a if a.fires() else b
    leader.elector.slept()
    await world.run_for(5.0)
    await world.stop(leader)
    await world.until(follower.fires, limit=CFG.poll_s + STEP)
    assert follower.elector.term == 4


async def test_heartbeats_carry_the_device_report_and_survive_a_broken_one(world: World) -> None:
    beats = []

    def report() -> dict:
        beats.append(world.clock.wall())
        return {"beats": len(beats), "at": world.clock.wall()}

    def broken() -> dict:
        raise RuntimeError("no report today")

    await world.device("a", report=report)
    await world.device("b", report=broken)
    await world.run_for(CFG.renew_s)
    devices = {d.peer: d for d in (await world.admin.devices(SPACE)).devices}
    assert devices["a"].status == {"beats": 2, "at": "2026-12-01T09:00:05Z"}
    assert devices["b"].status == {"error": "RuntimeError: no report today"}
    await world.run_for(CFG.poll_s)  # b, a follower, beats on its first poll after 5 s
    devices = {d.peer: d for d in (await world.admin.devices(SPACE)).devices}
    assert devices["b"].lastSeen == datetime(2026, 12, 1, 9, 0, 6, tzinfo=UTC)


async def test_heartbeats_follow_the_spaces_lease_length_from_the_first_interval(
    tmp_path: Path, aiohttp_server
) -> None:
    clock = FakeClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    db = tmp_path / "short.db"
    server = await aiohttp_server(create_app(db, clock=clock.wall, lease_seconds=3))
    url = str(server.make_url("/"))
    admin = SpaceClient(url, default_admin_token_file(db).read_text().strip(), clock=clock)
    await admin.space_create({"id": SPACE})
    world = World(clock, url, admin, server)
    try:
        await world.device("holder")
        follower = await world.device("follower")
        seen = []
        for _ in range(12):  # 3 s: a heartbeat a second (the 15 s defaults would wait 5 s)
            await world.step()
            listed = {d.peer: d for d in (await admin.devices(SPACE)).devices}
            seen.append(listed[follower.peer].lastSeen)
        assert len(set(seen)) >= 3
    finally:
        await world.close()
        await admin.close()


async def test_heartbeats_tell_the_space_the_clock_offset_the_device_measured(
    tmp_path: Path, aiohttp_server
) -> None:
    """A space whose clock is 3 s ahead: the device measures it from the answers and its
    next heartbeat carries it, into the space's history (what `why` names)."""
    clock = FakeClock(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    db = tmp_path / "space.db"
    app = create_app(db, clock=lambda: clock.wall() + timedelta(seconds=3))
    server = await aiohttp_server(app)
    url, admin_token = str(server.make_url("/")), default_admin_token_file(db).read_text()
    async with SpaceClient(url, admin_token.strip(), clock=clock) as admin:
        await admin.space_create({"id": SPACE, "name": "Home"})
        token = (await admin.token_device({"peer": "a", "space": SPACE}))["token"]
    offset = ClockOffset(clock)
    async with SpaceClient(url, token, clock=SpaceTime(offset), offset=offset) as client:
        beat = Heartbeat(Seat(client, SPACE, PeerId("a"), clock), "A")
        beat.offset = offset.known
        await beat.beat(priority=0, every=5.0)  # before any answer: no offset to tell
        clock.advance(5)
        await beat.beat(priority=0, every=5.0)
    with sqlite3.connect(db) as conn:
        got = conn.execute("SELECT peer, offset_ms FROM history_offsets").fetchall()
    assert got == [("a", 3000.0)]
