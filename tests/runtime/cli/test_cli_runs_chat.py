"""`baton runs` and `baton chat` against a real space server, and their `--follow` forms.

Followers run as subprocesses (they stop on SIGTERM, exit 0): the test starts one,
waits for its first lines, writes to the space, and waits under a deadline for the
line the write must produce.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from clikit import SPACE, Cli, Follower, World

from core.clock import iso
from runtime.cli.runs import Seen


def run_body(n: int, trigger: str = "trg_a", status: str = "ok", **extra: Any) -> dict[str, Any]:
    started = datetime.now(UTC) - timedelta(minutes=10) + timedelta(seconds=n)
    return {
        "runId": f"run_{n:04d}",
        "triggerId": trigger,
        "program": "p@v1",
        "peer": "box",
        "term": 1,
        "key": iso(started),
        "startedAt": iso(started),
        "finishedAt": iso(started + timedelta(milliseconds=12)),
        "durationMs": 12.0,
        "status": status,
        "lateMs": 3.0,
        **extra,
    }


async def post_runs(world: World) -> None:
    await world.admin.run_create(SPACE, run_body(1))
    await world.admin.run_create(SPACE, run_body(2, "trg_b", "skipped", reason="overlap"))
    await world.admin.run_create(SPACE, run_body(3, error="Traceback …\nValueError: bad"))
    await world.admin.run_create(SPACE, run_body(4, status="error", error="x\nKeyError: 'k'"))


async def test_runs_lists_oldest_first_with_filters(cli: Cli, world: World):
    code, out, _ = await cli("runs")
    assert (code, out) == (0, "no runs in space home\n")
    await post_runs(world)
    code, out, _ = await cli("runs")
    header, *rows = out.splitlines()
    assert code == 0 and header.split()[:4] == ["STARTED", "RUN", "TRIGGER", "STATUS"]
    assert [r.split()[1] for r in rows] == ["run_0001", "run_0002", "run_0003", "run_0004"]
    assert rows[0].index("run_0001") == header.index("RUN")
    assert rows[0].split()[0].endswith("Z") and len(rows[0].split()[0]) == 24
    assert rows[1].split()[3:] == ["skipped", "-", "3", "ms", "p@v1", "overlap"]
    assert rows[3].endswith("KeyError: 'k'")
    every = (await cli.json("runs"))["runs"]
    assert [r["runId"] for r in every] == ["run_0001", "run_0002", "run_0003", "run_0004"]
    only = await cli.json("runs", "--trigger", "trg_b")
    assert [r["runId"] for r in only["runs"]] == ["run_0002"]
    errors = await cli.json("runs", "--status", "error")
    assert [r["runId"] for r in errors["runs"]] == ["run_0004"]
    latest = await cli.json("runs", "--limit", "2")
    assert [r["runId"] for r in latest["runs"]] == ["run_0003", "run_0004"]
    since = iso(datetime.fromisoformat(every[1]["startedAt"]))
    first_two = await cli.json("runs", "--since", since, "--limit", "2")
    assert [r["runId"] for r in first_two["runs"]] == ["run_0002", "run_0003"]
    recent = await cli.json("runs", "--since", "1h")
    assert len(recent["runs"]) == 4
    assert (await cli.json("runs", "--since", "1m"))["runs"] == []
    code, out, _ = await cli("runs", "--trigger", "trg_nope")
    assert (code, out) == (0, "no runs in space home matching --trigger trg_nope\n")


async def test_runs_name_the_trigger_where_it_has_a_name(cli: Cli, world: World):
    body = {
        "name": "nightly-backup",
        "kind": "cron",
        "spec": {"expr": "0 3 * * *"},
        "program": "p@v1",
    }
    tid = (await world.admin.trigger_create(SPACE, body))["id"]
    await world.admin.run_create(SPACE, run_body(1, tid))
    await world.admin.run_create(SPACE, run_body(2, "trg_gone"))  # deleted, or never named
    code, out, _ = await cli("runs")
    header, *rows = out.splitlines()
    column = header.split().index("TRIGGER")
    assert code == 0 and [r.split()[column] for r in rows] == ["nightly-backup", "trg_gone"]
    assert [r["triggerId"] for r in (await cli.json("runs"))["runs"]] == [tid, "trg_gone"]


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--status", "fine"], "--status: must be one of ok, error, timeout"),
        (["--since", "yesterday"], "--since: 'yesterday' is neither an RFC 3339 instant"),
        (["--since", "2026-12-01T09:00:00"], "--since: "),
        (["--limit", "0"], "--limit: must be a whole number from 1 to 1000"),
        (["--limit", "many"], "--limit: "),
    ],
)
async def test_runs_bad_input_is_exit_2(cli: Cli, argv: list[str], field: str):
    assert (await cli.fails(2, "runs", *argv)).startswith(f"baton: {field}")
    code, out, err = await cli("runs", *argv, "--json")
    assert (code, out) == (2, "") and json.loads(err)["error"] == "bad_input"
    assert json.loads(err)["detail"].startswith(field)


@pytest.mark.e2e  # `baton … --follow` as a process
async def test_runs_follow_prints_new_runs_until_stopped(world: World):
    await world.admin.run_create(SPACE, run_body(1))
    async with Follower.start(world, "runs", "--follow") as follower:
        assert (await follower.line()).split()[:2] == ["STARTED", "RUN"]
        assert "run_0001" in await follower.line()
        await world.admin.run_create(SPACE, run_body(2, status="timeout"))
        line = await follower.until("run_0002")
        assert "timeout" in line
        await world.admin.run_create(SPACE, run_body(3, "trg_b"))
        assert "run_0003" in await follower.line()  # each run once
        assert await follower.stop() == 0


@pytest.mark.e2e  # `baton … --follow` as a process
async def test_runs_follow_json_is_one_run_per_line_and_filtered(world: World):
    async with Follower.start(world, "runs", "--follow", "--trigger", "trg_b", "--json") as f:
        await world.admin.run_create(SPACE, run_body(1))
        await world.admin.run_create(SPACE, run_body(2, "trg_b"))
        assert json.loads(await f.line())["runId"] == "run_0002"
        assert await f.stop() == 0
        assert f.proc.stdout is not None


async def test_chat_send_and_tail(cli: Cli, world: World):
    code, out, _ = await cli("chat", "send", "hello there")
    assert code == 0 and out.startswith("sent msg_") and f"to chat {world.chat}" in out
    sent = await cli.json("chat", "send", "second")
    assert (sent["text"], sent["seq"], sent["objectId"]) == ("second", 2, world.chat)
    await world.admin.chat_send(SPACE, world.chat, {"text": "hi!", "agent": {"name": "bot"}})
    code, out, _ = await cli("chat", "tail")
    lines = out.splitlines()
    assert code == 0 and [line.split("  ", 1)[1].split()[0] for line in lines] == [
        "user",
        "user",
        "bot",
    ]
    assert lines[0].endswith("hello there") and lines[0][:24].endswith("Z")
    tail = await cli.json("chat", "tail", "--limit", "2")
    assert [m["text"] for m in tail["messages"]] == ["second", "hi!"]
    other = (await world.admin.chat_create(SPACE, {"name": "other"}))["objectId"]
    await cli("chat", "send", "elsewhere", "--chat", other)
    assert [m["text"] for m in (await cli.json("chat", "tail", "--chat", other))["messages"]] == [
        "elsewhere"
    ]


async def test_chat_refusals(cli: Cli):
    assert (await cli.fails(2, "chat", "send", "  ")).startswith("baton: TEXT: must not be empty")
    assert (await cli.fails(2, "chat", "tail", "--limit", "0")).startswith("baton: --limit: ")
    err = await cli.fails(1, "chat", "send", "x", "--chat", "chat_nope")
    assert err.startswith("baton: unknown_chat: ")
    assert (await cli.fails(1, "chat", "tail", "--chat", "chat_nope")).startswith(
        "baton: unknown_chat: "
    )


@pytest.mark.e2e  # `baton … --follow` as a process
async def test_chat_tail_follow_prints_new_messages_until_stopped(world: World):
    await world.admin.chat_send(SPACE, world.chat, {"text": "before"})
    async with Follower.start(world, "chat", "tail", "--follow") as follower:
        assert (await follower.line()).endswith("user          before")
        await world.admin.chat_send(SPACE, world.chat, {"text": "during"})
        assert (await follower.line()).endswith("user          during")
        await world.admin.chat_send(SPACE, world.chat, {"text": "ok", "agent": {"name": "bot"}})
        assert (await follower.line()).endswith("bot           ok")
        assert await follower.stop() == 0


@pytest.mark.e2e  # `baton … --follow` as a process
async def test_chat_tail_follow_shows_a_streamed_reply_grow_and_end(world: World):
    """A reply written in place (`event: update`) is shown as it grows and as it ends (a
    line that comes over the stream means the follower is subscribed: the edits after it
    come live)."""
    await world.admin.chat_send(SPACE, world.chat, {"text": "before"})
    async with Follower.start(world, "chat", "tail", "--follow") as follower:
        assert (await follower.line()).endswith("before")
        agent = {"name": "bot", "done": False}
        sent = await world.admin.chat_send(SPACE, world.chat, {"text": "Two", "agent": agent})
        assert (await follower.line()).endswith("bot …         Two")
        edit = world.admin.chat_edit
        await edit(SPACE, world.chat, sent.message_id, {"text": "Two meetings"})
        assert (await follower.line()).endswith("bot …         Two meetings")
        await edit(SPACE, world.chat, sent.message_id, {"text": "Two meetings.", "done": True})
        assert (await follower.line()).endswith("bot           Two meetings.")
        assert await follower.stop() == 0
    async with Follower.start(world, "chat", "tail", "-f", "--limit", "1", "--json") as follower:
        assert json.loads(await follower.line())["agent"]["done"] is True
        sent = await world.admin.chat_send(SPACE, world.chat, {"text": "a", "agent": agent})
        assert json.loads(await follower.line())["text"] == "a"
        await edit(SPACE, world.chat, sent.message_id, {"text": "ab", "done": True})
        grown = json.loads(await follower.line())
        assert (grown["messageId"], grown["text"], grown["agent"]["done"]) == (
            sent.message_id,
            "ab",
            True,
        )
        assert await follower.stop() == 0


@pytest.mark.e2e  # `baton … --follow` as a process
async def test_chat_tail_follow_of_an_empty_chat_misses_nothing(world: World):
    async with Follower.start(world, "chat", "tail", "--follow", "--json") as follower:
        await world.admin.chat_send(SPACE, world.chat, {"text": "first"})
        message = json.loads(await follower.line())
        assert (message["text"], message["seq"]) == ("first", 1)
        assert await follower.stop() == 0


def _run(run_id: str, started: str) -> dict[str, Any]:
    return {"runId": run_id, "startedAt": started}


def test_the_follower_prints_each_run_once_and_asks_from_before_the_newest():
    seen = Seen(floor=datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    first = [_run("a", "2026-12-01T09:00:00.000Z"), _run("b", "2026-12-01T09:30:00.000Z")]
    assert [r["runId"] for r in seen.new(first)] == ["a", "b"]
    assert seen.since() == datetime(2026, 12, 1, 9, 15, tzinfo=UTC)  # LOOKBACK before b
    late = _run("c", "2026-12-01T09:20:00.000Z")  # started before b, recorded after it
    older = _run("d", "2026-12-01T08:59:59.000Z")  # before the floor: never asked for
    assert [r["runId"] for r in seen.new([*first, late, older])] == ["c"]
    assert seen.new([late]) == []
    assert Seen(floor=None).since() < datetime(1970, 1, 1, tzinfo=UTC)
