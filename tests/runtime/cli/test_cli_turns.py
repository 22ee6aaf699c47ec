"""`baton turns` against a real space: the table, `--chat`, `--limit`, `--since`, `--json`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from clikit import SPACE, Cli, World

from core.clock import iso

BASE = datetime.now(UTC)  # set again by the autouse fixture as each test starts


@pytest.fixture(autouse=True)
def base() -> None:
    """Half past 30 minutes ago, whole seconds: the turns start a minute apart after it."""
    global BASE
    BASE = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30, seconds=30)


BERLIN = timezone(timedelta(hours=1))


def turn(n: int, chat: str, **fields: Any) -> dict[str, Any]:
    started = BASE + timedelta(minutes=n, microseconds=123456)
    return {
        "turnId": f"turn_{n:02d}",
        "space": SPACE,
        "objectId": chat,
        "messageIds": [f"msg_{n}_{i}" for i in range(fields.pop("messages", 1))],
        "calls": 1,
        "replies": 1,
        "startedAt": started.astimezone(BERLIN).isoformat(),  # an offset and microseconds
        "finishedAt": (started + timedelta(seconds=2)).isoformat(),
        "durationMs": 2000.0,
        "outcome": "ok",
        **fields,
    }


async def post_turns(world: World) -> str:
    other = (await world.admin.chat_create(SPACE, {"name": "side"}))["objectId"]
    await world.admin.turn_create(SPACE, turn(1, world.chat, messages=3, calls=2))
    await world.admin.turn_create(SPACE, turn(2, other))
    error = "Traceback …\nConnectionError: model unreachable"
    await world.admin.turn_create(SPACE, turn(3, world.chat, outcome="error", error=error))
    return str(other)


async def test_turns_table_in_one_instant_format(cli: Cli, world: World) -> None:
    code, out, _ = await cli("turns")
    assert (code, out) == (0, "no turns in space home\n")
    await post_turns(world)
    code, out, _ = await cli("turns")
    header, *rows = out.splitlines()
    assert code == 0 and header.split() == [
        "STARTED",
        "AGO",
        "TURN",
        "CHAT",
        "OUTCOME",
        "DURATION",
        "MESSAGES",
        "REPLIES",
        "CALLS",
        "PEER",
        "ERROR",
    ]
    assert [r.split()[3] for r in rows] == ["turn_01", "turn_02", "turn_03"], out
    first = rows[0].split()
    assert first[0] == iso(BASE + timedelta(minutes=1, microseconds=123456))  # UTC, ms, Z
    assert first[1:3] == ["29m", "ago"]
    assert first[4:] == [world.chat, "ok", "2000", "ms", "3", "1", "2", "-"], out
    assert rows[2].endswith("ConnectionError: model unreachable")
    assert rows[0].index("turn_01") == header.index("TURN")


async def test_turns_filters_and_json(cli: Cli, world: World) -> None:
    other = await post_turns(world)
    got = await cli.json("turns")
    assert [t["turnId"] for t in got["turns"]] == ["turn_01", "turn_02", "turn_03"]
    assert got["turns"][0]["startedAt"] == iso(BASE + timedelta(minutes=1, microseconds=123456))
    mine = await cli.json("turns", "--chat", world.chat)
    assert [t["turnId"] for t in mine["turns"]] == ["turn_01", "turn_03"]
    side = await cli.json("turns", "--chat", other)
    assert [t["turnId"] for t in side["turns"]] == ["turn_02"]
    latest = await cli.json("turns", "--limit", "2")
    assert [t["turnId"] for t in latest["turns"]] == ["turn_02", "turn_03"]
    since = await cli.json("turns", "--since", iso(BASE + timedelta(minutes=2)), "--limit", "1")
    assert [t["turnId"] for t in since["turns"]] == ["turn_02"]
    assert (await cli.json("turns", "--since", "1m"))["turns"] == []
    code, out, _ = await cli("turns", "--json")
    assert out.count("\n") == 1  # one compact document, as every verb's --json
    code, out, _ = await cli("turns", "--chat", "chat_nope")
    assert (code, out) == (0, "no turns in space home matching --chat chat_nope\n")


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--limit", "0"], "--limit: must be a whole number from 1 to 1000"),
        (["--limit", "x"], "--limit: "),
        (["--since", "yesterday"], "--since: 'yesterday' is neither an RFC 3339 instant"),
    ],
)
async def test_turns_bad_input_is_exit_2(cli: Cli, argv: list[str], field: str) -> None:
    assert (await cli.fails(2, "turns", *argv)).startswith(f"baton: {field}")
    code, out, err = await cli("turns", *argv, "--json")
    assert (code, out) == (2, "") and json.loads(err)["error"] == "bad_input"
