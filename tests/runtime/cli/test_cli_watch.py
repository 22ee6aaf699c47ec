"""LAST and NEXT in `triggers list` relative to now (RFC 3339 UTC in `--json`), and
`--watch S` on `triggers list` and `status`: a frame every S seconds, exit 0 on SIGINT."""

from __future__ import annotations

import asyncio
import signal
from datetime import UTC, datetime, timedelta

import pytest
from clikit import DEADLINE_S, SPACE, Cli, Follower

from core.vocab import iso
from runtime.cli.relative import relative

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("delta", "said"),
    [
        (timedelta(seconds=-12), "12s ago"),
        (timedelta(minutes=3, seconds=20), "in 3m"),
        (timedelta(milliseconds=400), "now"),
        (timedelta(seconds=59.9), "in 59s"),
        (timedelta(hours=-5, minutes=-59), "5h ago"),
        (timedelta(hours=47), "in 47h"),
        (timedelta(days=3, hours=2), "in 3d"),
    ],
)
def test_relative_is_the_largest_whole_unit(delta, said):
    assert relative(iso(NOW + delta), NOW) == said


@pytest.mark.parametrize("text", [None, "", "soon", "2026-12-01T09:00:00"])
def test_no_instant_is_a_dash(text):
    assert relative(text, NOW) == "-"


async def test_list_shows_last_and_next_relative_and_json_keeps_the_instants(cli: Cli):
    made = await cli.json(
        "triggers",
        "add",
        "--name",
        "soon",
        "--at",
        iso(datetime.now(UTC) + timedelta(minutes=10)),
        "--program",
        "p@v1",
    )
    await cli.world.admin.trigger_status(
        SPACE, made["id"], {"lastRunAt": iso(datetime.now(UTC) - timedelta(seconds=90))}
    )
    await cli.world.admin.trigger_status(
        SPACE, made["id"], {"nextFireAt": iso(datetime.now(UTC) + timedelta(minutes=10))}
    )
    code, out, _ = await cli("triggers", "list")
    header, row = out.splitlines()
    assert code == 0 and header.split()[-2:] == ["LAST", "NEXT"]
    assert row[header.index("LAST") :].split() in (
        ["1m", "ago", "in", "9m"],
        ["1m", "ago", "in", "10m"],
    )
    listed = (await cli.json("triggers", "list"))["triggers"][0]
    for name in ("lastRunAt", "nextFireAt"):
        assert datetime.fromisoformat(listed[name]).tzinfo and listed[name].endswith("Z")
        assert len(listed[name]) == len("2026-12-01T09:00:00.000Z")


async def frames(follower: Follower, head: str, count: int) -> list[list[str]]:
    """The first `count` frames: each from its head line to the next."""
    found: list[list[str]] = []
    async with asyncio.timeout(DEADLINE_S):
        while len(found) <= count:
            line = await follower.line()
            if line.startswith(head):
                found.append([line])
            elif found:
                found[-1].append(line)
    return found[:count]


@pytest.mark.e2e  # the CLI as a process, stopped by a signal
@pytest.mark.parametrize(
    ("argv", "head", "body"),
    [
        (("triggers", "list"), "every 0.5s: baton triggers list  ", "ID"),
        (("status",), "every 0.5s: baton status  ", "space"),
    ],
)
async def test_watch_redraws_then_exits_0_on_sigint(cli: Cli, argv, head, body):
    await cli.json("triggers", "add", "--name", "w", "--cron", "* * * * *", "--program", "p@v1")
    async with Follower.start(cli.world, *argv, "--watch", "0.5") as follower:
        first, second = await frames(follower, head, 2)
        for frame in (first, second):
            assert frame[0].endswith("Z") and any(body in line for line in frame), frame
        assert first[0] < second[0]  # a later instant each frame
        follower.proc.send_signal(signal.SIGINT)
        async with asyncio.timeout(DEADLINE_S):
            _, err = await follower.proc.communicate()
        assert follower.proc.returncode == 0, err
        assert b"Traceback" not in err


async def test_watch_takes_seconds_in_range(cli: Cli):
    err = await cli.fails(2, "triggers", "list", "--watch", "0")
    assert "--watch" in err
