"""A run's times tell the truth (SPEC "Runs"): `startedAt` is when main() was entered, read
in the run process; `phases` split `lateMs`; a fire that did not run started when that was
decided. The runs here fire on the machine's own clock, so the program's reading of it can
be held against the record's."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from firing_world import GATED, World, instant, make_firing
from waiting import eventually

from core.clock import SystemClock
from programs.executor import Executor

SLOW_TO_MAIN = """
import time

time.sleep(0.08)  # the module's own work: before main(), so the run's spawn time


def main(args):
    return {"ok": True, "at": time.time()}
"""
PHASES = {"wakeMs", "claimMs", "queueMs", "spawnMs"}


def program_clock(run: dict[str, Any]) -> datetime:
    return datetime.fromtimestamp(run["result"]["at"], tz=instant(run["startedAt"]).tzinfo)


async def test_started_at_is_when_main_was_entered_and_the_phases_sum_to_the_lateness(
    world: World, executor: Executor
):
    world.clock = SystemClock()  # type: ignore[assignment]  # the program reads the real one
    firing = make_firing(world, executor)
    try:
        await world.publish("slow@v1", SLOW_TO_MAIN)
        record = await world.trigger("slow@v1")
        due = world.clock.wall() - timedelta(milliseconds=200)
        await world.fire(world.request(record, "k", due_at=due))
    finally:
        await firing.close()
    [run] = await world.runs(record)
    assert run["status"] == "ok", run
    error_ms = (instant(run["startedAt"]) - program_clock(run)) / timedelta(milliseconds=1)
    assert abs(error_ms) < 5, run  # the hand-over was ≥ 80 ms before main()
    assert instant(run["dueAt"]) == due.replace(microsecond=due.microsecond // 1000 * 1000)
    phases = run["phases"]
    assert phases.keys() == PHASES and run["lateMs"] >= 280
    assert abs(sum(phases.values()) - run["lateMs"]) < 1, run
    assert phases["wakeMs"] >= 199 and phases["spawnMs"] >= 79, phases


async def test_a_skipped_fire_started_when_it_was_decided(w: World, tmp_path: Path):
    gate = tmp_path / "gate"
    await w.publish("slow@v1", GATED)
    record = await w.trigger("slow@v1", args={"gate": str(gate)})
    assert w.firing is not None
    await w.firing.fire(w.request(record, "a"))
    await w.until_running(record)
    decided = w.clock.wall()
    await w.firing.fire(w.request(record, "b", due_at=decided - timedelta(seconds=1.5)))
    firing = w.firing
    await eventually(lambda: firing.counts.get("skipped") == 1)
    gate.touch()
    await w.fire()
    skipped = {r["key"]: r for r in await w.runs(record)}["b"]
    assert (skipped["status"], skipped["reason"]) == ("skipped", "overlap")
    assert instant(skipped["startedAt"]) == decided and skipped["lateMs"] == 1500.0
    assert skipped["phases"] == {"wakeMs": 1500.0, "claimMs": 0.0, "queueMs": 0.0, "spawnMs": 0.0}


async def test_a_fire_claimed_ahead_wakes_at_its_slot(w: World):
    await w.publish("tick@v1", "def main(args):\n    return {'ok': True}\n")
    record = await w.trigger("tick@v1")
    assert w.firing is not None
    slot = w.clock.wall() + timedelta(seconds=0.05)
    await w.firing.fire(w.request(record, "soon", due_at=slot))
    await w.clock.wait_for_sleepers(1)
    w.clock.advance(0.3)  # the device reached the slot 250 ms late
    await w.fire()
    [run] = await w.runs(record)
    assert (run["status"], run["lateMs"]) == ("ok", 250.0)
    assert run["phases"] == {"wakeMs": 250.0, "claimMs": 0.0, "queueMs": 0.0, "spawnMs": 0.0}
