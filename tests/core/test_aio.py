"""The async kit on a FakeClock: tasks guarded and cancelled, backoff and retry, the capped
sleep, the sleep detector, and the device's event bus."""

import asyncio
import logging

import pytest

from core.aio import MAX_SLEEP, Backoff, SleepDetector, TaskSet, retry, sleep_until, within
from core.clock import FakeClock
from runtime.events import Bus, RoleChanged, Slept

# --- TaskSet ---------------------------------------------------------------------------------


async def test_a_failing_task_is_logged_and_the_others_go_on(caplog):
    tasks, done = TaskSet("work"), asyncio.Event()

    async def boom() -> None:
        raise RuntimeError("boom")

    async def fine() -> None:
        await asyncio.sleep(0)
        done.set()

    with caplog.at_level(logging.ERROR, logger="core.aio"):
        tasks.spawn(boom(), name="boom")
        tasks.spawn(fine(), name="fine")
        async with asyncio.timeout(5):
            await tasks.wait()
    assert done.is_set() and len(tasks) == 0
    assert "work boom failed" in caplog.text
    await tasks.close()  # not fatal: nothing re-raised


async def test_close_cancels_what_runs_and_refuses_new_work():
    tasks, cancelled = TaskSet(), asyncio.Event()

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    task = tasks.spawn(forever())
    await asyncio.sleep(0)
    assert task in tasks
    await tasks.close()
    assert cancelled.is_set() and task.cancelled()
    work = forever()
    with pytest.raises(RuntimeError, match="after close"):
        tasks.spawn(work)


async def test_work_cancelled_before_it_began_leaves_no_unawaited_coroutine():
    tasks, began = TaskSet(), []

    async def work() -> None:
        began.append(True)

    tasks.spawn(work())
    await tasks.close()  # before the task's first step: `filterwarnings = error` would catch it
    assert began == []


async def test_a_fatal_failure_is_raised_by_close():
    tasks = TaskSet()

    async def boom() -> None:
        raise ValueError("bad")

    tasks.spawn(boom(), fatal=True)
    await tasks.wait()
    with pytest.raises(ValueError, match="bad"):
        await tasks.close()


# --- Backoff and retry -----------------------------------------------------------------------


def test_backoff_doubles_to_its_cap_and_jitters_below_it():
    plain = Backoff(base=0.5, cap=4.0, jitter=False)
    assert [plain.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    jittered = Backoff(base=0.5, cap=4.0)
    assert jittered.delay(3, draw=0.5) == 1.0
    assert jittered.delay(1, draw=0.0, retry_after=9.0) == 4.0  # Retry-After, capped
    with pytest.raises(ValueError):
        Backoff(base=2.0, cap=1.0)


def test_a_streak_lengthens_on_failure_and_resets_on_success():
    streak = Backoff(base=1.0, cap=8.0, jitter=False).streak()
    assert [streak.failed() for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    streak.reset()
    assert streak.failures == 0 and streak.failed() == 1.0


async def test_retry_sleeps_through_the_clock_until_work_succeeds():
    clock, calls, heard = FakeClock(), [], []

    async def flaky() -> str:
        calls.append(clock.monotonic())
        if len(calls) < 4:
            raise ConnectionError("down")
        return "up"

    backoff = Backoff(base=1.0, cap=2.0, jitter=False)
    trying = asyncio.create_task(
        retry(flaky, clock=clock, backoff=backoff, on_failure=lambda e, d: heard.append(d))
    )
    async with asyncio.timeout(5):
        while len(heard) < 3:
            await clock.wait_for_sleepers()
            clock.advance_to_next()
        assert await trying == "up"
    assert calls == [0.0, 1.0, 3.0, 5.0]
    assert heard == [1.0, 2.0, 2.0]


async def test_retry_gives_up_after_its_attempts_or_on_a_permanent_error():
    clock, calls = FakeClock(), []

    async def broken() -> None:
        calls.append(1)
        raise KeyError("gone")

    with pytest.raises(KeyError):
        await retry(broken, clock=clock, attempts=1)
    with pytest.raises(KeyError):
        await retry(broken, clock=clock, retry_if=lambda exc: not isinstance(exc, KeyError))
    assert calls == [1, 1] and clock.slept == []


# --- sleep_until -----------------------------------------------------------------------------


async def test_sleep_until_a_far_deadline_sleeps_in_capped_steps():
    clock = FakeClock()
    sleeper = asyncio.create_task(sleep_until(clock, 75.0))
    async with asyncio.timeout(5):
        while clock.monotonic() < 75.0:
            await clock.wait_for_sleepers()
            clock.advance_to_next()
        assert await sleeper is False
    assert clock.slept == [MAX_SLEEP, MAX_SLEEP, 15.0]
    assert clock.monotonic() == 75.0


async def test_sleep_until_returns_true_when_woken_and_at_once_when_due():
    clock, wake = FakeClock(), asyncio.Event()
    sleeper = asyncio.create_task(sleep_until(clock, 10.0, wake))
    async with asyncio.timeout(5):
        await clock.wait_for_sleepers()
        wake.set()
        assert await sleeper is True
    assert wake.is_set()  # left set for the caller to clear
    wake.clear()
    assert await sleep_until(clock, -1.0, wake) is False
    assert clock.slept == [10.0]


async def test_within_times_out_on_the_clock_and_cancels_the_work():
    clock, never = FakeClock(), asyncio.Event()
    waiting = asyncio.create_task(within(clock, 5.0, never.wait(), "the reply"))
    async with asyncio.timeout(5):
        await clock.wait_for_sleepers()
        clock.advance(5.0)
        with pytest.raises(TimeoutError, match="the reply timed out after 5 s"):
            await waiting
    assert clock.sleepers == 0

    async def quick() -> int:
        return 7

    assert await within(clock, 5.0, quick()) == 7


# --- SleepDetector ---------------------------------------------------------------------------


def test_the_detector_sees_a_wall_jump_not_the_passing_of_time():
    clock = FakeClock()
    detector = SleepDetector(clock, threshold=3.0)
    assert detector.check() is None  # the first check only anchors
    clock.advance(60)
    assert detector.check() is None
    clock.jump_wall(2.5)
    assert detector.check() is None  # NTP-sized steps are not a sleep
    clock.jump_wall(3600)
    assert detector.check() == 3600
    assert detector.check() is None  # once per jump
    clock.jump_wall(-30)
    assert detector.check() == -30
    with pytest.raises(ValueError):
        SleepDetector(clock, threshold=0)


# --- the event bus ---------------------------------------------------------------------------


async def test_the_bus_delivers_in_order_survives_a_failing_handler_and_wakes_waiters():
    bus, heard = Bus(), []

    def broken(event: RoleChanged) -> None:
        raise RuntimeError("handler bug")

    bus.subscribe(RoleChanged, lambda e: heard.append(("first", e.active)))
    bus.subscribe(RoleChanged, broken)
    stop = bus.subscribe(RoleChanged, lambda e: heard.append(("last", e.active)))
    waiter = asyncio.create_task(bus.next(RoleChanged, lambda e: e.term == 2))
    await asyncio.sleep(0)
    bus.publish(RoleChanged(active=True, term=1))
    bus.publish(Slept(jump=5.0, at=FakeClock().wall()))  # another type: not for these
    stop()
    bus.publish(RoleChanged(active=False, term=2))
    async with asyncio.timeout(5):
        assert await waiter == RoleChanged(active=False, term=2)
    assert heard == [("first", True), ("last", True), ("first", False)]
