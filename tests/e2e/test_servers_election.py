# ruff: noqa: F811  (pytest fixtures imported from device_support are parameters here)
"""Two devices on two space servers on one PostgreSQL database: one holder, each slot once.

Two in-process servers (`Spaces.on_postgres`, a 3 s lease) share the test's database
(tests/pgfixtures.py); device 1 talks to the first, device 2 to the second, in real time:
the lease and the claims are decided by PostgreSQL's clock, which a fake clock cannot
move. An every-second cron made through the second server fires on one device only,
each slot once and none skipped, and again so when the holder stops and the device on
the other server takes over.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from device_support import (  # noqa: F401  (the fixtures are used by name)
    SPACE,
    MakeDevice,
    Running,
    Space,
    Spaces,
    eventually,
    make_device,
    spaces,
)

from runtime.election.decision import scaled

LEASE = 3.0
QUICK = 'def main(args):\n    return {"ok": True}\n'
S = timedelta(seconds=1)


def slots(runs: list[dict]) -> list[datetime]:
    return sorted(datetime.fromisoformat(r["key"]) for r in runs)


def gaps(keys: list[datetime]) -> list[datetime]:
    """The seconds between the first slot and the last that did not run."""
    span = int((keys[-1] - keys[0]) / S)
    return sorted({keys[0] + i * S for i in range(span + 1)} - set(keys))


async def one_holder(space: Space, devices: list[Running], peers: set[str]) -> str:
    """Wait until the space's holder is one of `peers` and it alone may fire; never two."""

    async def settled() -> str | None:
        firing = {d.peer for d in devices if not d.task.done() and d.device.elector.may_fire()}
        assert len(firing) <= 1, f"two devices may fire at once: {firing}"
        active = (await space.api.election(SPACE)).active
        return active if active in peers and firing == {active} else None

    return await eventually(settled, timeout=20, what=f"one holder among {sorted(peers)}")


async def test_two_devices_on_two_servers_elect_one_holder_and_fire_each_slot_once(
    spaces: Spaces, make_device: MakeDevice, pg_dsn: str
) -> None:
    first = await spaces.on_postgres(pg_dsn, LEASE)
    second = await spaces.on_postgres(pg_dsn, LEASE)
    devices = [
        await make_device(space=first, lease=scaled(LEASE)),
        await make_device(space=second, lease=scaled(LEASE)),
    ]
    assert first.url != second.url
    await first.publish("quick@v1", QUICK)
    holder = await one_holder(first, devices, {"dev1", "dev2"})
    cron = await second.trigger(kind="cron", spec={"expr": "* * * * * *"}, program="quick@v1")

    async def runs_by(peer: str, count: int) -> list[dict] | None:
        await one_holder(first, devices, {peer})  # and still no second device firing
        runs = await second.runs(cron["id"])
        return runs if sum(r["peer"] == peer for r in runs) >= count else None

    runs = await eventually(lambda: runs_by(holder, 5), timeout=20, what=f"5 runs on {holder}")
    term = (await first.api.election(SPACE)).term
    assert {(r["peer"], r["term"]) for r in runs} == {(holder, term)}

    held = next(d for d in devices if d.peer == holder)
    await held.stop()  # a clean stop: it releases the lease; the other server's device takes it
    successor = next(d.peer for d in devices if d is not held)
    runs = await eventually(lambda: runs_by(successor, 4), timeout=20, what=f"4 on {successor}")
    fired = slots(runs)
    fires = await first.fires(cron["id"])
    assert len(set(fired)) == len(fired) and len({f["key"] for f in fires}) == len(fires)
    assert gaps(fired) == []  # the handover skipped no slot
    assert {r["peer"] for r in runs} == {holder, successor}
    claims = {f["key"]: (f["peer"], f["term"]) for f in fires}
    assert all(claims[r["key"]] == (r["peer"], r["term"]) for r in runs)
