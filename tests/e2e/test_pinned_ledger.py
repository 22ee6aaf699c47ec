# ruff: noqa: F811  (pytest fixtures imported from device_support are parameters here)
"""A pinned trigger runs on while its space is away (issue 24; SPEC "Who runs what").

A device with a pinned `* * * * * *` trigger and its ledger on disk; the space stopped
for 4 s (its port refuses) and started again on the same file and port. Every slot the
device was up for has exactly one run record and one claim, no key twice; the slots of
the outage ran while the space was away (on time, not when it came back), and the
ledger handed every one over.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from device_support import (  # noqa: F401  (the fixtures are used by name)
    MakeDevice,
    Space,
    eventually,
    make_device,
    space,
    spaces,
)

from runtime.fire.ledger import DONE

pytestmark = pytest.mark.e2e
AWAY_S = 4.0  # how long the space is down: the fault itself, not a wait for a result


def whole_seconds(start: datetime, end: datetime) -> list[str]:
    """The slot keys of `* * * * * *` strictly after `start` up to `end`."""
    at = start.replace(microsecond=0) + timedelta(seconds=1)
    out = []
    while at <= end:
        out.append(at.isoformat(timespec="milliseconds").replace("+00:00", "Z"))
        at += timedelta(seconds=1)
    return out


async def test_a_pinned_trigger_runs_on_while_the_space_is_away(
    space: Space, make_device: MakeDevice, tmp_path: Path
) -> None:
    await space.publish("echo@v1")
    dev = await make_device(ledger_file=tmp_path / "dev1" / "ledger.sqlite")
    every = {"kind": "cron", "spec": {"expr": "* * * * * *"}, "program": "echo@v1"}
    tid = (await space.trigger(**every, name="mine", owner=dev.peer))["id"]
    before = await space.until_runs(tid, 3)
    first = datetime.fromisoformat(before[0]["key"])

    await space.stop()
    gone = datetime.now(UTC)
    await asyncio.sleep(AWAY_S)
    back = datetime.now(UTC)
    await space.start()

    handover = dev.device.handover
    assert handover is not None
    await eventually(lambda: not handover.away and handover.ledger.waiting() == 0, timeout=20)
    end = back + timedelta(seconds=2)
    expected = whole_seconds(first - timedelta(seconds=1), end)
    await eventually(lambda: _has(space, tid, expected), timeout=20)
    states = handover.ledger.outcomes().values()
    await dev.stop()

    runs = await space.runs(tid)
    keys = Counter(r["key"] for r in runs)
    assert [k for k, n in keys.items() if n > 1] == [], "a slot has two run records"
    missing = [k for k in expected if k not in keys]
    assert missing == [], f"slots the device was up for without a run: {missing}"
    claims = Counter(f["key"] for f in await space.fires(tid))
    assert [k for k, n in claims.items() if n > 1] == []
    assert set(claims) == set(keys), "a run without its claim, or a claim without its run"

    outage = whole_seconds(gone, back)
    assert len(outage) >= 2
    away = [r for r in runs if r["key"] in outage]
    assert [r["status"] for r in away] == ["ok"] * len(outage)
    # ran while the space was away: started before it came back, not handed a late claim
    assert all(datetime.fromisoformat(r["startedAt"]) < back for r in away), away
    assert states and {state for state, _ in states} == {DONE}


async def _has(space: Space, tid: str, keys: list[str]) -> bool:
    got = {r["key"] for r in await space.runs(tid)}
    return all(k in got for k in keys)
