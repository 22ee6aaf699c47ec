"""The Clock: the system one reads aware UTC; the fake one moves only when told."""

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from core.clock import Clock, FakeClock, SystemClock, sleep_or_wake

START = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)


def test_system_clock_is_aware_utc_and_monotonic():
    clock: Clock = SystemClock()
    assert clock.wall().tzinfo is UTC
    first = clock.monotonic()
    assert clock.monotonic() >= first


async def test_system_clock_sleep_zero_returns():
    async with asyncio.timeout(1):
        await SystemClock().sleep(0)
        await SystemClock().sleep(-1)


def test_fake_clock_moves_only_on_advance():
    clock = FakeClock(START)
    assert clock.wall() == START
    assert clock.monotonic() == 0
    clock.advance(90.5)
    assert clock.wall() == START + timedelta(seconds=90.5)
    assert clock.monotonic() == 90.5


def test_fake_clock_refuses_naive_start_and_going_back():
    with pytest.raises(ValueError, match="start"):
        FakeClock(datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="seconds"):
        FakeClock().advance(-1)


async def test_advance_wakes_exactly_the_due_sleepers_in_deadline_order():
    clock = FakeClock(START)
    woke: list[str] = []

    async def nap(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(name)

    tasks = [asyncio.create_task(nap(n, s)) for n, s in [("late", 10), ("soon", 2), ("mid", 5)]]
    async with asyncio.timeout(5):
        await clock.wait_for_sleepers(3)
        clock.advance(5)
        await asyncio.gather(tasks[1], tasks[2])
    assert woke == ["soon", "mid"]
    assert not tasks[0].done()
    assert clock.sleepers == 1
    assert clock.advance_to_next() == 5
    async with asyncio.timeout(5):
        await tasks[0]
    assert woke == ["soon", "mid", "late"]
    assert clock.slept == [10, 2, 5]


async def test_a_cancelled_sleeper_is_forgotten():
    clock = FakeClock(START)
    task = asyncio.create_task(clock.sleep(3))
    async with asyncio.timeout(5):
        await clock.wait_for_sleepers(1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert clock.sleepers == 0
    assert clock.advance_to_next() == 0


async def test_zero_sleep_yields_without_waiting_for_advance():
    clock = FakeClock(START)
    async with asyncio.timeout(5):
        await clock.sleep(0)
    assert clock.monotonic() == 0


async def test_sleep_or_wake_ends_at_the_deadline_or_the_wake_whichever_comes_first():
    clock = FakeClock(START)
    wake = asyncio.Event()
    napping = asyncio.create_task(sleep_or_wake(clock, 30, wake))
    async with asyncio.timeout(5):
        await clock.wait_for_sleepers(1)
        wake.set()
        assert await napping is True
    assert clock.sleepers == 0 and wake.is_set()  # the caller clears it
    wake.clear()
    napping = asyncio.create_task(sleep_or_wake(clock, 30, wake))
    async with asyncio.timeout(5):
        await clock.wait_for_sleepers(1)
        clock.advance(30)
        assert await napping is False
    assert clock.slept == [30, 30]
