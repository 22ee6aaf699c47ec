"""HealthPass against a real space server, with a real Elector holding the lease in fake time.

The records a device knows come from the space's listing (what the reconciler
keeps), refreshed by the test when it wants the pass to see a change. Writes
are counted on the server's change feed: a pass with nothing to say adds none.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from waiting import eventually

from core.clock import FakeClock, iso
from programs import breaker, rollup
from runtime.client.api import SpaceClient
from runtime.client.seat import Seat
from runtime.election.loop import Elector
from runtime.fire.recorder import Recorder
from runtime.health.stamper import HealthPass
from runtime.health.touched import Touched
from space.app import create_app, default_admin_token_file
from triggers.records import Loaded, PeerId, Salvaged, TriggerId, load

ELECTOR = 2  # the holder's sleepers on the clock: its loop and its renewal task
SPACE = "home"
START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TICK = {"name": "tick", "kind": "cron", "spec": {"expr": "*/5 * * * *"}, "program": "tick@v1"}
BAD = {"id": "trg_bad", "kind": "cron", "spec": {"expr": "not a cron"}, "program": "tick@v1"}


class Known:
    """The records as the device last read them (what the reconciler would hold)."""

    def __init__(self, admin: SpaceClient) -> None:
        self.admin = admin
        self.records: dict[TriggerId, Loaded] = {}

    async def refresh(self) -> None:
        listing = await self.admin.triggers(SPACE)
        self.records = {r.id: r for r in map(load, listing["triggers"])}

    def __call__(self) -> dict[TriggerId, Loaded]:
        return self.records


class Setup:
    def __init__(self, admin, known, health, clock, db, missing, url, elector, armed) -> None:
        self.admin, self.known, self.health, self.clock = admin, known, health, clock
        self.db, self.missing, self.url, self.elector = db, missing, url, elector
        self.armed = armed  # what the ticker would have armed: {id: next fire}
        self.made = 0

    async def create(self, **fields) -> str:
        self.made += 1  # names are unique within a space
        body = {**TICK, "name": f"tick-{self.made}", **fields}
        return (await self.admin.trigger_create(SPACE, body))["id"]

    def judging(self, touched: Touched) -> HealthPass:
        """A second pass over the same space that judges only what `touched` names."""
        return HealthPass(
            Seat(self.health._client, SPACE, PeerId("a"), self.clock),
            recorder=self.health._recorder,
            records=self.known,
            elector=self.elector,
            missing_chats=lambda: self.missing["chats"],
            next_fire=self.armed.get,
            touched=touched,
        )

    async def stamp_of(self, tid: str) -> tuple[str, str]:
        record = await self.admin.trigger_get(SPACE, tid)
        return record.get("lastStatus", ""), record.get("lastStatusDetail", "")

    async def seq(self) -> int:
        return (await self.admin.triggers(SPACE))["seq"]

    async def changes_since(self, seq: int) -> list:
        return (await self.admin.changes(SPACE, since=seq)).changes

    def write_raw(self, body: dict) -> None:
        """Store `body` over the record's stored fields, as another build might have."""
        conn = sqlite3.connect(self.db)
        try:
            row = conn.execute("SELECT body FROM triggers WHERE id = ?", [body["id"]]).fetchone()
            stored = json.loads(row[0]) if row else {"rev": 1}
            conn.execute(
                "INSERT OR REPLACE INTO triggers VALUES (?, ?, ?, ?)",
                [SPACE, body["id"], stored["rev"], json.dumps({**stored, **body})],
            )
            conn.commit()
        finally:
            conn.close()

    async def elapse(self, seconds: float, step: float = 5.0) -> None:
        """Move the clock on, letting the elector renew its lease on the way."""
        while seconds > 0:
            self.clock.advance(min(step, seconds))
            seconds -= step
            async with asyncio.timeout(5):
                await self.clock.wait_for_sleepers(ELECTOR)

    async def pass_(self) -> int:
        await self.known.refresh()
        return await self.health.run_pass()


@pytest.fixture
async def setup(tmp_path: Path, aiohttp_server):
    clock = FakeClock(START)
    db = tmp_path / "space.db"
    server = await aiohttp_server(create_app(db, clock=clock.wall))
    url = str(server.make_url("/"))
    admin = SpaceClient(url, default_admin_token_file(db).read_text().strip(), clock=clock)
    await admin.space_create({"id": SPACE, "name": "Home"})
    await admin.program_put(SPACE, "tick@v1", {"source": "def main(args):\n    return {}\n"})
    token = (await admin.token_device({"peer": "a", "space": SPACE}))["token"]
    device = SpaceClient(url, token, clock=clock)
    seat = Seat(device, SPACE, PeerId("a"), clock)
    elector = Elector(seat, name="A")
    task = asyncio.create_task(elector.run())
    async with asyncio.timeout(5):
        await clock.wait_for_sleepers(ELECTOR)
    assert elector.may_fire()
    known, missing = Known(admin), {"chats": frozenset()}
    armed: dict[TriggerId, datetime] = {}
    health = HealthPass(
        seat,
        recorder=Recorder(seat),
        records=known,
        elector=elector,
        missing_chats=lambda: missing["chats"],
        next_fire=armed.get,
    )
    try:
        yield Setup(admin, known, health, clock, db, missing, url, elector, armed)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await device.close()
        await admin.close()


async def test_records_that_cannot_run_are_stamped_once(setup: Setup) -> None:
    healthy = await setup.create()
    pinned = await setup.create(owner="ghost")
    unknown = await setup.create(program="nope@v1")
    chat = await setup.create(kind="event", spec={"dataset": "chat_messages", "objectId": "c_x"})
    setup.write_raw(BAD)
    b_token = (await setup.admin.token_device({"peer": "b", "space": SPACE}))["token"]
    async with SpaceClient(setup.url, b_token) as b:
        await b.device_put(SPACE, "b", {"name": "B"})
    theirs = await setup.create(owner="b", program="nope@v1")
    setup.missing["chats"] = frozenset({"c_x"})
    setup.clock.advance(5.0)  # the elector's next heartbeat round sees b live
    async with asyncio.timeout(5):
        await setup.clock.wait_for_sleepers(ELECTOR)
    assert setup.elector.live == {"a", "b"} and setup.elector.may_fire()

    assert await setup.pass_() == 4
    assert await setup.stamp_of(pinned) == ("owner_offline", "pinned to ghost, which is not live")
    unpublished = "program 'nope@v1' is not published"
    assert await setup.stamp_of(unknown) == ("unknown_program", unpublished)
    assert await setup.stamp_of(chat) == ("source_not_found", "chat c_x does not exist")
    bad = setup.known.records[TriggerId("trg_bad")]
    assert isinstance(bad, Salvaged)
    assert await setup.stamp_of("trg_bad") == ("invalid_spec", bad.error)
    assert "not a cron" in bad.error
    assert await setup.stamp_of(healthy) == ("", "")
    assert await setup.stamp_of(theirs) == ("", "")  # b is live: b stamps its own records

    seq = await setup.seq()
    assert await setup.pass_() == 0
    assert await setup.changes_since(seq) == []


async def test_a_pass_on_records_the_feed_has_not_updated_sends_nothing_again(
    setup: Setup,
) -> None:
    await setup.create(program="nope@v1")
    assert await setup.pass_() == 1
    assert await setup.health.run_pass() == 0  # same stale view: the stamp was sent already
    assert setup.health.status().stamped == 1


async def test_stamps_clear_when_the_cause_goes(setup: Setup) -> None:
    pinned = await setup.create(owner="ghost")
    unknown = await setup.create(program="nope@v1")
    chat = await setup.create(kind="event", spec={"dataset": "chat_messages", "objectId": "c_x"})
    setup.write_raw(BAD)
    setup.missing["chats"] = frozenset({"c_x"})
    assert await setup.pass_() == 4
    last_run = rollup.to_dict(rollup.Rollup(runs=1, ok=1, last_status="ok", last_run_at=START))
    await setup.admin.trigger_status(SPACE, unknown, {"rollup": last_run})

    await setup.admin.trigger_patch(SPACE, pinned, {"owner": ""})
    await setup.admin.program_put(SPACE, "nope@v1", {"source": "def main(args):\n    return {}\n"})
    setup.missing["chats"] = frozenset()
    setup.write_raw({**BAD, "spec": {"expr": "*/5 * * * *"}})
    assert await setup.pass_() == 4
    assert await setup.stamp_of(pinned) == ("", "")
    assert await setup.stamp_of(unknown) == ("ok", "")  # back to its last run's status
    assert await setup.stamp_of(chat) == ("", "")
    assert await setup.stamp_of("trg_bad") == ("", "")
    assert await setup.pass_() == 0


async def test_an_open_breaker_is_stamped_with_until_when(setup: Setup) -> None:
    tid = await setup.create()
    until = START + timedelta(minutes=5)
    state = breaker.BreakerState(
        phase=breaker.Phase.OPEN, failures=3, trips=1, opened_at=START, open_until=until
    )
    await setup.admin.trigger_status(SPACE, tid, {"breaker": breaker.to_dict(state)})
    assert await setup.pass_() == 1
    assert await setup.stamp_of(tid) == ("breaker_open", "until 2026-12-01T09:05:00.000Z")


async def test_kick_runs_a_pass_without_waiting_for_the_interval(setup: Setup) -> None:
    task = asyncio.create_task(setup.health.run())
    try:
        async with asyncio.timeout(5):
            await setup.clock.wait_for_sleepers(ELECTOR + 1)  # the elector and the pass idle
        assert setup.health.passes == 1
        tid = await setup.create(program="nope@v1")
        await setup.known.refresh()
        setup.health.kick()
        await eventually(lambda: setup.health.passes >= 2)
        assert (await setup.stamp_of(tid))[0] == "unknown_program"
        assert setup.clock.monotonic() == 0.0  # no time passed: the kick did it
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_pass_that_cannot_list_programs_stamps_nothing_and_the_loop_goes_on(
    setup: Setup,
) -> None:
    tid = await setup.create(program="nope@v1")
    await setup.known.refresh()
    async with SpaceClient(setup.url, "btd_wrong", clock=setup.clock) as stranger:
        seat = Seat(stranger, SPACE, PeerId("a"), setup.clock)
        health = HealthPass(
            seat,
            recorder=Recorder(seat),
            records=setup.known,
            elector=setup.elector,
            missing_chats=frozenset,
        )
        task = asyncio.create_task(health.run())
        try:
            async with asyncio.timeout(5):
                await setup.clock.wait_for_sleepers(ELECTOR + 1)
            assert "401" in (health.status().last_error or "") and health.passes == 0
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert await setup.stamp_of(tid) == ("", "")


async def test_a_fire_that_never_ran_is_overdue_until_a_run_comes(setup: Setup) -> None:
    tid = await setup.create()
    await setup.pass_()  # this device stamps the record from here on
    await setup.elapse(240)
    due = START + timedelta(minutes=1)  # stamped while this device held; no run came since
    await setup.admin.trigger_status(SPACE, tid, {"nextFireAt": iso(due)})
    setup.armed[TriggerId(tid)] = START + timedelta(minutes=5)
    assert await setup.pass_() == 1
    status, detail = await setup.stamp_of(tid)
    assert status == "overdue" and detail.startswith("due 2026-12-01T09:01:00")
    record = await setup.admin.trigger_get(SPACE, tid)
    assert record["nextFireAt"] == iso(due)  # not moved on: that would hide the missed fire

    started = due + timedelta(seconds=1)  # the late run's stamps, as firing writes them
    ran = rollup.Rollup(runs=1, ok=1, last_status="ok", last_run_at=started)
    stamps = {"lastRunAt": iso(started), "rollup": rollup.to_dict(ran)}
    await setup.admin.trigger_status(SPACE, tid, stamps)
    await setup.pass_()
    assert await setup.stamp_of(tid) == ("ok", "")
    record = await setup.admin.trigger_get(SPACE, tid)
    assert record["nextFireAt"] == iso(START + timedelta(minutes=5))


async def test_a_next_fire_that_came_due_before_the_takeover_is_recomputed_at_once(
    setup: Setup,
) -> None:
    """The previous holder's `nextFireAt` (due before this device took the lease, its
    fire claimed and lost with that holder) is not this device's fire to wait for: its
    first pass writes the armed next fire, and shows no `overdue` for the old one."""
    tid = await setup.create()
    due = START - timedelta(minutes=2)
    await setup.admin.trigger_status(SPACE, tid, {"nextFireAt": iso(due)})
    setup.armed[TriggerId(tid)] = START + timedelta(minutes=5)
    assert await setup.pass_() == 1
    record = await setup.admin.trigger_get(SPACE, tid)
    assert record["nextFireAt"] == iso(START + timedelta(minutes=5))
    assert await setup.stamp_of(tid) == ("", "")


async def test_a_first_next_fire_beyond_the_horizon_is_not_written_until_it_nears(
    setup: Setup,
) -> None:
    tid = await setup.create()
    setup.armed[TriggerId(tid)] = START + timedelta(days=40)  # a yearly job: no write yet
    await setup.pass_()
    assert (await setup.admin.trigger_get(SPACE, tid)).get("nextFireAt") is None
    setup.armed[TriggerId(tid)] = START + timedelta(hours=3)
    await setup.pass_()
    record = await setup.admin.trigger_get(SPACE, tid)
    assert record["nextFireAt"] == iso(START + timedelta(hours=3))


async def test_a_pass_judges_what_was_touched_and_nothing_else(setup: Setup) -> None:
    touched = Touched()
    health = setup.judging(touched)
    tid = await setup.create()
    await setup.create()
    await setup.known.refresh()
    assert await health.run_pass() == 0 and health.judged == 2  # the first pass: everything
    setup.write_raw({"id": tid, "program": "nope@v1"})  # unseen: nobody touched it
    await setup.known.refresh()
    assert await health.run_pass() == 0 and health.judged == 2 and health.passes == 2
    touched.add(TriggerId(tid))  # the reconciler saw the change
    assert await health.run_pass() == 1 and health.judged == 3
    assert await setup.stamp_of(tid) == ("unknown_program", "program 'nope@v1' is not published")
    await setup.admin.program_put(SPACE, "nope@v1", {"source": "def main(args):\n    return {}\n"})
    await setup.known.refresh()  # the stamp came back (untouched: the programs move it all)
    assert await health.run_pass() == 1 and health.judged == 5  # the programs changed: all
    assert await setup.stamp_of(tid) == ("", "")


async def test_a_stamped_fire_that_comes_due_is_judged_at_its_turn(setup: Setup) -> None:
    touched = Touched()
    health = setup.judging(touched)
    tid = await setup.create()
    due = START + timedelta(seconds=10)
    await setup.admin.trigger_status(SPACE, tid, {"nextFireAt": iso(due)})
    setup.armed[TriggerId(tid)] = due
    await setup.known.refresh()
    assert await health.run_pass() == 0 and health.judged == 1
    assert health._until_turn(30.0) == 10.0  # it sleeps until the fire comes due
    await setup.elapse(10.0)
    assert await health.run_pass() == 0 and health.judged == 2  # due, awaiting its run
    await setup.elapse(60.0)
    assert await health.run_pass() == 0 and health.judged == 2  # not overdue before the margin
    await setup.elapse(1.0)
    assert await health.run_pass() == 1 and health.judged == 3
    assert (await setup.stamp_of(tid))[0] == "overdue"
