"""The CLI's tables read the space's answers as lenient Structs; `--json` prints them as sent:
a field a newer device or space adds is printed, and breaks no table."""

from __future__ import annotations

import pytest
from clikit import SPACE, Cli, World

from core.answers import RunOut
from runtime.cli.runs import run_row
from runtime.cli.talk import read
from runtime.client.api import ApiError

NEWER = {  # a newer device's report: parts and fields this build does not know
    "responder": "builtin",
    "chatWatch": {"ready": False, "reason": "warming up", "chats": [{"waiting": 2, "x": 1}]},
    "containment": {"level": "partial", "weaker": ["no landlock"], "sandbox": "v9"},
    "subscriptions": [{"chat": "chat_x", "state": "live", "triggers": ["t"], "lagMs": 12}],
    "gpu": {"busy": True},
}


async def test_status_prints_a_newer_devices_report_whole_and_tables_what_it_knows(
    cli: Cli, world: World
):
    await world.admin.device_put(SPACE, "box", {"name": "Box", "status": NEWER})
    found = await cli.json("status")
    (device,) = found["devices"]
    assert device["status"]["gpu"] == {"busy": True}  # as sent, unknown parts too
    assert found["subscriptions"] == [{"peer": "box", **NEWER["subscriptions"][0]}]
    assert found["responders"] == [
        {
            "peer": "box",
            "responder": "builtin",
            "ready": False,
            "reason": "warming up",
            "waiting": 2,
        }
    ]
    code, out, _ = await cli("status")
    lines = out.splitlines()
    assert code == 0
    box = next(line for line in lines if line.startswith("box ") and "Box" in line)
    assert box.split()[-2:] == ["partial", "-"]  # containment read; no clock reported
    assert "  box: no landlock" in lines
    assert any(line.split()[:4] == ["box", "chat_x", "live", "t"] for line in lines), out
    assert any("not ready: warming up" in line for line in lines), out


async def test_a_report_that_does_not_read_shows_as_an_empty_one(cli: Cli, world: World):
    odd = {"clock": "not an object", "containment": {"level": 3}}
    await world.admin.device_put(SPACE, "box", {"name": "Box", "status": odd})
    code, out, _ = await cli("status")
    box = next(line for line in out.splitlines() if line.startswith("box "))
    assert code == 0 and box.split()[-2:] == ["unknown", "-"]
    assert (await cli.json("status"))["devices"][0]["status"] == odd  # printed as sent


def test_an_answer_is_read_leniently_and_a_misfit_is_the_spaces_fault():
    sent = {
        "runId": "run_1",
        "triggerId": "trg_a",
        "status": "deferred",  # a status a newer space may add: shown as it is
        "startedAt": "2026-12-01T09:00:00.000Z",
        "durationMs": 5,
        "shardId": 7,  # a field a newer space may add: ignored by the row
    }
    run = read(sent, RunOut, "runs")
    assert run_row(run)[:5] == ("2026-12-01T09:00:00.000Z", "run_1", "trg_a", "deferred", "-")
    assert run_row(run, {"trg_a": "backup"})[2] == "backup"  # by name where it has one
    with pytest.raises(ApiError) as refused:
        read({**sent, "startedAt": 5}, RunOut, "runs")
    assert refused.value.code == "malformed_answer"
    assert refused.value.detail.startswith("runs: Expected `str`, got `int` - at `$.startedAt`")
