"""The trigger policies with real device processes on a real space server (SPEC "Trigger
policies"): a retry that outlives its holder, a budget, a snooze across a restart, a quiet
chat, `restart` superseding a long run, and a backfill asked twice. Each test reads what
the space recorded: runs, their keys and reasons, and the claim ledger.
"""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta

from support import duplicates, eventually, fires_of, runs_of
from test_failover import SETTLE, SPACE, Household, at, house

from core.vocab import iso
from runtime.client.api import ApiError

__all__ = ["house"]  # the fixture, from the failover tests

S = timedelta(seconds=1)
FAILS_ONCE = """
def main(args):
    c = use("any@v1")
    tries = c.cursor_get("tries", 0) + 1
    c.cursor_set("tries", tries)
    if tries == 1:
        raise RuntimeError("the first attempt fails")
    return {"ok": True, "tries": tries}
"""
FAILS_TWICE = FAILS_ONCE.replace("if tries == 1:", "if tries <= 2:").replace("first", "first two")
SLOW_UNLESS_QUICK = """
import time

def main(args):
    if args["event"]["text"] != "quick":
        use("any@v1").cursor_set("long", "started")
        time.sleep(60)
    return {"ok": True}
"""


async def runs(house: Household, tid: str) -> list[dict]:
    return await runs_of(house.api, SPACE, tid)


async def until(house: Household, tid: str, check, what: str) -> list[dict]:
    async def probe() -> list[dict] | None:
        found = await runs(house, tid)
        return found if check(found) else None

    return await eventually(probe, timeout=SETTLE + 10, what=what)


async def test_a_retry_due_after_its_holder_died_is_run_once_by_the_next(house: Household):
    """Fails twice, then succeeds with `--retry 3`; the holder is SIGKILLed between attempts."""
    await house.api.program_put(SPACE, "flaky@v1", {"source": FAILS_TWICE})
    for peer in ("a", "b"):
        await house.start(peer)
    holder = await house.holder()
    at_ = iso(datetime.now(UTC) + 2 * S)
    body = {"kind": "once", "name": "flaky", "spec": {"at": at_}, "program": "flaky@v1"}
    record = await house.api.trigger_create(
        SPACE, {**body, "retry": {"attempts": 3, "backoffSeconds": 5}}
    )
    first = await until(house, record["id"], lambda r: len(r) == 1, "the first attempt")
    assert (first[0]["status"], first[0]["attempt"]) == ("error", 1)
    stamped = await house.api.trigger_get(SPACE, record["id"])
    assert stamped["nextAttempt"]["key"] == first[0]["key"] + "#2"
    await house.devices[holder].kill()  # the holder dies during the backoff
    found = await until(house, record["id"], lambda r: len(r) == 3, "the third attempt")
    key = first[0]["key"]
    assert [(r["key"], r["attempt"], r["status"]) for r in found] == [
        (key, 1, "error"),
        (key + "#2", 2, "error"),
        (key + "#3", 3, "ok"),
    ]
    assert {r["peer"] for r in found[1:]} == {"b" if holder == "a" else "a"}  # the next holder
    assert at(found[1]["startedAt"]) >= at(stamped["nextAttempt"]["dueAt"])  # not before due
    claims = [f["key"] for f in await fires_of(house.api, SPACE, record["id"])]
    assert duplicates(claims) == [] and len(claims) == 3  # each attempt claimed once, no fourth


async def test_an_event_retry_outlives_its_holder_and_runs_once_on_the_next(house: Household):
    """A failed event fire's retry is stamped with its message; the holder is SIGKILLed in
    the backoff; the device taking over runs it (due after its bridge start), once."""
    await house.api.program_put(SPACE, "flaky@v1", {"source": FAILS_ONCE})
    for peer in ("a", "b"):
        await house.start(peer)
    holder = await house.holder()
    spec = {"dataset": "chat_messages", "objectId": house.chat}
    body = {"kind": "event", "name": "flaky-event", "spec": spec, "program": "flaky@v1"}
    record = await house.api.trigger_create(
        SPACE, {**body, "retry": {"attempts": 3, "backoffSeconds": 8}}
    )
    assert await house.bridged_holder() == holder
    sent = await house.send(house.chat, "try me")
    first = await until(house, record["id"], lambda r: len(r) == 1, "the first attempt")
    assert (first[0]["key"], first[0]["status"], first[0]["attempt"]) == (
        sent.message_id,
        "error",
        1,
    )
    stamped = (await house.api.trigger_get(SPACE, record["id"]))["nextAttempt"]
    assert stamped["key"] == sent.message_id + "#2"
    assert stamped["event"]["messageId"] == sent.message_id  # the takeover runs it with it
    await house.devices[holder].kill()  # the holder dies during the backoff
    found = await until(house, record["id"], lambda r: len(r) == 2, "the second attempt")
    second = found[1]
    assert (second["key"], second["attempt"], second["status"]) == (
        sent.message_id + "#2",
        2,
        "ok",
    )
    assert second["peer"] != holder  # the device that took over ran it
    assert at(second["startedAt"]) >= at(stamped["dueAt"])  # not before it was due
    assert second["result"]["tries"] == 2  # the same fire, its message, tried again
    claims = [f["key"] for f in await fires_of(house.api, SPACE, record["id"])]
    assert duplicates(claims) == [] and sorted(claims) == sorted(
        [sent.message_id, sent.message_id + "#2"]
    )  # each attempt claimed once, no third


async def test_a_budget_holds_an_every_second_trigger_to_three_runs_a_minute(house: Household):
    await house.start("a")
    await house.holder()
    record = await house.api.trigger_create(
        SPACE, {**house_cron("paid"), "budget": {"runs": 3, "perSeconds": 60}}
    )
    found = await until(
        house,
        record["id"],
        lambda r: sum(x["reason"] == "budget" for x in r) >= 3,
        "fires skipped for the budget",
    )
    ran = [r for r in found if r["status"] == "ok"]
    assert len(ran) == 3, found
    assert {r["status"] for r in found if r["reason"] == "budget"} == {"skipped"}
    stamped = await house.api.trigger_get(SPACE, record["id"])
    assert stamped["breaker"]["failures"] == 0  # a budget is not the breaker's


async def test_a_snooze_holds_across_a_device_restart_and_ends_by_itself(house: Household):
    await house.start("a")
    await house.holder()
    record = await house.api.trigger_create(SPACE, house_cron("snoozed"))
    until_ = datetime.now(UTC).replace(microsecond=0) + 6 * S
    patched = await house.api.trigger_patch(SPACE, record["id"], {"pausedUntil": iso(until_)})
    assert await house.devices["a"].stop(signal.SIGTERM) == 0
    await house.start("a")  # back before the snooze ends
    found = await until(
        house,
        record["id"],
        lambda r: any(at(x["key"]) >= until_ + 2 * S for x in r),
        "runs after the snooze",
    )
    keys = [at(r["key"]) for r in found]
    snoozed_at = at(patched["updatedAt"])
    assert not [k for k in keys if snoozed_at + S < k < until_], keys  # nothing of the snooze
    assert until_ in keys  # it resumed at its end, by itself


async def test_a_quiet_chat_skips_the_nudges_while_a_person_writes(house: Household):
    await house.start("a")
    await house.holder()
    quiet = {"objectId": house.chat, "seconds": 3}
    record = await house.api.trigger_create(SPACE, {**house_cron("nudge"), "quietChat": quiet})
    await until(house, record["id"], lambda r: len(r) >= 1, "a first nudge")
    sent = await house.send(house.chat, "a person writes")
    wrote = at(sent.created_at)
    found = await until(
        house,
        record["id"],
        lambda r: any(at(x["key"]) > wrote + 5 * S and x["status"] == "ok" for x in r),
        "nudges again after the quiet",
    )
    quiet_window = [r for r in found if wrote + S < at(r["key"]) < wrote + 3 * S]
    assert quiet_window and {(r["status"], r["reason"]) for r in quiet_window} == {
        ("skipped", "chat_active")
    }


async def test_restart_cancels_a_long_run_when_a_newer_message_comes(house: Household):
    await house.api.program_put(SPACE, "long@v1", {"source": SLOW_UNLESS_QUICK})
    await house.start("a")
    await house.holder()
    spec = {"dataset": "chat_messages", "objectId": house.chat}
    body = {"kind": "event", "name": "latest", "spec": spec, "program": "long@v1"}
    record = await house.api.trigger_create(
        SPACE, {**body, "limits": {"overlap": "restart", "timeoutSeconds": 120}}
    )
    await house.bridged_holder()
    long = await house.send(house.chat, "take your time")

    async def started() -> bool:
        try:
            return (await house.api.state_get(SPACE, record["id"], "long")) is not None
        except ApiError:
            return False

    await eventually(started, timeout=SETTLE, what="the long run under way")
    quick = await house.send(house.chat, "quick")
    found = await until(house, record["id"], lambda r: len(r) == 2, "both runs recorded")
    by_key = {r["key"]: r for r in found}
    cancelled, done = by_key[long.message_id], by_key[quick.message_id]
    assert (cancelled["status"], cancelled["reason"]) == ("cancelled", "superseded")
    assert cancelled["durationMs"] < 30_000  # stopped, not waited out
    assert done["status"] == "ok"


async def test_a_backfill_runs_the_missed_slots_once_however_often_it_is_asked(
    house: Household,
):
    record = await house.api.trigger_create(SPACE, house_cron("missed"))  # no device is up
    since = at(record["activeSince"])
    first = since.replace(microsecond=0) + S
    await eventually(
        lambda: datetime.now(UTC) > first + 11 * S, timeout=20, what="ten slots to pass"
    )
    await house.start("a")
    await house.holder()
    ask = {"from": iso(first), "to": iso(first + 9 * S)}
    answer = await house.api.trigger_backfill(SPACE, record["id"], ask)
    assert len(answer["keys"]) == 10 and answer["skipped"] == 0
    wanted = {first + i * S for i in range(10)}
    found = await until(
        house,
        record["id"],
        lambda r: wanted <= {at(x["key"]) for x in r},
        "the ten backfilled slots",
    )
    again = await house.api.trigger_backfill(SPACE, record["id"], ask)
    assert again["keys"] == [] and again["skipped"] == 10  # asked twice: nothing more
    found = await runs(house, record["id"])
    assert duplicates([r["key"] for r in found]) == []
    claims = [f["key"] for f in await fires_of(house.api, SPACE, record["id"])]
    assert duplicates(claims) == []


def house_cron(name: str) -> dict:
    return {"kind": "cron", "name": name, "spec": {"expr": "* * * * * *"}, "program": "quick@v1"}
