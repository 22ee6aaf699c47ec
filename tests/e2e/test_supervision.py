# ruff: noqa: F811  (pytest fixtures imported from device_support are parameters here)
"""Device parts run supervised: a part that dies is restarted while the device holds no lease,
and a part that keeps dying stops the device with one line, its lease freed.

Input can no longer kill a part (records and messages are guarded where they are used), so
these tests inject the fault: the ticker's `tick` of one real device raises.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from device_support import (  # noqa: F401  (the fixtures are used by name)
    SPACE,
    MakeDevice,
    Space,
    eventually,
    make_device,
    space,
    spaces,
)

from core.peerwire import LeaseOut
from runtime.cli.main import main
from runtime.supervise import PartFailed


def break_ticker(device: Any, times: int) -> list[int]:
    """Make the device's ticker raise on its next `times` ticks; the count of raises so far."""
    raised = [0]
    tick = device.ticker.tick

    async def failing() -> int:
        if raised[0] < times:
            raised[0] += 1
            raise RuntimeError("injected fault")
        return await tick()

    device.ticker.tick = failing
    return raised


async def test_a_part_that_dies_gives_the_lease_up_and_comes_back(
    space: Space, make_device: MakeDevice
) -> None:
    first = await make_device()
    await first.active()
    second = await make_device()
    term = (await space.api.election(SPACE)).term
    raised = break_ticker(first.device, 1)
    first.device.ticker._wake.set()  # tick now rather than at the next slot
    await eventually(lambda: raised[0] == 1)

    async def retaken() -> LeaseOut | None:
        lease = await space.api.election(SPACE)
        return lease if lease.active and lease.term > term else None

    lease = await eventually(retaken)  # given up, then taken again: at a new term
    assert lease.active in (first.peer, second.peer)
    await eventually(lambda: first.device.supervisor.restarts.get("ticker") == 1)
    assert first.device.elector.status().parts_down == []
    assert not first.task.done() and not second.task.done()


async def test_a_part_that_keeps_dying_stops_the_device_and_frees_its_lease(
    space: Space, make_device: MakeDevice
) -> None:
    dev = await make_device()
    await dev.active()
    raised = break_ticker(dev.device, 1000)

    async def poke() -> None:
        while True:
            dev.device.ticker._wake.set()
            await asyncio.sleep(0.05)

    poking = asyncio.create_task(poke())
    try:
        async with asyncio.timeout(30):
            await asyncio.gather(dev.task, return_exceptions=True)
    finally:
        poking.cancel()
    with pytest.raises(PartFailed) as failed:
        dev.task.result()
    assert str(failed.value) == "device part ticker died 5 times: RuntimeError: injected fault"
    assert raised[0] == 5
    lease = await space.api.election(SPACE)
    assert lease.active is None  # released, not left to lapse
    listed = {d.peer: d for d in (await space.api.devices(SPACE)).devices}
    assert listed[dev.peer].live is False  # signed off


def test_the_cli_exits_non_zero_with_one_line_when_a_part_cannot_be_kept_running(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def fails(self: Any) -> None:
        raise PartFailed("device part ticker died 5 times: RuntimeError: injected fault")

    monkeypatch.setattr("runtime.device.Device.run", fails)
    token = tmp_path / "device.token"
    token.write_text("btd_x\n")
    token.chmod(0o600)
    args = ["device", "--peer", "p", "--url", "http://127.0.0.1:9", "--token-file", str(token)]
    assert main([*args, "--space", SPACE]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["baton device: device part ticker died 5 times: RuntimeError: injected fault"]
