"""The trigger policies in the fire pipeline, against a real space and a real executor:
retry, budget, quiet chat, restart and maxRuns (SPEC "Trigger policies")."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path

from firing_world import FAIL, GATED, OK, PEER, SPACE, World, make_firing
from waiting import eventually

from core.peerwire import LeaseIn
from core.vocab import iso
from programs.executor import Executor
from triggers.records import load

FLAKY = """
def main(args):
    c = use("any@v1")
    n = c.cursor_get("tries", 0) + 1
    c.cursor_set("tries", n)
    if n <= args["fails"]:
        raise RuntimeError(f"attempt {n} fails")
    return {"ok": True, "attempt": n}
"""


async def backoff(w: World, seconds: float) -> None:
    """Wait until a retry sleeps on the clock, then let its backoff pass."""
    async with asyncio.timeout(10):
        await w.clock.wait_for_sleepers(1)
    w.clock.advance(seconds)


async def test_a_failing_fire_is_retried_after_its_backoff_until_it_succeeds(w: World):
    assert w.firing is not None
    firing = w.firing
    await w.publish("flaky@v1", FLAKY)
    retry = {"attempts": 3, "backoffSeconds": 5, "maxBackoffSeconds": 60}
    record = await w.trigger("flaky@v1", args={"fails": 2}, retry=retry)
    await w.fire(w.request(record, "k"))
    await backoff(w, 5)  # attempt 2 after 5 s
    await eventually(lambda: firing.counts.get("error") == 2)
    await w.fire()
    await backoff(w, 10)  # attempt 3 after 10 s more
    await eventually(lambda: firing.counts.get("ok") == 1)
    await w.fire()
    runs = await w.runs(record)
    assert [(r["key"], r["attempt"], r["status"]) for r in runs] == [
        ("k", 1, "error"),
        ("k#2", 2, "error"),
        ("k#3", 3, "ok"),
    ]
    assert firing.status().retrying == 0  # nothing after success
    stamped = await w.stamped(record)
    assert stamped["breaker"]["failures"] == 0  # the retried failures never reached it


async def test_the_last_failed_attempt_alone_counts_for_the_breaker(w: World):
    await w.publish("fail@v1", FAIL)
    record = await w.trigger("fail@v1", retry={"attempts": 2, "backoffSeconds": 1})
    await w.fire(w.request(record, "k"))
    await backoff(w, 1)
    async with asyncio.timeout(10):
        await eventually(lambda: w.firing is not None and w.firing.counts.get("error") == 2)
    await w.fire()
    assert [r["key"] for r in await w.runs(record)] == ["k", "k#2"]  # no third attempt
    assert (await w.stamped(record))["breaker"]["failures"] == 1


async def test_a_budget_skips_the_fires_beyond_it_within_its_period(w: World):
    await w.publish("paid@v1", OK)
    record = await w.trigger("paid@v1", budget={"runs": 2, "perSeconds": 60})
    for key in ("a", "b", "c"):
        await w.fire(w.request(record, key))
    w.clock.advance(61)
    await w.fire(w.request(record, "d"))
    runs = {r["key"]: (r["status"], r["reason"]) for r in await w.runs(record)}
    assert runs == {"a": ("ok", ""), "b": ("ok", ""), "c": ("skipped", "budget"), "d": ("ok", "")}
    assert (await w.stamped(record))["breaker"]["failures"] == 0


async def test_a_quiet_chat_skips_a_nudge_while_a_person_writes_and_not_after(w: World):
    await w.publish("nudge@v1", OK)
    record = await w.trigger("nudge@v1", quietChat={"objectId": w.chat, "seconds": 120})
    await w.fire(w.request(record, "before"))  # nobody wrote yet
    await w.admin.chat_send(SPACE, w.chat, {"text": "I am typing"})
    await w.admin.chat_send(SPACE, w.chat, {"text": "an agent", "agent": {"name": "bot"}})
    await w.fire(w.request(record, "during"))
    w.clock.advance(130)  # the space stamps messages by its own clock: a few seconds of slack
    await w.fire(w.request(record, "after"))
    runs = {r["key"]: (r["status"], r["reason"]) for r in await w.runs(record)}
    assert runs == {
        "before": ("ok", ""),
        "during": ("skipped", "chat_active"),
        "after": ("ok", ""),
    }


async def test_restart_cancels_the_running_run_and_starts_the_new_fire(w: World, tmp_path: Path):
    gate = tmp_path / "gate"
    await w.publish("slow@v1", GATED)
    record = await w.trigger(
        "slow@v1", args={"gate": str(gate)}, limits={"overlap": "restart", "timeoutSeconds": 30}
    )
    assert w.firing is not None
    await w.firing.fire(w.request(record, "first"))
    await w.until_running(record)
    await w.firing.fire(w.request(record, "second"))
    firing = w.firing
    await eventually(lambda: firing.counts.get("cancelled") == 1)
    await w.until_running(record)
    gate.touch()
    await w.fire()
    runs = {r["key"]: r for r in await w.runs(record)}
    assert (runs["first"]["status"], runs["first"]["reason"]) == ("cancelled", "superseded")
    assert (runs["second"]["status"], runs["second"]["result"]) == ("ok", {"ok": True})
    assert (await w.stamped(record))["rollup"]["cancelled"] == 1


async def test_restart_supersedes_a_bridged_run_with_a_live_fire(w: World, tmp_path: Path):
    """A message bridged at subscribe time runs as a catch-up fire; a newer live message
    under `restart` still supersedes it (it does not queue behind it)."""
    gate = tmp_path / "gate"
    await w.publish("slow@v1", GATED)
    record = await w.trigger(
        "slow@v1", args={"gate": str(gate)}, limits={"overlap": "restart", "timeoutSeconds": 30}
    )
    assert w.firing is not None
    firing = w.firing
    await firing.fire(w.request(record, "bridged", catchup=True))
    await w.until_running(record)
    await firing.fire(w.request(record, "live"))
    await eventually(lambda: firing.counts.get("cancelled") == 1, timeout=10)
    await w.until_running(record)
    gate.touch()
    await w.fire()
    runs = {r["key"]: r for r in await w.runs(record)}
    assert (runs["bridged"]["status"], runs["bridged"]["reason"]) == ("cancelled", "superseded")
    assert runs["live"]["status"] == "ok"


async def test_after_max_runs_ok_runs_the_trigger_is_done_and_fires_no_more(w: World):
    await w.publish("twice@v1", OK)
    record = await w.trigger("twice@v1", maxRuns=2)
    for key in ("a", "b"):
        await w.fire(w.request(record, key))
    stamped = await w.stamped(record)
    assert (stamped["lastStatus"], stamped["lastStatusDetail"]) == ("done", "ran 2 of maxRuns 2")
    await w.fire(w.request(record, "c"))
    assert [r["key"] for r in await w.runs(record)] == ["a", "b"]
    assert w.firing is not None and w.firing.counts.get("done") == 1


async def test_a_scheduled_retry_is_stamped_for_whoever_holds_the_trigger_then(w: World):
    await w.publish("fail@v1", FAIL)
    record = await w.trigger("fail@v1", retry={"attempts": 2, "backoffSeconds": 30})
    await w.fire(w.request(record, "k"))
    stamped = await w.stamped(record)
    due = datetime.fromisoformat(stamped["nextAttempt"]["dueAt"])
    assert stamped["nextAttempt"]["key"] == "k#2"
    assert due - w.clock.wall() == timedelta(seconds=30)
    await backoff(w, 30)
    async with asyncio.timeout(10):
        await eventually(lambda: w.firing is not None and w.firing.counts.get("error") == 2)
    await w.fire()
    assert (await w.stamped(record)).get("nextAttempt") is None  # the chain ended


ECHO = 'def main(args):\n    return {"text": args["event"]["text"]}\n'


async def test_a_failed_event_fire_stamps_its_retry_with_the_message(w: World):
    await w.publish("fail@v1", FAIL)
    spec = {"dataset": "chat_messages", "objectId": w.chat}
    record = await w.trigger(
        "fail@v1", kind="event", spec=spec, retry={"attempts": 2, "backoffSeconds": 5}
    )
    event = {"space": SPACE, "objectId": w.chat, "messageId": "msg_1", "text": "hi"}
    await w.fire(w.request(record, "msg_1", event=event))
    stamped = (await w.stamped(record))["nextAttempt"]
    assert (stamped["key"], stamped["event"]) == ("msg_1#2", event)


async def test_a_takeover_runs_an_event_retry_due_after_it_and_none_from_before(
    world: World, executor: Executor
):
    """The bridge rule for event retries: the stamped retry of a floating event trigger
    that came due after the takeover's bridge start runs here, with its message."""
    w = world
    lease = await w.device.election_claim(SPACE, LeaseIn(peer=PEER, term=0))
    firing = make_firing(w, executor, term=lambda: lease.term)
    await w.publish("echo@v1", ECHO)
    spec = {"dataset": "chat_messages", "objectId": w.chat}
    start = w.clock.wall()
    due = {
        "after": start + timedelta(seconds=5),
        "before": start - timedelta(seconds=1),
        "snoozed": start + timedelta(seconds=5),  # due inside a snooze: before `activeSince`
    }
    records = {}
    for name, due_at in due.items():
        made = await w.trigger("echo@v1", kind="event", spec=spec, owner="", retry={"attempts": 3})
        event = {"space": SPACE, "objectId": w.chat, "messageId": f"msg_{name}", "text": name}
        key = f"msg_{name}#2"
        next_attempt = {"key": key, "dueAt": iso(due_at), "event": event}
        await w.admin.trigger_status(SPACE, made.id, {"nextAttempt": next_attempt})
        if name == "snoozed":
            until = iso(start + timedelta(seconds=30))
            await w.admin.trigger_patch(SPACE, made.id, {"pausedUntil": until})
        records[name] = load(await w.stamped(made))
    assert records["snoozed"].fires_from > due["snoozed"]
    assert firing.retries.adopt(records.values(), start) == 1
    await backoff(w, 5)
    await eventually(lambda: firing.counts.get("ok") == 1)
    await w.fire()
    ran = await w.runs(records["after"])
    assert [(r["key"], r["attempt"], r["result"]) for r in ran] == [
        ("msg_after#2", 2, {"text": "after"})
    ]
    assert await w.runs(records["before"]) == []  # due before the takeover: never run
    assert await w.runs(records["snoozed"]) == []  # due before its `activeSince`: never run
    await firing.close()
