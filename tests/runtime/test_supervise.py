"""Supervision: a part that dies is restarted (the lease given up meanwhile) or stops the device."""

import asyncio

import pytest

from core.clock import FakeClock
from runtime.supervise import PartFailed, Supervisor


class Events:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def down(self, name: str) -> None:
        self.seen.append(f"down {name}")

    def up(self, name: str) -> None:
        self.seen.append(f"up {name}")


async def test_a_part_that_dies_is_restarted_and_the_others_run_on():
    clock, events = FakeClock(), Events()
    calls = {"flaky": 0}
    steady = asyncio.Event()

    async def flaky() -> None:
        calls["flaky"] += 1
        if calls["flaky"] < 3:
            raise RuntimeError(f"boom {calls['flaky']}")
        await asyncio.Event().wait()

    async def other() -> None:
        steady.set()
        await asyncio.Event().wait()

    sup = Supervisor(clock, on_down=events.down, on_up=events.up)
    task = asyncio.create_task(sup.run({"flaky": flaky, "other": other}))
    async with asyncio.timeout(5):
        while calls["flaky"] < 3:
            await clock.wait_for_sleepers(1)
            clock.advance_to_next()
            await asyncio.sleep(0)
    assert events.seen == ["down flaky", "up flaky", "down flaky", "up flaky"]
    assert sup.restarts == {"flaky": 2} and steady.is_set()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_part_that_keeps_dying_stops_the_supervisor_with_one_line():
    clock, events = FakeClock(), Events()
    other_cancelled = asyncio.Event()

    async def broken() -> None:
        raise ValueError("bad record")

    async def other() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            other_cancelled.set()

    sup = Supervisor(clock, on_down=events.down, on_up=events.up, max_restarts=3, within=60)
    task = asyncio.create_task(sup.run({"ticker": broken, "other": other}))
    async with asyncio.timeout(5):
        while not task.done():
            if clock.sleepers:
                clock.advance_to_next()
            await asyncio.sleep(0)
    with pytest.raises(PartFailed) as failed:
        task.result()
    assert str(failed.value) == "device part ticker died 3 times: ValueError: bad record"
    assert "\n" not in str(failed.value) and other_cancelled.is_set()
    assert events.seen.count("down ticker") == 2


async def test_a_part_that_returns_is_a_death_too():
    clock, events = FakeClock(), Events()

    async def quits() -> None:
        return

    sup = Supervisor(clock, on_down=events.down, on_up=events.up, max_restarts=2)
    task = asyncio.create_task(sup.run({"health": quits}))
    async with asyncio.timeout(5):
        while not task.done():
            if clock.sleepers:
                clock.advance_to_next()
            await asyncio.sleep(0)
    with pytest.raises(PartFailed, match="device part health died 2 times: it returned"):
        task.result()
