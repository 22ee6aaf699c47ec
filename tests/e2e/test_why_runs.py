# ruff: noqa: F811  (pytest fixtures imported from device_support are parameters here)
"""`why` of what a real device did with its fires: failed, breaker open, overlap, unknown program.

A real `Device` (its executor, worker processes) against a real space server; every
second a slot of each trigger. Each reason is produced by what the device really did,
and the space's answer is checked against the device's own run records.
"""

from __future__ import annotations

from typing import Any

from device_support import (  # noqa: F401  (the fixtures are used by name)
    SPACE,
    MakeDevice,
    Space,
    eventually,
    make_device,
    space,
    spaces,
)

EVERY_SECOND = {"kind": "cron", "spec": {"expr": "* * * * * *"}}
BOOM = "def main(args):\n    raise RuntimeError('the disk is on fire')\n"
SLOW = "import time\ndef main(args):\n    time.sleep(2.5)\n    return {'ok': True}\n"


async def why_of(space: Space, tid: str, key: str) -> dict[str, Any]:
    return dict(await space.api.trigger_why(SPACE, tid, key=key))


async def first_run(space: Space, tid: str, **want: str) -> dict[str, Any]:
    async def found() -> dict[str, Any] | None:
        runs = await space.runs(tid)
        return next((r for r in runs if all(r.get(k) == v for k, v in want.items())), None)

    return await eventually(found, what=f"a run of {tid} with {want}")


async def test_what_the_device_did_is_what_why_says(space: Space, make_device: MakeDevice) -> None:
    await space.publish("boom@v1", BOOM)
    await space.publish("slow@v1", SLOW)
    boom = (await space.trigger(name="boom", program="boom@v1", **EVERY_SECOND))["id"]
    slow = (await space.trigger(name="slow", program="slow@v1", **EVERY_SECOND))["id"]
    ghost = (await space.trigger(name="ghost", program="ghost@v1", **EVERY_SECOND))["id"]
    device = await make_device(peer="box")
    await device.active()

    failed = await first_run(space, boom, status="error")
    got = await why_of(space, boom, failed["key"])
    assert (got["verdict"], got["reason"]) == ("fired", "run_failed")
    assert "the disk is on fire" in got["detail"] and got["run"]["runId"] == failed["runId"]

    opened = await first_run(space, boom, reason="breaker_open")
    got = await why_of(space, boom, opened["key"])
    assert (got["verdict"], got["reason"]) == ("not_fired", "breaker_open")

    skipped = await first_run(space, slow, reason="overlap")
    got = await why_of(space, slow, skipped["key"])
    assert (got["verdict"], got["reason"]) == ("not_fired", "overlap")
    assert got["remedy"].startswith("the run before was still running: set `limits.overlap`")

    unknown = await first_run(space, ghost, reason="unknown_program")
    got = await why_of(space, ghost, unknown["key"])
    assert (got["verdict"], got["reason"]) == ("not_fired", "unknown_program")
    assert got["checks"][-1] == {"name": "run", "ok": False, "detail": got["detail"]}
