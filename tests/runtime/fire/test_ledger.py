# ruff: noqa: F811  (pytest fixtures imported from firing_world are parameters here)
"""The owner's ledger (runtime.fire.ledger, runtime.fire.handover) on a real space.

A pinned fire whose claim finds the space away is claimed in the ledger, on disk before
its run starts, and runs. A device that stops mid-run (its run never recorded) finds the
claim at its next start: it does not run the fire again, and hands the claim over with a
`crashed` record. A key the space has from another claim is answered `already_claimed`:
the local run is kept under that word and never posted (no second record of the key).
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from faultproxy import FaultProxy
from firing_world import (  # noqa: F401  (the fixtures are used by name)
    GATED,
    OK,
    PEER,
    SPACE,
    World,
    executor,
    make_firing,
    world,
)
from waiting import eventually

from core.vocab import RunReason, RunStatus
from core.wire import FireIn, RunIn
from programs.executor import Executor
from runtime.client.api import SpaceClient
from runtime.fire.handover import HandOver
from runtime.fire.ledger import DONE, REFUSED, Ledger
from triggers import schedule


async def test_a_device_stopped_mid_run_does_not_run_the_fire_again(
    world: World, executor: Executor, tmp_path: Path
) -> None:
    path = tmp_path / "ledger.sqlite"
    port = int(world.url.rsplit(":", 1)[1])
    token = (await world.admin.token_device({"peer": PEER, "space": SPACE}))["token"]
    async with FaultProxy(port) as proxy, SpaceClient(proxy.url, token) as device:
        w = World(world.url, world.admin, device, world.chat)
        await w.publish("gated@v1", GATED)
        gate = tmp_path / "gate"
        record = await w.trigger("gated@v1", args={"gate": str(gate)})
        soon = datetime.now(UTC).replace(microsecond=0)  # slots after the record's activeSince
        slot = schedule.fire_key_cron(soon + timedelta(seconds=3))
        ledger = Ledger(path, SPACE, PEER, w.clock)
        firing = make_firing(w, executor, handover=HandOver(w.seat(), ledger))
        gate.touch()  # a first fire while the space is there: the program is on the device
        await w.fire(w.request(record, schedule.fire_key_cron(soon + timedelta(seconds=2))))
        gate.unlink()  # the next run blocks until the device stops
        proxy.refusing = True  # the space is away as the fire is claimed
        await firing.fire(w.request(record, slot))
        await eventually(lambda: _retried_until(ledger.holds(record.id, slot), w))
        await w.until_running(record)
        # on disk before the run started: another connection reads it, still run-less
        with sqlite3.connect(path) as other:
            rows = other.execute("SELECT key, state, run FROM claims").fetchall()
        assert rows == [(slot, "held", None)]
        await firing.close()  # the device stops mid-run: its run is never recorded
        ledger.close()
        proxy.refusing = False

    again = Ledger(path, SPACE, PEER, world.clock)  # the device starts again
    assert again.crashed == 1
    handover = HandOver(world.seat(), again)
    firing = make_firing(world, executor, handover=handover)
    try:
        await world.fire(world.request(record, slot))  # its slot, fired again
        assert firing.counts == {"already_claimed": 1}
        handover.kick()
        await eventually(lambda: again.waiting() == 0)
        [_, run] = await world.runs(record)
        assert (run["key"], run["status"], run["reason"]) == (
            slot,
            RunStatus.CRASHED,
            RunReason.DEVICE_STOPPED,
        )
        fires = (await world.admin.fires(SPACE, trigger=record.id))["fires"]
        assert [(f["key"], f["peer"]) for f in fires][1:] == [(slot, PEER)]
        assert set(again.outcomes().values()) == {(DONE, "")}
    finally:
        await firing.close()
        again.close()


async def test_a_key_the_space_has_from_another_claim_is_kept_as_already_claimed(
    world: World, tmp_path: Path
) -> None:
    await world.publish("ok@v1", OK)
    record = await world.trigger("ok@v1")
    slot = schedule.fire_key_cron(datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2))
    other = FireIn(triggerId=record.id, key=slot, term=0, peer=PEER, claimId="clm_other")
    [taken] = (await world.device.fires_claim_list(SPACE, [other])).claims
    assert taken.status == 201

    ledger = Ledger(tmp_path / "ledger.sqlite", SPACE, PEER, world.clock)
    handover = HandOver(world.seat(), ledger)
    mine = FireIn(triggerId=record.id, key=slot, term=0, peer=PEER, claimId="clm_mine")
    assert ledger.claim(mine, world.request(record, slot), "run_mine")
    assert not ledger.claim(mine, world.request(record, slot), "run_twice")  # keyed
    assert ledger.kept(_ran("run_mine", record.id, slot, world))
    handover.kick()
    try:
        await eventually(lambda: ledger.waiting() == 0)
        assert ledger.outcomes() == {"run_mine": (REFUSED, "already_claimed")}
        assert await world.runs(record) == []  # the key's record is the other claim's to write
    finally:
        await handover.close()
        ledger.close()


def _ran(run_id: str, tid: str, key: str, w: World) -> RunIn:
    now = w.clock.wall()
    fields: dict[str, Any] = {"program": "ok@v1", "peer": PEER, "term": 0, "key": key}
    return RunIn(
        runId=run_id, triggerId=tid, startedAt=now, status=RunStatus.OK, dueAt=now, **fields
    )


def _retried_until(done: bool, w: World) -> bool:
    """The claim's own retries (0.5 s, 1 s) passed on the fake clock until `done`."""
    if not done and w.clock.sleepers:
        w.clock.advance_to_next()
    return done
