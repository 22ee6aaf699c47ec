"""`baton triggers run` against a real space server and a real device `box` in this process.

The run is asked of the device that runs the trigger and is that device's (peer `box`), a
real run in its worker with the trigger's args and its own state, listed by `baton runs
--trigger`. No live device to take it is exit 1 naming it, and nothing is asked; a device
that is live but does not run it is exit 1 once `--wait` runs out.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from clikit import DEADLINE_S, SPACE, Cli, World
from waiting import eventually

from runtime.client.api import SpaceClient
from runtime.device import Device, DeviceSettings

COUNTER = '''"""Count the runs of this trigger in its own state; echo the args."""


def main(args):
    c = use("any@v1")
    count = c.cursor_get("count", 0) + 1
    c.cursor_set("count", count)
    return {"ok": True, "count": count, "args": args}
'''
FAILING = "def main(args):\n    raise ValueError('no luck')\n"
SLOW = "import time\n\n\ndef main(args):\n    time.sleep(3)\n    return {}\n"
YEARLY = ["--cron", "0 0 1 1 *"]


@pytest.fixture
async def box(world: World) -> AsyncIterator[Device]:
    """A device `box` of the space, holding its lease: what runs a `triggers run`."""
    minted = await world.admin.token_device({"peer": "box", "space": SPACE})
    settings = DeviceSettings(
        url=world.url, token=minted["token"], space=SPACE, peer="box", executor_size=1
    )
    device = Device(settings)
    task = asyncio.create_task(device.run(), name="device box")
    try:
        await eventually(
            lambda: device.reconciler.ready.is_set() and device.elector.may_fire(),
            timeout=DEADLINE_S,
            what="box synced and holding the lease",
        )
        yield device
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def add(cli: Cli, *argv: str) -> dict[str, Any]:
    return await cli.json("triggers", "add", "--program", "counter@v1", *argv)


async def test_run_is_a_real_run_of_the_trigger_with_its_args_and_state(
    cli: Cli, world: World, box: Device
):
    await world.admin.program_put(SPACE, "counter@v1", {"source": COUNTER})
    t = await add(cli, "--name", "count", *YEARLY, "--args", '{"who": "me"}')
    first = await cli.json("triggers", "run", t["id"])
    assert (first["status"], first["triggerId"], first["program"]) == ("ok", t["id"], "counter@v1")
    assert first["result"] == {"ok": True, "count": 1, "args": {"who": "me"}}
    assert first["key"].startswith("manual:") and first["reason"] == ""
    assert first["peer"] == "box"  # the device ran it, not this process
    code, out, _ = await cli("triggers", "run", t["id"])
    assert code == 0 and "status    ok\n" in out and '"count": 2' in out
    assert out.startswith(f"asked box to run {t['id']} (count) as manual:")
    state = await world.admin.state_get(SPACE, t["id"], "count")
    assert state["value"] == 2  # the trigger's own state
    runs = (await cli.json("runs", "--trigger", t["id"]))["runs"]
    assert len(runs) == 2 and runs[0]["runId"] == first["runId"]
    code, out, _ = await cli("runs", "--trigger", t["id"])
    rows = [r.split() for r in out.splitlines()[1:]]
    assert code == 0 and [r[2:4] for r in rows] == [["count", "ok"]] * 2  # named, not by id
    shown = await cli.json("triggers", "show", t["id"])
    assert [r["runId"] for r in shown["runs"]] == [r["runId"] for r in runs]
    code, out, _ = await cli("triggers", "show", t["id"])
    assert out.count(" ok ") == 2 and "last runs:\n  STARTED" in out


async def test_a_failing_or_unpublished_run_exits_1_with_its_reason(
    cli: Cli, world: World, box: Device
):
    t = await add(cli, "--name", "ghost", *YEARLY)
    code, out, _ = await cli("triggers", "run", t["id"], "--json")
    record = json.loads(out)
    assert code == 1 and (record["status"], record["reason"]) == ("skipped", "unknown_program")
    await world.admin.program_put(SPACE, "failing@v1", {"source": FAILING})
    await cli("triggers", "edit", t["id"], "--program", "failing@v1")
    code, out, _ = await cli("triggers", "run", t["id"])
    assert code == 1 and "status    error\n" in out and "ValueError: no luck" in out
    code, out, _ = await cli("runs", "--trigger", t["id"], "--status", "error")
    assert code == 0 and "ValueError: no luck" in out
    code, out, _ = await cli("runs", "--trigger", t["id"], "--status", "skipped")
    assert code == 0 and "unknown_program" in out


async def test_an_owner_offline_or_no_device_at_all_is_exit_1_and_nothing_is_asked(
    cli: Cli, world: World
):
    pinned = await add(cli, "--name", "lamp", *YEARLY, "--pin", "shelf", "--force")
    err = await cli.fails(1, "triggers", "run", "lamp")
    assert err.startswith(f"baton: device_offline: trigger '{pinned['id']}' is pinned to")
    assert "'shelf', which is offline (never seen): nothing runs it until it is back" in err
    floating = await add(cli, "--name", "free", *YEARLY)
    code, out, err = await cli("triggers", "run", "free", "--json")
    assert (code, out) == (1, "")
    assert json.loads(err)["error"] == "device_offline" and "no device holds the lease" in err
    for t in (pinned, floating):
        record = await world.admin.trigger_get(SPACE, t["id"])
        assert record["rev"] == 1 and record["runAsked"] is None


async def test_a_live_device_that_does_not_run_it_is_exit_1_when_the_wait_runs_out(
    cli: Cli, world: World
):
    minted = await world.admin.token_device({"peer": "shelf", "space": SPACE})
    async with SpaceClient(world.url, minted["token"]) as shelf:  # beats, runs nothing
        await shelf.device_put(SPACE, "shelf", {})
        t = await add(cli, "--name", "lamp", *YEARLY, "--pin", "shelf")
        code, out, err = await cli("triggers", "run", "lamp", "--wait", "0.5", "--note", "why")
    assert code == 1 and out.startswith(f"asked shelf to run {t['id']} (lamp) as manual:")
    assert err.startswith("baton: no_run_yet: shelf has not claimed manual:")
    assert f"within 0.5 s; `baton runs --trigger {t['id']}` shows its run once it ends" in err
    record = await world.admin.trigger_get(SPACE, t["id"])
    assert record["rev"] == 2 and out.split(" as ")[1].strip() == record["runAsked"]["key"]


async def test_a_run_claimed_but_not_ended_within_the_wait_says_so(
    cli: Cli, world: World, box: Device
):
    await world.admin.program_put(SPACE, "slow@v1", {"source": SLOW})
    t = await cli.json("triggers", "add", "--name", "slow", *YEARLY, "--program", "slow@v1")
    code, out, err = await cli("triggers", "run", "slow", "--wait", "1")
    assert code == 1 and out.startswith(f"asked box to run {t['id']} (slow) as manual:")
    assert err.startswith("baton: no_run_yet: box claimed manual:"), err
    assert ", no run within 1 s; `baton runs --trigger" in err


async def test_no_wait_answers_the_ask_and_bad_flags_are_exit_2(cli: Cli, world: World):
    minted = await world.admin.token_device({"peer": "shelf", "space": SPACE})
    async with SpaceClient(world.url, minted["token"]) as shelf:
        await shelf.device_put(SPACE, "shelf", {})
        t = await add(cli, "--name", "lamp", *YEARLY, "--pin", "shelf")
        asked = await cli.json("triggers", "run", "lamp", "--no-wait")
        code, out, _ = await cli("triggers", "run", "lamp", "--no-wait")
    assert (asked["triggerId"], asked["peer"], asked["rev"]) == (t["id"], "shelf", 2)
    assert asked["key"] == "manual:" + asked["requestedAt"]
    assert code == 0 and out.startswith("manual:") and out.strip() != asked["key"]
    assert "--wait" in await cli.fails(2, "triggers", "run", "lamp", "--wait", "0")
    assert "not allowed with" in await cli.fails(
        2, "triggers", "run", "lamp", "--wait", "5", "--no-wait"
    )
    await cli("triggers", "pause", "lamp")
    assert "paused" in await cli.fails(1, "triggers", "run", "lamp")


async def test_chat_watch_is_not_run_by_hand(cli: Cli, world: World):
    body = {
        "name": "Chat responder",
        "kind": "event",
        "program": "internal:chat-watch",
        "spec": {"dataset": "chat_messages", "objectId": world.chat},
    }
    await world.admin.trigger_put(SPACE, "chat-watch", body)
    err = await cli.fails(2, "triggers", "run", "chat-watch")
    assert err.startswith("baton: ID: chat-watch runs internal:chat-watch")
    err = await cli.fails(2, "triggers", "edit", "chat-watch", "--cron", "* * * * *")
    assert "kind" in err
