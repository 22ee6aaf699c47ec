"""Takeover without replay or loss, with real device processes on a real space server.

SPEC "Active since" and "Failover loses nothing, downtime replays nothing": whichever
device ends up with the lease, the floating cron, event and chat-watch triggers fire
exactly the slots and messages that came after the record's `activeSince` while at
least one device that is still up was already up: none before the record existed,
none from paused time, none lost while a standby was up, none twice. Three
`baton device` processes share one `baton space serve` with a 3 s lease (their
timings follow it; tests/e2e/test_servers_*.py run some of these on PostgreSQL, the
devices spread over servers). Each test checks the run records, claims and agent turns.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import pytest
from household import LEASE_FLAGS, PEERS, SETTLE, SPACE, Household, S, at
from support import Procs, runs_of, serve

from runtime.client.api import SpaceClient

__all__ = ["SETTLE", "SPACE", "Household", "at"]  # also the other takeover tests'


def whole_second_after(instant: datetime) -> datetime:
    """The first cron slot of `* * * * * *` at or after `instant`."""
    floor = instant.replace(microsecond=0)
    return floor if floor == instant else floor + S


@pytest.fixture
async def house(tmp_path: Path) -> AsyncIterator[Household]:
    async with Procs(tmp_path) as procs:
        _, url = await serve(procs, tmp_path / "space.db", *LEASE_FLAGS)
        admin = (tmp_path / "admin.token").read_text().strip()
        async with SpaceClient(url, admin) as api:
            yield await Household(procs, api, url).prepare()


async def test_nothing_from_before_a_record_existed_and_nothing_lost_at_a_clean_stop(
    house: Household,
) -> None:
    unseeded = [await house.send(house.general, "before chat-watch existed")]
    for peer in PEERS:
        await house.start(peer)
    await house.holder()
    before = [await house.send(house.chat, f"before {i}") for i in range(3)]
    cron, event = await house.cron("every second"), await house.event("feed")
    since = at(cron["activeSince"])
    holder = await house.first_run(cron["id"])  # on PostgreSQL, maybe a server killed
    after = [await house.send(house.chat, f"after {i}") for i in range(2)]
    await house.fired_for(event["id"], after)

    stopped_at = datetime.now(since.tzinfo)
    assert await house.devices[holder].stop(signal.SIGTERM) == 0
    successor = await house.holder()
    assert successor != holder
    later = [await house.send(house.chat, "after the stop")]
    slots = await house.every_slot(
        cron["id"], whole_second_after(since), stopped_at.replace(microsecond=0) + 3 * S
    )
    keys = await house.fired_for(event["id"], after + later)

    hello = [await house.send(house.general, "hello")]
    took = await house.chat_watch_took(hello)
    assert min(slots) >= since  # nothing from before the record existed
    assert not {m.message_id for m in before} & set(keys)
    assert set(keys) == {m.message_id for m in after + later}
    assert unseeded[0].message_id not in took
    await house.no_duplicate_claims(cron["id"], event["id"])


async def test_paused_time_never_fires_after_a_resume_and_a_takeover(house: Household) -> None:
    for peer in PEERS:
        await house.start(peer)
    await house.holder()
    cron, event = await house.cron("every second"), await house.event("feed")
    holder = await house.first_run(cron["id"])  # on PostgreSQL, maybe a server killed
    api = house.api
    paused = {}
    for tid in (cron["id"], event["id"], "chat-watch"):
        paused[tid] = at((await api.trigger_patch(SPACE, tid, {"enabled": False}))["updatedAt"])
    while_paused = [await house.send(house.chat, "while paused")]
    asleep = [await house.send(house.general, "anyone there?")]
    await asyncio.sleep(3)  # three slots pass while paused: nothing here may wait on them
    resumed = {}
    for tid in (cron["id"], event["id"], "chat-watch"):
        answer = await api.trigger_patch(SPACE, tid, {"enabled": True})
        resumed[tid] = at(answer["activeSince"])
    awake = [await house.send(house.chat, "resumed")]
    hello = [await house.send(house.general, "hello again")]
    await house.fired_for(event["id"], awake)

    assert await house.devices[holder].stop(signal.SIGTERM) == 0
    await house.bridged_holder()  # a replay would be queued by now
    after = whole_second_after(resumed[cron["id"]])
    await house.every_slot(cron["id"], after, after + 4 * S)
    await house.chat_watch_took(hello)
    slots = await house.slots(cron["id"])
    gap = [s for s in slots if paused[cron["id"]] + S < s < resumed[cron["id"]]]
    assert gap == []  # a slot due as the pause was written may still have fired
    keys = await house.keys(event["id"])
    assert while_paused[0].message_id not in keys and awake[0].message_id in keys
    took = await house.answered()
    assert asleep[0].message_id not in took and hello[0].message_id in took
    await house.no_duplicate_claims(cron["id"], event["id"])


async def test_a_holder_killed_and_back_within_its_lease_loses_nothing_while_standbys_were_up(
    house: Household,
) -> None:
    for peer in PEERS:
        await house.start(peer)
    await house.holder()
    cron, event = await house.cron("every second"), await house.event("feed")
    since = at(cron["activeSince"])
    holder = await house.first_run(cron["id"])  # on PostgreSQL, maybe a server killed

    await house.devices[holder].kill()
    killed = datetime.now(since.tzinfo)
    dead = [await house.send(house.chat, "while the holder was dead")]
    dead_chat = [await house.send(house.general, "are you there?")]
    await asyncio.sleep(0.5)  # it stays dead for a while: slots pass that nobody fired
    await house.start(holder)  # back within its 3 s lease, it renews at the same term
    await house.bridged_holder()  # it renews its term (or, on a slow start, a standby takes over)
    term = (await house.api.election(SPACE)).term

    slots = await house.every_slot(
        cron["id"], whole_second_after(since), killed.replace(microsecond=0) + 4 * S
    )
    keys = await house.fired_for(event["id"], dead)
    await house.chat_watch_took(dead_chat)
    assert min(slots) >= since
    assert dead[0].message_id in keys
    runs = await runs_of(house.api, SPACE, cron["id"])
    assert {r["term"] for r in runs if at(r["key"]) > killed} <= {term}
    await house.no_duplicate_claims(cron["id"], event["id"])


async def test_downtime_of_every_device_replays_nothing(house: Household) -> None:
    await house.start("a")
    await house.holder()
    cron, event = await house.cron("every second"), await house.event("feed")
    await house.first_run(cron["id"])

    await house.devices["a"].kill()
    down_from = datetime.now(at(cron["activeSince"]).tzinfo)
    down = [await house.send(house.chat, "while nobody was up")]
    await asyncio.sleep(2.5)
    down_until = datetime.now(down_from.tzinfo)
    await house.start("a")
    await house.bridged_holder()
    live = [await house.send(house.chat, "back")]
    await house.fired_for(event["id"], live)
    await house.every_slot(
        cron["id"], whole_second_after(down_until) + S, whole_second_after(down_until) + 3 * S
    )
    slots = await house.slots(cron["id"])
    assert [s for s in slots if down_from + S < s < down_until] == []
    assert down[0].message_id not in await house.keys(event["id"])
    await house.no_duplicate_claims(cron["id"], event["id"])
