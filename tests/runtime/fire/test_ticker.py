"""The ticker fires each cron slot and each once exactly once, from the wall clock, never stale.

Time is a `FakeClock`; the dispatcher is a recorder (the seam to the firing
pipeline). Entry math (`arm`, `take`, `restart`) is checked with explicit
instants; the loop (`run`) is checked by advancing the fake clock.
"""

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from core.clock import FakeClock
from runtime.fire import ticker as ticker_module
from runtime.fire.ahead import CLAIM_AHEAD
from runtime.fire.cursors import arm, restart, take
from runtime.fire.dispatch import FireRequest
from runtime.fire.ticker import Ticker
from triggers import schedule
from triggers.records import CronTrigger, OnceTrigger, load
from triggers.registry import Armed, Diff
from triggers.registry import arm as armed

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
S = timedelta(seconds=1)


def cron(
    expr: str = "* * * * *", *, id: str = "trg_c", owner: str = "", since: str = "", **spec: Any
) -> Armed:
    raw: dict[str, Any] = {"id": id, "kind": "cron", "program": "p@v1", "owner": owner}
    raw["spec"] = {"expr": expr, **spec}
    if since:
        raw["activeSince"] = since
    record = load(raw)
    assert isinstance(record, CronTrigger), record
    return armed(record)


def once(at: datetime, *, id: str = "trg_o", **spec: Any) -> Armed:
    record = load(
        {"id": id, "kind": "once", "program": "p@v1", "spec": {"at": at.isoformat(), **spec}}
    )
    assert isinstance(record, OnceTrigger), record
    return armed(record)


def edited(a: Armed, **fields: Any) -> Armed:
    raw = {"id": a.record.id, "kind": a.record.kind, "program": a.record.program}
    raw |= {"spec": {"expr": a.record.spec.expr}, **fields}  # type: ignore[union-attr]
    return armed(load(raw))  # type: ignore[arg-type]


def key(t: datetime) -> str:
    return schedule.fire_key_cron(t)


class Recorder:
    """The fake Dispatcher: remembers every request."""

    def __init__(self) -> None:
        self.fires: list[FireRequest] = []

    async def fire(self, *requests: FireRequest) -> None:
        self.fires.extend(requests)

    @property
    def keys(self) -> list[str]:
        return [f.key for f in self.fires]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


@pytest.fixture
def ticker(clock: FakeClock, rec: Recorder) -> Ticker:
    return Ticker(rec, clock=clock)


@pytest.fixture
async def running(ticker: Ticker, clock: FakeClock) -> AsyncIterator[Ticker]:
    task = asyncio.create_task(ticker.run())
    async with asyncio.timeout(5):
        await clock.wait_for_sleepers(1)
    yield ticker
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def advance(clock: FakeClock, seconds: float) -> None:
    """Move time; if that woke the ticker, wait until it has ticked and napped again."""
    clock.advance(seconds)
    async with asyncio.timeout(5):
        await clock.wait_for_sleepers(1)


async def applied(ticker: Ticker, clock: FakeClock, diff: Diff) -> None:
    """Apply `diff` to a running ticker and wait until it has ticked and napped again."""
    naps = len(clock.slept)
    ticker.apply(diff, clock.wall())
    await napped_after(clock, naps)


async def napped_after(clock: FakeClock, naps: int) -> None:
    """Wait until the ticker has started a nap beyond the first `naps`."""
    async with asyncio.timeout(5):
        while len(clock.slept) <= naps or clock.sleepers == 0:
            await asyncio.sleep(0)


# --- the loop ---------------------------------------------------------------------------


async def test_every_second_cron_fires_each_slot_once(running, clock, rec):
    await applied(running, clock, Diff(add=(cron("*/1 * * * * *"),)))
    for _ in range(10):
        await advance(clock, 1)
    slots = [T0 + i * S for i in range(1, 11)]
    assert rec.keys == [key(t) for t in slots]
    assert [f.due_at for f in rec.fires] == slots


async def test_minute_cron_fires_each_slot_once_with_sleeps_of_at_most_30s(running, clock, rec):
    clock.advance(5)  # armed at 09:00:05: the 09:00 slot is already past
    await applied(running, clock, Diff(add=(cron("* * * * *"),)))
    while clock.wall() < T0 + timedelta(minutes=5, seconds=1):
        clock.advance_to_next()
        await napped_after(clock, len(clock.slept))
    slots = [T0 + timedelta(minutes=m) for m in range(1, 6)]
    assert rec.keys == [key(t) for t in slots]
    assert all(0 < s <= 30 for s in clock.slept)


async def test_never_sleeps_more_than_30s_when_the_next_slot_is_hours_away(running, clock, rec):
    await applied(running, clock, Diff(add=(cron("0 18 * * *"),)))
    for _ in range(20):
        await advance(clock, 30)
    assert rec.fires == []
    assert clock.slept and max(clock.slept) == 30.0
    assert running.next_fires() == {"trg_c": T0.replace(hour=18)}


async def test_an_apply_wakes_the_ticker_without_time_moving(running, clock, rec):
    await applied(running, clock, Diff(add=(once(T0 - 10 * S),)))  # due, within grace
    assert [(f.key, f.due_at) for f in rec.fires] == [(key(T0 - 10 * S), T0 - 10 * S)]


@pytest.mark.parametrize(
    ("catchup", "expected"),
    [("none", []), ("latest", [T0, T0 + timedelta(hours=1)])],  # armed on the 09:00 slot
)
async def test_a_jump_of_an_hour_fires_nothing_stale_or_only_the_latest(
    running, clock, rec, catchup, expected
):
    await applied(running, clock, Diff(add=(cron("*/5 * * * *", catchup=catchup),)))
    await advance(clock, 3600 + 45)  # one wake after the suspend, 45 s past a slot
    naps = len(clock.slept)
    running.slept(clock.wall())
    await napped_after(clock, naps)
    assert [f.due_at for f in rec.fires] == expected
    await advance(clock, 5 * 60 - 45)  # the next live slot fires as usual
    assert [f.due_at for f in rec.fires] == [*expected, T0 + timedelta(hours=1, minutes=5)]


async def test_a_thousand_triggers_due_in_one_second_fire_in_one_wake(running, clock, rec):
    add = tuple(cron("0 10 * * *", id=f"trg_{i:04d}") for i in range(1000))
    await applied(running, clock, Diff(add=add))
    await advance(clock, 30)  # let the apply's wake settle into a nap
    clock.advance(3600 - 30 - 30)  # 09:59:30: the next nap ends on the slot
    await clock.wait_for_sleepers(1)
    naps = len(clock.slept)
    await advance(clock, 30)
    assert len(rec.fires) == 1000
    assert {f.key for f in rec.fires} == {key(T0.replace(hour=10))}
    assert len(clock.slept) == naps + 1  # one wake dispatched them all, then one nap


async def test_a_failing_dispatcher_does_not_stop_the_ticker(clock):
    class Flaky(Recorder):
        async def fire(self, *requests: FireRequest) -> None:
            await super().fire(*requests)
            raise RuntimeError("boom")

    flaky = Flaky()
    ticker = Ticker(flaky, clock=clock)
    ticker.apply(Diff(add=(cron("*/1 * * * * *"),)), clock.wall())
    for _ in range(3):
        clock.advance(1)
        await ticker.tick()
    assert len(flaky.fires) == 3


# --- apply: rearm, update, remove, pause ------------------------------------------------


async def test_rearm_recomputes_update_keeps_the_cursor_remove_disarms(ticker, clock, rec):
    clock.advance(10 * 60)  # 09:10
    hourly = cron("0 * * * *")
    ticker.apply(Diff(add=(hourly,)), clock.wall())
    assert ticker.next_fires() == {"trg_c": T0.replace(hour=10)}
    five = edited(hourly, spec={"expr": "*/5 * * * *"})
    ticker.apply(Diff(rearm=(five,)), clock.wall())
    assert ticker.next_fires() == {"trg_c": T0.replace(minute=15)}
    clock.advance(5 * 60)
    assert await ticker.tick() == 1
    ticker.apply(
        Diff(update=(edited(five, spec={"expr": "*/5 * * * *"}, args={"n": 2}),)), clock.wall()
    )
    assert await ticker.tick() == 0  # an args edit neither refires nor moves
    assert ticker.next_fires() == {"trg_c": T0.replace(minute=20)}
    ticker.apply(Diff(remove=("trg_c",)), clock.wall())
    clock.advance(10 * 60)
    assert await ticker.tick() == 0
    assert ticker.next_fires() == {}
    assert rec.keys == [key(T0.replace(minute=15))]


async def test_paused_fires_nothing_and_resume_replays_nothing(ticker, clock, rec):
    latest = cron("*/5 * * * *", catchup="latest")
    ticker.apply(Diff(add=(latest,)), clock.wall())
    ticker.apply(Diff(remove=("trg_c",)), clock.wall())  # paused
    clock.advance(20 * 60)
    assert await ticker.tick() == 0
    resumed_at = clock.wall() + 2 * S  # the resume write, stamped by the space
    clock.advance(3)
    resumed = edited(
        latest,
        spec={"expr": "*/5 * * * *", "catchup": "latest"},
        activeSince=resumed_at.isoformat(),
    )
    ticker.apply(Diff(add=(resumed,)), clock.wall())
    assert await ticker.tick() == 0  # the 09:20 slot passed while paused
    assert ticker.next_fires() == {"trg_c": T0.replace(minute=25)}
    assert rec.fires == []


# --- once -----------------------------------------------------------------------------


async def test_once_fires_once_at_its_instant(running, clock, rec):
    at = T0 + 90 * S
    await applied(running, clock, Diff(add=(once(at),)))
    await advance(clock, 30)
    await advance(clock, 30)
    await advance(clock, 30)
    await advance(clock, 30)
    assert [(f.key, f.due_at) for f in rec.fires] == [
        (schedule.fire_key_once(once(at).record.spec), at)
    ]
    assert running.next_fires() == {}


@pytest.mark.parametrize(
    ("late", "fires"), [(timedelta(minutes=59), 1), (timedelta(minutes=61), 0)]
)
async def test_once_first_armed_after_its_instant_fires_only_within_grace(
    ticker, clock, rec, late, fires
):
    ticker.apply(Diff(add=(once(T0 - late),)), clock.wall())
    assert await ticker.tick() == fires
    clock.advance(60)
    assert await ticker.tick() == 0


async def test_once_refires_only_when_at_moves(ticker, clock, rec):
    first = once(T0)
    ticker.apply(Diff(add=(first,)), clock.wall())
    assert await ticker.tick() == 1
    ticker.apply(Diff(rearm=(once(T0, graceSeconds=7200),)), clock.wall())
    assert await ticker.tick() == 0
    moved = once(T0 + 60 * S)
    ticker.apply(Diff(rearm=(moved,)), clock.wall())
    assert ticker.next_fires() == {"trg_o": T0 + 60 * S}
    clock.advance(60)
    assert await ticker.tick() == 1
    assert [f.due_at for f in rec.fires] == [T0, T0 + 60 * S]


# --- bridge window ---------------------------------------------------------------------


async def test_takeover_fires_every_slot_since_the_bridge_start_each_once(ticker, clock, rec):
    clock.advance(5)  # 09:00:05
    now = clock.wall()
    ticker.apply(Diff(add=(cron("*/10 * * * * *"),)), now)
    assert ticker.bridge(now - 60 * S) == 6
    assert await ticker.tick() == 6
    slots = [T0 - 50 * S + 10 * i * S for i in range(6)]  # 08:59:10 … 09:00:00
    assert rec.keys == [key(t) for t in slots]
    assert all(f.catchup for f in rec.fires)  # bridged: they run in turn, never crowd out
    clock.advance(5)
    assert await ticker.tick() == 1  # then live again: 09:00:10
    assert rec.keys[-1] == key(T0 + 10 * S)
    assert not rec.fires[-1].catchup


async def test_a_bridge_fills_up_to_the_cursor_and_leaves_the_rest_to_the_claims(
    ticker, clock, rec
):
    ticker.apply(Diff(add=(cron("*/10 * * * * *"),)), clock.wall())  # armed at 09:00:00
    clock.advance(25)
    assert await ticker.tick() == 2  # 09:00:10 and 09:00:20 taken live
    # A holder whose lease wavered kept this entry: the live two may have been dropped
    # as "not the active device", so the bridge offers them again (claims drop the
    # ones that ran), and never a slot beyond the cursor.
    assert ticker.bridge(T0 - 30 * S) == 5  # 08:59:40 … 09:00:20
    assert await ticker.tick() == 5
    assert rec.keys[2:] == [key(T0 + i * 10 * S) for i in range(-2, 3)]
    assert all(f.catchup for f in rec.fires[2:])


async def test_a_bridge_is_only_for_floating_entries_and_never_before_active_since(
    ticker, clock, rec
):
    now = clock.wall()
    pinned = cron("*/10 * * * * *", id="trg_p", owner="laptop")
    young = cron("*/10 * * * * *", id="trg_y", since=(T0 - 25 * S).isoformat())
    ticker.apply(Diff(add=(cron("*/10 * * * * *"), pinned, young)), now)
    assert ticker.bridge(now - 60 * S) == 6 + 3
    assert await ticker.tick() == 9
    by_id = {
        tid: [f.due_at for f in rec.fires if f.trigger.id == tid] for tid in ("trg_c", "trg_y")
    }
    assert by_id["trg_y"] == [T0 - 20 * S, T0 - 10 * S, T0]  # created at 08:59:35
    assert len(by_id["trg_c"]) == 6
    clock.advance(10)
    assert await ticker.tick() == 3  # all three live at 09:00:10; the pinned one bridged nothing
    assert sorted(f.trigger.id for f in rec.fires[9:]) == ["trg_c", "trg_p", "trg_y"]


async def test_nothing_before_active_since_fires_even_with_catchup_latest(ticker, clock, rec):
    created = (T0 - 90 * S).isoformat()  # 08:58:30: the 08:55 and 08:50 slots came before
    ticker.apply(Diff(add=(cron("*/5 * * * *", catchup="latest", since=created),)), T0)
    assert await ticker.tick() == 1
    assert rec.keys == [key(T0)]  # 09:00 is due now; nothing from before 08:58:30
    early = cron("*/5 * * * *", id="trg_e", catchup="latest", since=created)
    clock.advance(60)
    ticker.apply(Diff(add=(early,)), clock.wall())  # armed at 09:01: 09:00 missed, after since
    assert await ticker.tick() == 1 and rec.keys[-1] == key(T0)


async def test_a_slot_between_a_write_and_its_arming_fires_but_a_restart_replays_nothing(
    clock, rec
):
    ticker = Ticker(rec, clock=clock)  # up since 09:00:00
    clock.advance(10.5)
    created = (T0 + 9.2 * S).isoformat()  # the record was written 1.3 s before it is armed
    ticker.apply(Diff(add=(cron("* * * * * *", since=created),)), clock.wall())
    assert await ticker.tick() == 1 and rec.keys == [key(T0 + 10 * S)]
    restarted = Ticker(rec, clock=clock)  # a device that started just now
    old = (T0 - 60 * S).isoformat()
    restarted.apply(Diff(add=(cron("* * * * * *", id="trg_2", since=old),)), clock.wall())
    assert await restarted.tick() == 0  # nothing from before it was up
    clock.advance(1)
    assert await restarted.tick() == 1


async def test_a_late_wake_fires_every_slot_it_passed_within_the_tolerance(ticker, clock, rec):
    ticker.apply(Diff(add=(cron("* * * * * *"),)), clock.wall())
    clock.advance(5)  # the loop was blocked (or the process stopped) for 5 s, no sleep
    assert await ticker.tick() == 5
    assert [f.due_at for f in rec.fires] == [T0 + i * S for i in range(1, 6)]
    assert [f.catchup for f in rec.fires] == [True, True, True, True, False]
    clock.advance(100)  # beyond the 30 s live tolerance: only the last 30 s
    assert await ticker.tick() == 30
    assert rec.fires[-30].due_at == T0 + 76 * S


# --- entry math ------------------------------------------------------------------------


async def test_next_fires_lists_cron_and_pending_once_only(clock):
    ticker = Ticker(Recorder(), clock=clock)
    items = (cron("30 9 * * *"), once(T0 + 3600 * S), once(T0 - 7200 * S, id="trg_gone"))
    ticker.apply(Diff(add=items), T0)
    assert ticker.next_fires() == {
        "trg_c": T0.replace(minute=30),
        "trg_o": T0 + 3600 * S,
        "trg_gone": T0 - 7200 * S,  # not yet judged: the next wake settles it as missed
    }
    assert await ticker.tick() == 0  # past its grace: settled as missed, never fired
    assert ticker.next_fires() == {"trg_c": T0.replace(minute=30), "trg_o": T0 + 3600 * S}


@pytest.mark.parametrize(
    ("now", "next_slot"),
    [
        (T0 + timedelta(hours=1, seconds=45), T0 + timedelta(hours=1, minutes=5)),  # forward
        (T0 - timedelta(hours=1), T0 - timedelta(minutes=55)),  # back: live from the new now
    ],
)
def test_restart_after_a_clock_jump_fires_nothing_stale_then_goes_on(now, next_slot):
    entry = arm(cron("*/5 * * * *").record, T0, None, T0)  # type: ignore[arg-type]
    restart(entry, now)
    assert take(entry, now) == []
    assert take(entry, next_slot) == [(key(next_slot), next_slot, False)]


def test_a_cursor_the_look_ahead_moved_past_now_is_not_a_clock_that_went_back():
    entry = arm(cron("0 * * * *").record, T0, None, T0)  # type: ignore[arg-type]
    slot = T0 + timedelta(hours=1)
    ahead = timedelta(seconds=CLAIM_AHEAD)
    wake = slot - ahead / 2
    assert take(entry, wake + ahead) == [(key(slot), slot, False)]  # what the ticker takes
    restart(entry, wake + ahead / 4, ahead)  # a sleep seen just before the slot
    assert take(entry, slot + S) == []  # not taken twice


async def test_a_slot_is_taken_the_lead_before_it_comes_and_handed_over_due_at_the_slot(
    running, clock, rec
):
    await applied(running, clock, Diff(add=(cron("*/1 * * * * *"),)))
    assert rec.fires == []
    await advance(clock, 1 - CLAIM_AHEAD)  # the ticker slept until the lead before 09:00:01
    assert [(f.key, f.due_at) for f in rec.fires] == [(key(T0 + S), T0 + S)]
    assert clock.wall() < T0 + S  # handed over before its slot: the dispatcher waits for it
    await advance(clock, CLAIM_AHEAD)
    assert len(rec.fires) == 1  # the slot itself takes nothing again


class Spawner:
    """A Dispatcher that, like the firing pipeline, starts each fire in its own task."""

    def __init__(self, on_start: Any = None) -> None:
        self.started: list[str] = []
        self.started_before: list[int] = []  # at each fire(): how many fires had started
        self.batches: list[int] = []  # how many fires each fire() handed over
        self.tasks: list[asyncio.Task[None]] = []
        self.on_start = on_start

    async def fire(self, *requests: FireRequest) -> None:
        self.started_before.append(len(self.started))
        self.batches.append(len(requests))
        self.tasks.extend(asyncio.create_task(self._start(r)) for r in requests)

    async def _start(self, request: FireRequest) -> None:
        self.started.append(request.trigger.id)
        if self.on_start is not None:
            self.on_start()


async def test_a_burst_is_handed_over_in_batches_the_first_started_before_the_last_taken(
    clock, monkeypatch
):
    monkeypatch.setattr(ticker_module, "HAND_OFF", 2)
    spawner = Spawner()
    ticker = Ticker(spawner, clock=clock)
    burst = tuple(cron("0 9 * * *", id=f"trg_{i}") for i in range(5))
    ticker.apply(Diff(add=burst), T0 - S)
    assert await ticker.tick() == 5
    await asyncio.gather(*spawner.tasks)
    assert spawner.batches == [2, 2, 1]  # one hand-over (one claim request) per batch
    assert spawner.started_before == [0, 2, 4]
    assert sorted(spawner.started) == sorted(a.record.id for a in burst)


async def test_the_fires_of_one_wake_are_handed_over_together(clock):
    spawner = Spawner()
    ticker = Ticker(spawner, clock=clock)
    burst = tuple(cron("0 9 * * *", id=f"trg_{i}") for i in range(30))
    ticker.apply(Diff(add=burst), T0 - S)
    assert await ticker.tick() == 30
    await asyncio.gather(*spawner.tasks)
    assert spawner.batches == [30]


async def test_a_change_applied_while_a_burst_is_dispatched_is_safe(clock):
    burst = tuple(cron("0 9 * * *", id=f"trg_{i}") for i in range(4))
    ticker: Ticker

    def remove_the_rest() -> None:
        ticker.apply(Diff(remove=tuple(a.record.id for a in burst[1:])), clock.wall())

    spawner = Spawner(on_start=remove_the_rest)
    ticker = Ticker(spawner, clock=clock)
    ticker.apply(Diff(add=burst), T0 - S)
    assert await ticker.tick() == 4  # taken in one wake: their slot had come
    await asyncio.gather(*spawner.tasks)
    assert ticker.next_fires() == {"trg_0": T0 + timedelta(days=1)}


# --- one entry's failure is its own ------------------------------------------------------


def odd_cron(id: str) -> Armed:
    """A record that decoded by another rule (built by hand): its zone does not exist."""
    from triggers.bounds import CronExpr, TimeZoneName
    from triggers.records import CronSpec

    spec = CronSpec(expr=CronExpr("* * * * *"), tz=TimeZoneName("Mars/Base"))
    return armed(CronTrigger(id=id, program="p@v1", spec=spec))  # type: ignore[arg-type]


async def test_an_entry_that_cannot_be_armed_is_dropped_and_the_rest_fire(
    ticker: Ticker, clock: FakeClock, rec: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    ticker.apply(Diff(add=(odd_cron("trg_odd"), cron(id="trg_canary"))), T0)
    assert "trg_odd" in ticker.failed and "Mars/Base" in ticker.failed["trg_odd"]
    assert set(ticker.next_fires()) == {"trg_canary"}
    assert "trg_odd" in caplog.text
    clock.advance(60)
    assert await ticker.tick() == 1 and rec.keys == [key(T0 + 60 * S)]
    ticker.apply(Diff(remove=("trg_odd",)), T0 + 60 * S)
    assert ticker.failed == {}


async def test_an_entry_whose_take_raises_is_dropped_and_the_rest_fire(
    ticker: Ticker, clock: FakeClock, rec: Recorder
) -> None:
    ticker.apply(Diff(add=(cron(id="trg_a"), cron(id="trg_canary"))), T0)
    good = cron(id="trg_a").record
    bad_spec = msgspec.structs.replace(good.spec, tz="Mars/Base")  # type: ignore[union-attr]
    ticker._entries["trg_a"].record = msgspec.structs.replace(good, spec=bad_spec)  # type: ignore[assignment]
    clock.advance(60)
    assert await ticker.tick() == 1
    assert [f.trigger.id for f in rec.fires] == ["trg_canary"]
    assert "take" in ticker.failed["trg_a"] and "trg_a" not in ticker.next_fires()
    ticker.slept(T0 + 61 * S)  # the survivors restart; nothing raises
    assert set(ticker.next_fires()) == {"trg_canary"}


# --- the heap and chunked arming ---------------------------------------------------------


async def test_the_heap_fires_entries_in_next_fire_order_and_skips_stale_items(clock):
    recorder = Recorder()
    ticker = Ticker(recorder, clock=clock, max_sleep=86400)
    entries = tuple(cron(f"0 {h} * * *", id=f"trg_{h}") for h in (12, 10, 11))
    ticker.apply(Diff(add=entries), T0)
    ticker.apply(Diff(rearm=(edited(entries[2], spec={"expr": "0 13 * * *"}),)), T0)
    assert ticker.delay(T0) == 3600 - CLAIM_AHEAD  # read off the heap: trg_10 at 10:00
    order = [e.record.id for e in ticker._heap.pop_due(T0 + timedelta(hours=5))]
    assert order == ["trg_10", "trg_12", "trg_11"]  # the stale 11:00 item of trg_11 skipped
    ticker._heap.rebuild()
    for _ in range(4):  # 10:00, 11:00 (nothing: moved to 13:00), 12:00, 13:00
        clock.advance(3600)
        await ticker.tick()
    assert [(f.trigger.id, f.key) for f in recorder.fires] == [
        ("trg_10", key(T0 + timedelta(hours=1))),
        ("trg_12", key(T0 + timedelta(hours=3))),
        ("trg_11", key(T0 + timedelta(hours=4))),
    ]
    assert len(ticker._heap) <= 2 * len(ticker.next_fires()) + 1024


async def test_a_large_diff_is_armed_in_chunks_that_yield_to_the_loop(clock):
    ticker = Ticker(Recorder(), clock=clock)
    ticker.chunk = 10
    ticker.apply(Diff(add=tuple(cron(id=f"trg_{i}") for i in range(35))), T0)
    assert ticker.pending == 35 and ticker.next_fires() == {}
    assert ticker.delay(T0) == 0.0  # the loop comes back at once to arm them
    assert not ticker.settled.is_set() and len(ticker.touched) == 0  # nothing armed yet
    ran: list[int] = []

    async def other() -> None:  # another part of the device, wanting the loop meanwhile
        while ticker.pending:
            ran.append(ticker.pending)
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    assert await ticker.arm_pending() == 35
    await task
    assert ran and ran[0] < 35  # it ran between two chunks
    assert len(ticker.next_fires()) == 35 and ticker.pending == 0
    assert ticker.settled.is_set() and ticker.touched.take() == set(ticker.next_fires())
    ticker.apply(Diff(remove=("trg_0",), add=(cron(id="trg_new"),)), T0)
    assert ticker.pending == 0 and "trg_new" in ticker.next_fires()  # a small diff: at once
    assert ticker.touched.take() == {"trg_0", "trg_new"}  # for the health pass to judge


async def test_an_update_or_removal_of_an_entry_still_pending_is_not_lost(clock):
    ticker = Ticker(Recorder(), clock=clock)
    ticker.chunk = 2
    first = tuple(cron(id=f"trg_{i}") for i in range(5))
    ticker.apply(Diff(add=first), T0)
    ticker.apply(Diff(update=(edited(first[1], name="renamed"),), remove=("trg_2",)), T0)
    await ticker.arm_pending()
    assert set(ticker.next_fires()) == {"trg_0", "trg_1", "trg_3", "trg_4"}
    assert ticker._entries["trg_1"].record.name == "renamed"


async def test_a_takeover_bridges_entries_still_waiting_to_be_armed(ticker, clock, rec):
    now = clock.wall()
    ticker.chunk = 1
    ticker.apply(Diff(add=(cron("*/10 * * * * *"), cron("*/10 * * * * *", id="trg_d"))), now)
    assert ticker.pending == 2
    assert ticker.bridge(now - 60 * S) == 0  # nothing armed yet to bridge
    assert await ticker.tick() == 2 * 6  # each: the six slots in (08:59:00, 09:00:00]
    assert sorted({f.trigger.id for f in rec.fires}) == ["trg_c", "trg_d"]
