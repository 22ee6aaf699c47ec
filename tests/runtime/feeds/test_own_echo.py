"""A device's own stamps: its feed names them (`own` events) and its records take them from
its writes' answers, in the feed's order; other devices' stamps and users' edits still come
in full, and an answer lost or late is made good (a real space on 127.0.0.1, real SSE)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
import test_reconciler as base
from test_reconciler import CRON, ME, SPACE, Space, named, ready
from waiting import eventually

from core.clock import SystemClock
from core.wire import RunIn, Stamps
from runtime.client.api import SpaceClient
from runtime.client.seat import Seat
from runtime.feeds.own import _FIELDS, OwnStamps, with_stamps
from runtime.fire.recorder import Recorder
from triggers.records import CronTrigger, PeerId, TriggerId, load

T = TriggerId("trg_a")

space, start = base.space, base.start  # the reconcile loop's fixtures: a real space, a loop


def a_run(tid: str, n: int) -> RunIn:
    at = datetime(2026, 12, 1, 9, 0, n, tzinfo=UTC)
    return RunIn(
        runId=f"run_{n}",
        triggerId=tid,
        peer=ME,
        key=f"k{n}",
        startedAt=at,
        status="skipped",
        reason="overlap",
    )


def stamps(n: int) -> Stamps:
    at = datetime(2026, 12, 1, 9, 0, n, 123456, tzinfo=UTC)
    return Stamps(
        lastStatus="skipped",
        lastStatusDetail=f"overlap {n}",
        lastRunAt=at,
        rollup={"runs": n},
        nextFireAt=at,
    )


def stamped(record: CronTrigger) -> tuple[Any, ...]:
    fields = ("last_status", "last_status_detail", "last_run_at", "next_fire_at", "rollup")
    return tuple(getattr(record, f) for f in fields)


@pytest.fixture
async def recorder(space: Space) -> AsyncIterator[Recorder]:
    client = SpaceClient(space.url, space.device_token)
    yield Recorder(Seat(client, SPACE, PeerId(ME), SystemClock()))
    await client.close()


async def armed(space: Space, start: Any, **kw: Any) -> tuple[Any, CronTrigger]:
    run = await start(**kw)
    await ready(run)
    made = await space.admin.trigger_create(SPACE, named(CRON) | {"owner": ME})
    record = load(made)
    assert isinstance(record, CronTrigger)
    await run.until(lambda: run.ids("add") == [made["id"]])
    return run, record


async def feed_at(space: Space) -> int:
    return (await space.admin.trigger_page(SPACE, limit=1)).seq


def detail(rec: Any, tid: TriggerId) -> str:
    held = rec.records[tid]
    assert isinstance(held, CronTrigger)
    return held.last_status_detail


async def test_own_stamps_come_named_and_are_taken_from_the_answers_in_feed_order(
    space: Space, start: Any, recorder: Recorder
) -> None:
    run, record = await armed(space, start)
    rec = run.reconciler
    recorder.own = rec.own
    received = rec.received
    for n in range(1, 6):
        await recorder.ended(record, a_run(record.id, n), stamps(n))
    last = await feed_at(space)
    await eventually(lambda: rec.seq == last, what="the cursor past my own stamps")
    assert detail(rec, record.id) == "overlap 5"
    assert rec.received == received and rec.own.taken == 5 and rec.own.pending == 0
    held = rec.records[record.id]
    assert rec.registry[record.id].record is held and len(run.diffs) == 1  # no diff
    stored = load(await space.admin.trigger_get(SPACE, record.id))
    assert isinstance(stored, CronTrigger) and isinstance(held, CronTrigger)
    assert stamped(held) == stamped(stored)  # as the space holds them
    # another device's stamps, then a user's edit: the feed brings both in full
    await space.admin.trigger_status(SPACE, record.id, {"lastStatusDetail": "from box"})
    await space.admin.trigger_patch(SPACE, record.id, {"args": {"n": 1}})
    edited = lambda: getattr(rec.records[record.id], "args", None) == {"n": 1}  # noqa: E731
    await eventually(edited, what="the user's edit, the feed's last change")
    assert rec.received == received + 2
    held = rec.records[record.id]
    assert isinstance(held, CronTrigger)
    assert (held.last_status_detail, held.args, held.rollup) == ("from box", {"n": 1}, {"runs": 5})
    assert rec.status().received == rec.received and rec.status().own_taken == 5


async def test_an_own_change_whose_answer_was_lost_is_read_from_the_pages(
    space: Space, start: Any
) -> None:
    run, record = await armed(space, start)
    rec = run.reconciler
    received, client = rec.received, SpaceClient(space.url, space.device_token)
    try:  # written under the tag, but `own` never hears the answer (a timeout, a crash)
        await client.run_create_list(
            SPACE, [replace_stamps(a_run(record.id, 1), 1)], writer=rec.own.tag
        )
    finally:
        await client.close()
    await eventually(lambda: detail(rec, record.id) == "overlap 1", what="the page's change")
    assert rec.received == received + 1 and rec.own.taken == 0
    assert rec.seq == await feed_at(space)


async def test_an_own_event_before_its_answer_waits_for_the_write_in_flight(
    space: Space, start: Any
) -> None:
    run, record = await armed(space, start)
    rec, own = run.reconciler, run.reconciler.own
    received, client = rec.received, SpaceClient(space.url, space.device_token)
    own.writing()
    try:
        answer = await client.run_create_list(
            SPACE, [replace_stamps(a_run(record.id, 1), 1)], writer=own.tag
        )
    finally:
        await client.close()
    await eventually(lambda: own.waits == 1, what="the `own` event waiting for its answer")
    assert detail(rec, record.id) == ""
    seq = answer.runs[0].stampsSeq
    assert seq is not None and seq > rec.seq
    own.written(record.id, stamps(1), seq)
    own.done()
    await eventually(lambda: detail(rec, record.id) == "overlap 1", what="taken from the answer")
    assert rec.received == received and own.taken == 1 and rec.seq == seq


async def test_without_the_own_tag_the_feed_brings_every_stamp_back(
    space: Space, start: Any, recorder: Recorder
) -> None:
    """The measurement's other side: the same writes, echoed (what a device did before)."""
    run, record = await armed(space, start, own_stamps=False)
    rec = run.reconciler
    assert rec.own is None
    received = rec.received
    for n in range(1, 6):
        await recorder.ended(record, a_run(record.id, n), stamps(n))
    await eventually(lambda: rec.received == received + 5, what="five echoes")
    assert detail(rec, record.id) == "overlap 5"


def replace_stamps(run: RunIn, n: int) -> RunIn:
    return msgspec.structs.replace(run, stamps=stamps(n))


# --- the bookkeeping alone (pure) ----------------------------------------------------------

RAW = {
    "id": "trg_a",
    "kind": "cron",
    "spec": {"expr": "* * * * *"},
    "program": "p@v1",
    "rev": 3,
    "updatedAt": "2026-12-01T09:00:00.000Z",
    "lastStatus": "ok",
}


def test_take_gives_the_stamps_of_seqs_in_order_or_nothing_if_one_is_unknown() -> None:
    own = OwnStamps()
    own.written(T, Stamps(lastStatusDetail="a"), 12)
    own.written(TriggerId("trg_b"), Stamps(lastStatusDetail="b"), 13)
    own.written(T, Stamps(lastStatusDetail="same"), 0)  # changed nothing: no change, no seq
    assert own.take([12, 13, 14]) is None and own.pending == 2  # 14 not answered: none taken
    assert own.take([12, 13]) == [
        (T, Stamps(lastStatusDetail="a")),
        (TriggerId("trg_b"), Stamps(lastStatusDetail="b")),
    ]
    assert own.pending == 0 and own.taken == 2


def test_forget_drops_what_the_pages_or_a_listing_brought() -> None:
    own = OwnStamps()
    for seq in (5, 6, 9):
        own.written(T, Stamps(lastStatusDetail=str(seq)), seq)
    own.forget(6)
    assert own.pending == 1 and own.take([9]) == [(T, Stamps(lastStatusDetail="9"))]


def test_in_flight_is_counted_and_idle_set_when_every_write_is_done() -> None:
    own = OwnStamps()
    own.writing()
    own.writing()
    own.done()
    assert own.in_flight and not own.idle.is_set()
    own.done()
    assert not own.in_flight and own.idle.is_set()


def test_the_tag_is_one_per_process_and_a_valid_writer_tag() -> None:
    a, b = OwnStamps(), OwnStamps()
    assert a.tag != b.tag and a.tag.isalnum() and len(a.tag) <= 64


def test_with_stamps_knows_every_stamp_field() -> None:
    assert set(_FIELDS) == {f.encode_name for f in msgspec.structs.fields(Stamps)}


def test_with_stamps_decodes_as_the_space_stores_them() -> None:
    at = datetime(2026, 12, 1, 9, 0, 0, 123456, tzinfo=UTC)
    given = Stamps(lastRunAt=at, nextAttempt={"key": "k", "dueAt": at}, breaker=None)  # type: ignore[arg-type]
    got = with_stamps(load({**RAW, "breaker": {"open": True}}), given)
    stored = load(
        {
            **RAW,
            "lastRunAt": "2026-12-01T09:00:00.123Z",
            "nextAttempt": {"key": "k", "dueAt": "2026-12-01T09:00:00.123Z"},
            "breaker": None,
        }
    )
    assert got == stored
    salvaged = with_stamps(load({**RAW, "kind": "webhook"}), Stamps(lastStatus="x"))
    assert salvaged.raw["lastStatus"] == "x"  # type: ignore[union-attr]
