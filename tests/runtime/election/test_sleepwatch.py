"""SleepWatch on a fake clock: each suspend or wall jump is published once, not normal ticks."""

import asyncio

import msgspec
import pytest

from core.clock import FakeClock
from runtime.election.sleepwatch import SleepWatch
from runtime.events import Slept


async def tick(clock: FakeClock, seconds: float = 1.0) -> None:
    """Let one period pass and wait until the watch is asleep again."""
    clock.advance(seconds)
    async with asyncio.timeout(5):
        await clock.wait_for_sleepers(1)


@pytest.fixture
async def watched():
    clock = FakeClock()
    watch = SleepWatch(clock, threshold=3.0, period=1.0)
    heard: list[float] = []
    watch.bus.subscribe(Slept, lambda _: heard.append(clock.monotonic()))
    task = asyncio.create_task(watch.run())
    async with asyncio.timeout(5):
        await clock.wait_for_sleepers(1)
    yield clock, watch, heard
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_normal_ticks_call_nobody(watched) -> None:
    clock, watch, heard = watched
    for _ in range(20):
        await tick(clock)
    clock.jump_wall(2.5)  # within the threshold: NTP-sized steps are not a sleep
    await tick(clock)
    assert heard == [] and watch.detected == 0


async def test_a_suspend_is_heard_once(watched) -> None:
    clock, watch, heard = watched
    await tick(clock)
    clock.jump_wall(3600)  # the wall counted an hour of suspend, monotonic did not
    await tick(clock)
    for _ in range(5):
        await tick(clock)
    assert heard == [2.0]
    assert msgspec.to_builtins(watch.status()) == {"detected": 1, "lastJumpSeconds": 3600.0}


async def test_a_backward_step_and_a_second_sleep_are_each_heard(watched) -> None:
    clock, watch, heard = watched
    clock.jump_wall(-30)
    await tick(clock)
    await tick(clock)
    clock.jump_wall(120)
    await tick(clock)
    assert heard == [1.0, 3.0]
    assert watch.last_jump == 120.0


async def test_a_failing_listener_does_not_silence_the_others(watched) -> None:
    clock, watch, heard = watched

    def broken(_: Slept) -> None:
        raise RuntimeError("boom")

    watch.bus.subscribe(Slept, broken)
    late: list[bool] = []
    watch.bus.subscribe(Slept, lambda _: late.append(True))
    clock.jump_wall(10)
    await tick(clock)
    assert heard == [1.0] and late == [True]


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="threshold"):
        SleepWatch(FakeClock(), threshold=0)


def test_the_fake_clock_can_jump_its_wall_alone() -> None:
    clock = FakeClock()
    before = clock.wall()
    clock.jump_wall(90)
    assert (clock.wall() - before).total_seconds() == 90 and clock.monotonic() == 0


async def test_a_freeze_is_heard_once_like_a_sleep(watched) -> None:
    """SIGSTOP: both clocks move on while the device cannot look; the gap is the sign."""
    clock, watch, heard = watched
    await tick(clock)
    await tick(clock, 30.0)  # frozen for 30 s: the wall and monotonic clocks agree
    await tick(clock)
    await tick(clock)
    assert heard == [31.0] and watch.detected == 1
    assert watch.last_jump == pytest.approx(29.0)


async def test_a_watch_that_is_not_running_hears_no_freeze() -> None:
    clock = FakeClock()
    watch = SleepWatch(clock, threshold=3.0, period=1.0)
    clock.advance(60.0)  # an elector alone asks now and then: no period to judge by
    assert watch.check() is False
