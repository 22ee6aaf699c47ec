"""The fire pipeline against a real space server and a real executor (two workers).

Triggers are pinned to this device's peer so claims need no election, except where
the test is about the election's fence (a floating trigger and a term nobody holds).
Slow programs are gated on a file the test creates; the test waits on the pipeline's
own state under a deadline, never on a sleep.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from faultproxy import FaultProxy
from firing_world import (
    CHATTY,
    ECHO,
    FAIL,
    GATED,
    OK,
    PEER,
    SPACE,
    FakeResponder,
    World,
    instant,
    make_firing,
)
from msgspec import convert
from pages import read_all
from waiting import eventually

from core.wire import RunIn, Stamps
from programs import warm
from programs.executor import Executor
from runtime.chat.watch import ChatWatch
from runtime.client.api import SpaceClient
from runtime.events import Bus, RunFinished
from runtime.fire.ahead import CLAIM_AHEAD
from runtime.fire.recorder import Recorder
from triggers import schedule
from triggers.records import (
    Trigger,
)
from triggers.registry import Diff


async def test_a_cron_fire_runs_once_with_one_run_record_and_its_stamps(w: World):
    await w.publish("tick@v1", OK)
    record = await w.trigger("tick@v1", args={"n": 3})
    slot = schedule.fire_key_cron(w.clock.wall() + timedelta(seconds=3))  # after activeSince
    await w.fire(w.request(record, slot))
    await w.fire(w.request(record, slot))  # the same key again: the claim refuses it
    [run] = await w.runs(record)
    assert run["status"] == "ok" and run["result"] == {"ok": True, "n": 3}
    assert (run["triggerId"], run["program"], run["peer"], run["key"], run["term"]) == (
        record.id,
        "tick@v1",
        PEER,
        slot,
        0,
    )
    assert run["runId"].startswith("run_") and run["reason"] == ""
    assert run["durationMs"] > 0 and run["error"] == "" and run["stderrTail"] == ""
    assert {"startedAt", "finishedAt", "lateMs"} <= run.keys()
    stamped = await w.stamped(record)
    assert (stamped["lastStatus"], stamped["lastStatusDetail"]) == ("ok", "")
    assert instant(stamped["lastRunAt"]) == instant(run["startedAt"])
    assert stamped["rollup"]["runs"] == 1 and stamped["rollup"]["ok"] == 1
    assert stamped["breaker"]["phase"] == "closed"
    assert w.firing is not None and w.firing.counts["already_claimed"] == 1


async def test_a_run_stamps_the_next_fire_the_ticker_has_armed(world: World, executor: Executor):
    upcoming = datetime(2026, 12, 1, 9, 5, tzinfo=UTC)
    firing = make_firing(world, executor, next_fire=lambda tid: upcoming)
    try:
        await world.publish("tick@v1", OK)
        record = await world.trigger("tick@v1")
        slot = schedule.fire_key_cron(world.clock.wall() + timedelta(seconds=3))
        await world.fire(world.request(record, slot))
    finally:
        await firing.close()
    assert instant((await world.stamped(record))["nextFireAt"]) == upcoming


async def test_a_fire_is_announced_once_its_run_and_stamps_are_written(
    world: World, executor: Executor
):
    bus = Bus()
    firing = make_firing(world, executor, bus=bus)
    try:
        await world.publish("tick@v1", OK)
        record = await world.trigger("tick@v1")
        finished = asyncio.ensure_future(bus.next(RunFinished, lambda e: e.trigger_id == record.id))
        await firing.fire(world.request(record, "k"))
        async with asyncio.timeout(15):
            event = await finished
        [run] = await world.runs(record)  # written before the announcement: no wait
        assert (event.run_id, event.status, event.reason) == (run["runId"], "ok", "")
        assert (await world.stamped(record))["lastStatus"] == "ok"
    finally:
        await firing.close()


async def test_three_failures_open_the_breaker_and_the_fourth_fire_is_skipped(w: World):
    await w.publish("flaky@v1", FAIL)
    record = await w.trigger("flaky@v1", args={"n": 1})
    for n in range(3):
        await w.fire(w.request(record, f"k{n}"))
    await w.fire(w.request(record, "k3"))
    runs = await w.runs(record)
    assert [r["status"] for r in runs] == ["error", "error", "error", "skipped"]
    assert runs[0]["error"].endswith("RuntimeError: nope 1")
    assert runs[3]["reason"] == "breaker_open" and runs[3]["durationMs"] == 0
    stamped = await w.stamped(record)
    assert stamped["lastStatus"] == "breaker_open"
    assert stamped["lastStatusDetail"].startswith("until ")
    assert stamped["breaker"]["phase"] == "open" and stamped["breaker"]["suppressed"] == 1
    assert (stamped["rollup"]["errors"], stamped["rollup"]["suppressed"]) == (3, 1)


async def fire_into_a_running_one(w: World, tmp_path: Path):
    """Fire `a` of a gated trigger, then `b` while `a` runs (skipped for overlap); then let
    `a` end and every record be written. The trigger."""
    gate = tmp_path / "gate"
    await w.publish("slow@v1", GATED)
    record = await w.trigger("slow@v1", args={"gate": str(gate)})
    assert w.firing is not None
    await w.firing.fire(w.request(record, "a"))
    await w.until_running(record)
    await w.firing.fire(w.request(record, "b"))
    firing = w.firing
    await eventually(lambda: firing.counts.get("skipped") == 1)
    gate.touch()
    await w.fire()
    return record


async def test_a_fire_while_one_runs_is_skipped_for_overlap(w: World, tmp_path: Path):
    record = await fire_into_a_running_one(w, tmp_path)
    runs = {r["key"]: r for r in await w.runs(record)}
    assert (runs["a"]["status"], runs["a"]["result"]) == ("ok", {"ok": True})
    assert (runs["b"]["status"], runs["b"]["reason"]) == ("skipped", "overlap")


async def test_catch_up_fires_run_in_turn_and_the_live_fire_queues_behind_them(
    w: World, tmp_path: Path
):
    gate = tmp_path / "gate"
    await w.publish("slow@v1", GATED)
    record = await w.trigger("slow@v1", args={"gate": str(gate)})  # overlap: skip
    assert w.firing is not None
    for key in ("s1", "s2"):  # slots bridged on a takeover
        await w.firing.fire(w.request(record, key, catchup=True))
    await w.until_running(record)
    await w.firing.fire(w.request(record, "live"))
    gate.touch()
    await w.fire()
    runs = {r["key"]: r for r in await w.runs(record)}
    assert {k: r["status"] for k, r in runs.items()} == {"s1": "ok", "s2": "ok", "live": "ok"}
    assert (await w.stamped(record))["rollup"]["skipped"] == 0


async def test_a_full_queue_rejects_and_the_queued_fire_runs_after(w: World, tmp_path: Path):
    gate = tmp_path / "gate"
    await w.publish("slow@v1", GATED)
    limits = {"overlap": "queue", "maxQueue": 1}
    record = await w.trigger("slow@v1", args={"gate": str(gate)}, limits=limits)
    assert w.firing is not None
    await w.firing.fire(w.request(record, "a"))
    await w.until_running(record)
    await w.firing.fire(w.request(record, "b"))
    await w.firing.fire(w.request(record, "c"))
    firing = w.firing
    await eventually(lambda: firing.counts.get("rejected") == 1)
    gate.touch()
    await w.fire()
    runs = {r["key"]: r for r in await w.runs(record)}
    assert [runs[k]["status"] for k in "abc"] == ["ok", "ok", "rejected"]
    assert runs["c"]["reason"] == "queue_full"
    assert (await w.stamped(record))["rollup"]["rejected"] == 1


async def test_waiting_fires_run_one_after_another_in_the_order_they_queued(
    w: World, tmp_path: Path
):
    gate = tmp_path / "gate"
    await w.publish("slow@v1", GATED)
    record = await w.trigger("slow@v1", args={"gate": str(gate)}, limits={"overlap": "queue"})
    assert w.firing is not None
    await w.firing.fire(w.request(record, "a"))
    await w.until_running(record)
    for key in "bcd":
        await w.firing.fire(w.request(record, key))
    firing = w.firing
    await eventually(lambda: firing.status().triggers[record.id] == {"running": 1, "queued": 3})
    gate.touch()
    await w.fire()
    runs = await w.runs(record)  # in the order written, which is the order they ended
    assert [(r["key"], r["status"]) for r in runs] == [(k, "ok") for k in "abcd"]
    assert firing.status().triggers == {}


async def test_a_claim_under_a_stale_term_is_a_rejected_run(world: World, executor: Executor):
    firing = make_firing(world, executor, term=lambda: 7)
    try:
        await world.publish("tick@v1", OK)
        record = await world.trigger("tick@v1", owner="")  # floating: fenced by the lease
        await world.fire(world.request(record, "k"))
    finally:
        await firing.close()
    [run] = await world.runs(record)
    assert (run["status"], run["reason"], run["term"]) == ("rejected", "stale_term", 7)
    assert (await world.stamped(record))["lastStatus"] == ""  # not this device's to stamp


async def test_a_floating_fire_is_dropped_while_this_device_may_not_fire(
    world: World, executor: Executor
):
    firing = make_firing(world, executor, may_fire_floating=lambda: False)
    try:
        await world.publish("tick@v1", OK)
        record = await world.trigger("tick@v1", owner="")
        await world.fire(world.request(record, "k"))
    finally:
        await firing.close()
    assert await world.runs(record) == []
    assert (await world.admin.fires(SPACE, trigger=record.id))["fires"] == []


async def test_an_unpublished_program_skips_without_the_breaker_and_runs_once_published(
    w: World,
):
    record = await w.trigger("ghost@v1")
    for key in ("k1", "k2", "k3", "k4"):  # more than the breaker's 3 failures
        await w.fire(w.request(record, key))
    runs = await w.runs(record)
    assert [(r["status"], r["reason"]) for r in runs] == [("skipped", "unknown_program")] * 4
    stamped = await w.stamped(record)
    unpublished = ("unknown_program", "program 'ghost@v1' is not published")
    assert (stamped["lastStatus"], stamped["lastStatusDetail"]) == unpublished  # as health says
    assert not (stamped["breaker"] or {}).get("failures")  # the breaker never counted them
    await w.publish("ghost@v1", OK)
    await w.fire(w.request(record, "k5"))  # at once: no breaker wait
    assert [r["status"] for r in await w.runs(record)][-1] == "ok"
    assert (await w.stamped(record))["lastStatus"] == "ok"


async def test_an_event_fire_passes_the_event_beside_the_args(w: World):
    await w.publish("echo@v1", ECHO)
    spec = {"dataset": "chat_messages", "objectId": w.chat}
    record = await w.trigger("echo@v1", kind="event", spec=spec, args={"space": SPACE})
    event = {"space": SPACE, "objectId": w.chat, "messageId": "msg_1", "text": "hi"}
    await w.fire(w.request(record, "msg_1", event=event))
    [run] = await w.runs(record)
    assert run["result"] == {"ok": True, "args": {"space": SPACE, "event": event}}


async def test_a_program_posts_to_the_chat_with_its_run_token(w: World):
    await w.publish("greeter@v1", CHATTY)
    record = await w.trigger("greeter@v1", args={"space": SPACE, "chat": w.chat})
    await w.fire(w.request(record, "k"))
    [run] = await w.runs(record)
    assert run["status"] == "ok", run["error"]
    messages = read_all(await w.admin.chat_messages(SPACE, w.chat))
    [posted] = [m for m in messages if m.message_id == run["result"]["messageId"]]
    assert posted.text == "hello from a program"
    assert posted.agent is not None and posted.agent.name == "greeter"


async def test_a_fire_gets_its_run_token_with_the_claim_and_it_ends_with_the_run(w: World):
    await w.publish("greeter@v1", CHATTY)
    record = await w.trigger("greeter@v1", args={"space": SPACE, "chat": w.chat})
    w.seen.clear()
    await w.fire(w.request(record, "k"))
    [run] = await w.runs(record)
    assert run["status"] == "ok", run["error"]  # the program posted with the claim's token
    assert w.asked("POST", "/fires") == 1 and w.asked("POST", "/runs") == 1
    assert w.asked("POST", "/tokens/run") == 0  # no request of its own for the token
    [token] = [t for t in (await w.admin.tokens(all=True))["tokens"] if t["role"] == "run"]
    assert (token["triggerId"], token["runId"], token["state"]) == (
        record.id,
        run["runId"],
        "revoked",
    )
    [claim] = (await w.admin.fires(SPACE, trigger=record.id))["fires"]
    assert claim["key"] == "k"


async def test_a_fire_not_run_ends_the_token_its_claim_answered(w: World, tmp_path: Path):
    record = await fire_into_a_running_one(w, tmp_path)  # overlap: skip
    runs = {r["key"]: r["runId"] for r in await w.runs(record)}
    tokens = {
        t["runId"]: t["state"]
        for t in (await w.admin.tokens(all=True))["tokens"]
        if t["role"] == "run"
    }
    assert tokens == {runs["a"]: "revoked", runs["b"]: "revoked"}
    assert w.asked("POST", "/tokens/run") == 0


async def test_a_fire_that_waited_long_in_its_queue_mints_a_fresh_token(w: World, tmp_path: Path):
    gate = tmp_path / "gate"
    await w.publish("slow@v1", GATED)
    record = await w.trigger(
        "slow@v1", args={"gate": str(gate)}, limits={"overlap": "queue", "maxQueue": 1}
    )
    assert w.firing is not None
    await w.firing.fire(w.request(record, "a"))
    await w.until_running(record)
    await w.firing.fire(w.request(record, "b"))
    firing = w.firing
    await eventually(lambda: bool(firing.status().triggers.get(record.id, {}).get("queued")))
    w.clock.advance(20)  # longer than a claim's token may wait: it could die mid-run
    gate.touch()
    await w.fire()
    runs = {r["key"]: r for r in await w.runs(record)}
    assert [runs[k]["status"] for k in "ab"] == ["ok", "ok"]
    assert w.asked("POST", "/tokens/run") == 1  # for "b" alone
    live = [t for t in (await w.admin.tokens())["tokens"] if t["role"] == "run"]
    assert live == []  # every token of both runs ended with its record


async def test_chat_watch_fires_go_to_the_conversation_watcher(world: World, executor: Executor):
    responder = FakeResponder()

    async def send(*_: Any, **__: Any) -> None:
        return None

    async def history(*_: Any) -> list[dict]:
        return []

    async def record_turn(_: dict) -> None:
        return None

    watch = ChatWatch(responder, send, history, record_turn=record_turn, clock=world.clock)
    firing = make_firing(world, executor, offer=watch.offer)
    try:
        spec = {"dataset": "chat_messages", "objectId": world.chat}
        record = await world.trigger("internal:chat-watch", kind="event", spec=spec)
        event = {"space": SPACE, "objectId": world.chat, "messageId": "m1", "text": "hello"}
        await world.fire(world.request(record, "m1", event=event))
        async with asyncio.timeout(5):
            await responder.called.wait()
    finally:
        await firing.close()
        await watch.close()
    assert [[m["messageId"] for m in pending] for pending in responder.asked] == [["m1"]]
    assert await world.runs(record) == []  # turns are logged as agent_turns, not runs


async def test_late_ms_is_how_long_after_its_due_time_the_run_started(w: World):
    await w.publish("tick@v1", OK)
    record = await w.trigger("tick@v1")
    due = w.clock.wall() - timedelta(seconds=2.5)
    await w.fire(w.request(record, "k", due_at=due))
    [run] = await w.runs(record)
    assert run["lateMs"] == 2500.0


async def test_a_fired_once_is_stamped_done(w: World):
    await w.publish("tick@v1", OK)
    at = "2026-12-01T09:00:00+00:00"
    record = await w.trigger("tick@v1", kind="once", spec={"at": at})
    await w.fire(w.request(record, "2026-12-01T09:00:00Z"))
    stamped = await w.stamped(record)
    assert stamped["lastStatus"] == "done"
    assert stamped["lastStatusDetail"] == "fired for 2026-12-01T09:00:00.000Z"
    assert stamped["rollup"]["lastStatus"] == "ok"


async def test_removing_a_trigger_records_its_waiting_fires_as_withdrawn(w: World, tmp_path: Path):
    gate = tmp_path / "gate"
    await w.publish("slow@v1", GATED)
    limits = {"overlap": "queue", "maxQueue": 5}
    record = await w.trigger("slow@v1", args={"gate": str(gate)}, limits=limits)
    assert w.firing is not None
    await w.firing.fire(w.request(record, "a"))
    await w.until_running(record)
    await w.firing.fire(w.request(record, "b"))
    firing = w.firing
    await eventually(lambda: firing.status().triggers[record.id]["queued"] == 1)
    w.firing.apply(Diff(remove=(record.id,)))
    gate.touch()
    await w.fire()
    runs = {r["key"]: r for r in await w.runs(record)}
    assert runs["a"]["status"] == "ok"
    assert (runs["b"]["status"], runs["b"]["reason"]) == ("skipped", "withdrawn")


# --- batches: fires due together cost one claim; runs ending together, one write ----------


async def test_fires_handed_over_together_are_claimed_in_one_request_each_answered_alone(
    w: World,
):
    await w.publish("tick@v1", OK)
    fresh = [await w.trigger("tick@v1", args={"n": n}) for n in range(3)]
    taken = await w.trigger("tick@v1")
    floating = await w.trigger("tick@v1", owner="")  # term 0 is nobody's lease: stale
    await w.fire(w.request(taken, "k"))
    w.seen.clear()
    assert w.firing is not None
    await w.firing.fire(*(w.request(r, "k") for r in [*fresh, taken, floating]))
    await w.fire()
    assert w.asked("POST", "/fires") == 1  # one request for the five claims
    assert w.asked("POST", "/tokens/run") == 0 and w.asked("POST", "/triggers/{id}/status") == 0
    for record in fresh:
        [run] = await w.runs(record)
        assert run["status"] == "ok" and (await w.stamped(record))["lastStatus"] == "ok"
    assert len(await w.runs(taken)) == 1  # its second claim was refused: already claimed
    [stale] = await w.runs(floating)
    assert (stale["status"], stale["reason"]) == ("rejected", "stale_term")
    assert w.firing is not None and w.firing.counts["already_claimed"] == 1


def skipped_run(run_id: str, record: Trigger, reason: str) -> RunIn:
    return convert(
        {
            "runId": run_id,
            "triggerId": record.id,
            "peer": PEER,
            "key": run_id,
            "startedAt": "2026-12-01T09:00:00Z",
            "status": "skipped",
            "reason": reason,
        },
        RunIn,
    )


async def test_runs_ending_together_are_written_with_their_stamps_in_one_request(world: World):
    recorder = Recorder(world.seat())
    records = [await world.trigger("tick@v1") for _ in range(3)]
    world.seen.clear()

    def ended(n: int, record: Trigger, detail: str) -> Any:
        run = skipped_run(f"run_{n}", record, detail)
        stamps = Stamps(lastStatus="skipped", lastStatusDetail=detail)
        return recorder.ended(record, run, stamps)

    await asyncio.gather(
        *(ended(n, r, "overlap") for n, r in enumerate(records)), ended(3, records[0], "queue_full")
    )
    assert world.asked("POST", "/runs") == 1 and world.asked("POST", "/triggers/{id}/status") == 0
    assert [len(await world.runs(r)) for r in records] == [2, 1, 1]
    details = [(await world.stamped(r))["lastStatusDetail"] for r in records]
    assert details == ["queue_full", "overlap", "overlap"]  # the newer stamps of one trigger win


async def test_a_run_waiting_for_its_write_is_written_at_close(world: World):
    recorder = Recorder(world.seat())
    record = await world.trigger("tick@v1")
    written = recorder.enqueue(record, skipped_run("run_last", record, "shutdown"), None)
    await recorder.close()
    assert written.done()
    [stored] = await world.runs(record)
    assert stored["runId"] == "run_last"


# --- fires claimed ahead of their slot (runtime.fire.ahead) ---------------------------------


AHEAD = timedelta(seconds=CLAIM_AHEAD)


async def claimed_ahead(w: World, record: Trigger, key: str) -> None:
    """Hand over a fire due `CLAIM_AHEAD` from now; return once it is claimed and waiting."""
    assert w.firing is not None
    await w.firing.fire(w.request(record, key, due_at=w.clock.wall() + AHEAD))
    async with asyncio.timeout(5):
        await w.clock.wait_for_sleepers(1)
    assert w.asked("POST", "/fires") == 1


async def test_a_fire_claimed_ahead_of_its_slot_runs_when_the_slot_comes(w: World):
    await w.publish("tick@v1", OK)
    record = await w.trigger("tick@v1")
    await claimed_ahead(w, record, "soon")
    assert await w.runs(record) == []  # claimed, not started
    w.clock.advance(CLAIM_AHEAD)
    await w.fire()
    [run] = await w.runs(record)
    assert (run["key"], run["status"], run["lateMs"]) == ("soon", "ok", 0.0)


@pytest.mark.parametrize(("act", "reason"), [("remove", "withdrawn"), ("sleep", "slept")])
async def test_a_fire_claimed_ahead_is_recorded_not_run_when_withdrawn_before_its_slot(
    w: World, act: str, reason: str
):
    await w.publish("tick@v1", OK)
    record = await w.trigger("tick@v1")
    await claimed_ahead(w, record, "soon")
    assert w.firing is not None
    if act == "remove":
        w.firing.apply(Diff(remove=(record.id,)))
    else:
        w.firing.slept()
    await w.fire()
    [run] = await w.runs(record)
    assert (run["key"], run["status"], run["reason"]) == ("soon", "skipped", reason)
    assert [f["key"] for f in (await w.admin.fires(SPACE, record.id))["fires"]] == ["soon"]


async def test_a_fire_claimed_ahead_is_recorded_when_the_device_stops_before_its_slot(
    world: World, executor: Executor
):
    await world.publish("tick@v1", OK)
    record = await world.trigger("tick@v1")
    firing = make_firing(world, executor)
    await claimed_ahead(world, record, "soon")
    await firing.close()
    await firing._recorder.close()
    [run] = await world.runs(record)
    assert (run["key"], run["status"], run["reason"]) == ("soon", "rejected", "shutdown")


PID = "import os\ndef main(args):\n    return {'ok': True, 'pid': os.getpid()}\n"


async def test_a_run_process_is_kept_warm_only_for_a_trigger_that_repeats(
    w: World, executor: Executor
):
    if executor.containment is None or executor.containment.landlock < 6:
        pytest.skip("warm run processes need Landlock ABI 6")
    await w.publish("pid@v1", PID)
    record = await w.trigger("pid@v1")
    for key in ("a", "b", "c"):
        await w.fire(w.request(record, key))
    w.clock.advance(warm.IDLE_SECONDS + 1)  # quiet for longer than a kept process would wait
    for key in ("d", "e", "f"):
        await w.fire(w.request(record, key))
    pid = {r["key"]: r["result"]["pid"] for r in await w.runs(record)}
    assert pid["a"] != pid["b"] == pid["c"]  # the first run's process is not kept; a repeat's is
    assert pid["c"] != pid["d"] != pid["e"] == pid["f"]  # after the pause, the same again


async def test_a_pinned_fire_whose_claim_finds_the_space_away_is_claimed_when_it_is_back(
    world: World, executor: Executor, aiohttp_server: Any
) -> None:
    """Only its owner may claim a pinned fire: a claim the space could not answer (down,
    refused) is not dropped but claimed again, the same claim, and then runs once."""
    port = int(world.url.rsplit(":", 1)[1])
    token = (await world.admin.token_device({"peer": PEER, "space": SPACE}))["token"]
    async with FaultProxy(port) as proxy, SpaceClient(proxy.url, token) as device:
        w = World(world.url, world.admin, device, world.chat)
        firing = make_firing(w, executor)
        try:
            await w.publish("tick@v1", OK)
            record = await w.trigger("tick@v1")
            slot = schedule.fire_key_cron(w.clock.wall() + timedelta(seconds=3))
            proxy.refusing = True  # the space is away as the fire is claimed
            await firing.fire(w.request(record, slot))
            for _ in range(4):  # away for longer than a claim's own retries (0.5 s, 1 s)
                async with asyncio.timeout(5):
                    await w.clock.wait_for_sleepers(1)  # waiting to claim it again
                w.clock.advance_to_next()
            async with asyncio.timeout(5):
                await w.clock.wait_for_sleepers(1)
            assert await w.runs(record) == []
            proxy.refusing = False
            w.clock.advance_to_next()
            async with asyncio.timeout(15):
                await firing.settled()
            [run] = await w.runs(record)
            assert (run["key"], run["status"]) == (slot, "ok")
            fires = (await w.admin.fires(SPACE, trigger=record.id))["fires"]
            assert [f["key"] for f in fires] == [slot]
        finally:
            await firing.close()
