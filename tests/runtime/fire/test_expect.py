"""The ticker tells `expect` how many fires the next slot brings, shortly before it, once.

Time is a `FakeClock`; the dispatcher and `expect` are recorders (the executor forks spares
for what `expect` hears: tests/programs/test_spares.py).
"""

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from core.clock import FakeClock
from runtime.fire.cursors import arm
from runtime.fire.dispatch import FireRequest
from runtime.fire.nextfires import FireHeap
from runtime.fire.ticker import EXPECT_AHEAD, Ticker
from triggers.records import CronTrigger, load
from triggers.registry import Armed, Diff
from triggers.registry import arm as armed

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def cron(expr: str, tid: str) -> Armed:
    raw: dict[str, Any] = {"id": tid, "kind": "cron", "program": "p@v1", "spec": {"expr": expr}}
    record = load(raw)
    assert isinstance(record, CronTrigger), record
    return armed(record)


class Dispatched:
    def __init__(self) -> None:
        self.fires: list[FireRequest] = []

    async def fire(self, *requests: FireRequest) -> None:
        self.fires.extend(requests)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
async def told(clock: FakeClock) -> AsyncIterator[tuple[Ticker, list[int], Dispatched]]:
    heard: list[int] = []
    dispatched = Dispatched()
    ticker = Ticker(dispatched, clock=clock, max_sleep=300, expect=heard.append)
    every = [cron("* * * * *", f"trg_m{i}") for i in range(5)]  # 09:01, 09:02, …
    later = [cron("5 9 * * *", f"trg_d{i}") for i in range(3)]  # 09:05
    ticker.apply(Diff(add=(*every, *later)), clock.wall())
    task = asyncio.create_task(ticker.run())
    async with asyncio.timeout(5):
        await clock.wait_for_sleepers(1)
    yield ticker, heard, dispatched
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def until_slept(clock: FakeClock, seconds: float) -> None:
    """Advance by `seconds`, then wait until the ticker naps again."""
    naps = len(clock.slept)
    clock.advance(seconds)
    async with asyncio.timeout(5):
        while len(clock.slept) <= naps or clock.sleepers == 0:
            await asyncio.sleep(0)


async def test_expect_hears_the_next_slots_fires_shortly_before_it_once(
    told: tuple[Ticker, list[int], Dispatched], clock: FakeClock
) -> None:
    ticker, heard, dispatched = told
    assert heard == []  # 60 s ahead: nothing told yet
    assert clock.slept[-1] == pytest.approx(60 - EXPECT_AHEAD)  # woken to tell it
    await until_slept(clock, 60 - EXPECT_AHEAD)
    assert heard == [5]  # the five of 09:01, not the three of 09:05
    assert dispatched.fires == []
    ticker.apply(Diff(), clock.wall())  # a wake that is not a new slot tells nothing
    await until_slept(clock, 0)
    assert heard == [5]
    while not dispatched.fires:
        await until_slept(clock, clock.slept[-1])
    assert len(dispatched.fires) == 5 and heard == [5]
    while len(heard) < 2:  # 09:02, told two seconds ahead
        await until_slept(clock, clock.slept[-1])
    assert clock.wall() == T0 + timedelta(minutes=2) - timedelta(seconds=EXPECT_AHEAD)
    assert heard == [5, 5]


async def test_a_ticker_without_expect_wakes_only_for_fires(clock: FakeClock) -> None:
    ticker = Ticker(Dispatched(), clock=clock, max_sleep=300)
    ticker.apply(Diff(add=(cron("* * * * *", "trg_m"),)), clock.wall())
    task = asyncio.create_task(ticker.run())
    async with asyncio.timeout(5):
        await clock.wait_for_sleepers(1)
    assert clock.slept[-1] == pytest.approx(60 - ticker_lead(ticker))
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def ticker_lead(ticker: Ticker) -> float:
    return ticker._lead.total_seconds()


def test_count_until_counts_current_entries_up_to_an_instant_and_a_limit() -> None:
    entries = {}
    heap = FireHeap(entries)
    for i in range(40):
        record = cron("* * * * *" if i < 30 else "5 9 * * *", f"trg_{i}").record
        entry = arm(record, T0, None, T0)
        entries[record.id] = entry
        heap.push(entry)
    at = T0 + timedelta(minutes=1)
    assert heap.count_until(at, 100) == 30
    assert heap.count_until(at + timedelta(minutes=4), 100) == 40
    assert heap.count_until(at, 7) == 7
    assert heap.count_until(at - timedelta(seconds=1), 100) == 0
    moved = entries["trg_0"]
    moved.next_at = T0 + timedelta(hours=1)  # its item goes stale; the new one is later
    heap.push(moved)
    assert heap.count_until(at, 100) == 29
