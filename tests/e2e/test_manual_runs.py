"""`baton triggers run` with real device processes: the owning device runs it, once.

SPEC "CLI conventions": `triggers run` asks the device that owns the trigger to run it
now, a fire with key `manual:<instant>` claimed like any other, so it runs where its
hardware is. Two `baton device` processes (a holds the lease, b stands by) on one
`baton space serve`; the CLI is a process of its own. Each test reads what the space
recorded: the run, its peer and key, the claim ledger and its refusals.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path

from support import eventually, fires_of, runs_of
from test_failover import SETTLE, SPACE, Household, house

__all__ = ["house"]  # the fixture, from the failover tests

YEARLY = {"kind": "cron", "spec": {"expr": "0 0 1 1 *"}, "program": "quick@v1"}


async def baton(house: Household, name: str, *argv: str) -> tuple[int, str]:
    """`baton ARGV` as a process against the house's space, with the admin token."""
    where = ("--url", house.urls[0], "--token-file", str(house.procs.logs / "admin.token"))
    return await house.procs.run(name, *argv, *where, "--space", SPACE, timeout=60)


async def two_devices(house: Household) -> None:
    """a holds the lease (it came first), b is live beside it."""
    await house.start("a")
    assert await house.holder() == "a"
    await house.start("b")
    assert await house.holder() == "a"


def refusals(db: Path, key: str) -> list[tuple[str, str]]:
    """The claim ledger's refusals of `key`: (peer, code)."""
    conn = sqlite3.connect(db)
    try:
        sql = "SELECT peer, code FROM history_refusals WHERE key = ?"
        return [(r[0], r[1]) for r in conn.execute(sql, [key]).fetchall()]
    finally:
        conn.close()


async def test_a_trigger_pinned_to_b_run_from_the_cli_runs_on_b_once(house: Household) -> None:
    await two_devices(house)
    lamp = await house.api.trigger_create(SPACE, {**YEARLY, "name": "lamp", "owner": "b"})
    code, out = await baton(house, "cli-run", "triggers", "run", "lamp", "--json")
    assert code == 0, out
    run = json.loads(out.strip().splitlines()[-1])
    assert (run["peer"], run["status"], run["triggerId"]) == ("b", "ok", lamp["id"])
    assert run["key"].startswith("manual:") and run["key"].endswith("Z")
    assert run["lateMs"] is not None and run["dueAt"] == run["key"].removeprefix("manual:")
    claims = [f for f in await fires_of(house.api, SPACE, lamp["id"]) if f["key"] == run["key"]]
    assert [(f["peer"], f["key"]) for f in claims] == [("b", run["key"])]

    # b restarts: it sees the ask again, and the claim it already made refuses a second run
    assert await house.devices["b"].stop(signal.SIGTERM) == 0
    await house.start("b")
    db = house.procs.logs / "space.db"
    await eventually(
        lambda: ("b", "already_claimed") in refusals(db, run["key"]),
        timeout=SETTLE,
        what="b's restart handing the ask over again, refused by its claim",
    )
    runs = await runs_of(house.api, SPACE, lamp["id"])
    assert [r["runId"] for r in runs] == [run["runId"]]

    # the text form: what was asked of whom, then the run
    code, out = await baton(house, "cli-text", "triggers", "run", lamp["id"], "--note", "again")
    assert code == 0, out
    assert f"asked b to run {lamp['id']} (lamp) as manual:" in out and "status    ok" in out


async def test_an_offline_owner_is_exit_1_naming_it_and_nothing_is_asked(
    house: Household,
) -> None:
    await two_devices(house)
    lamp = await house.api.trigger_create(SPACE, {**YEARLY, "name": "lamp", "owner": "b"})
    assert await house.devices["b"].stop(signal.SIGTERM) == 0  # it signs off: offline at once
    code, out = await baton(house, "cli-offline", "triggers", "run", "lamp")
    assert code == 1
    assert "device_offline: trigger" in out and "pinned to 'b', which is offline" in out
    record = await house.api.trigger_get(SPACE, lamp["id"])
    assert record["rev"] == 1 and record.get("runAsked") is None


async def test_no_wait_prints_the_key_and_the_lease_holder_runs_a_floating_one(
    house: Household,
) -> None:
    await two_devices(house)
    free = await house.api.trigger_create(SPACE, {**YEARLY, "name": "free"})
    code, out = await baton(house, "cli-nowait", "triggers", "run", "free", "--no-wait")
    assert code == 0, out
    key = out.strip().splitlines()[-1]
    assert key.startswith("manual:")

    async def ran() -> list[dict] | None:
        runs = [r for r in await runs_of(house.api, SPACE, free["id"]) if r["key"] == key]
        return runs or None

    [run] = await eventually(ran, timeout=SETTLE, what="the floating trigger's manual run")
    assert (run["peer"], run["status"]) == ("a", "ok")
