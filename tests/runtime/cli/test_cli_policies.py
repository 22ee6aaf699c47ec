"""The trigger policies from the CLI against a real space: `add`/`edit` flags, `show`
lines, `pause --until --note`, `backfill`, and each bad value refused naming its flag."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta

import pytest
from clikit import Cli

from core.vocab import iso


async def add(cli: Cli, *argv: str) -> dict:
    base = ("triggers", "add", "--name", "nudge", "--cron", "*/5 * * * *", "--program", "n@v1")
    return await cli.json(*base, *argv)


async def test_every_policy_flag_sets_its_field_and_show_says_so(cli: Cli):
    record = await add(
        cli,
        *("--retry", "3", "--backoff", "20", "--max-runs", "5", "--jitter", "30"),
        *("--start-at", "2026-12-01T00:00:00Z", "--end-at", "2027-01-01T00:00:00+01:00"),
        *("--budget", "3/1h", "--quiet-chat", f"{cli.world.chat}:120", "--overlap", "restart"),
    )
    assert record["retry"] == {"attempts": 3, "backoffSeconds": 20.0}
    assert record["window"] == {
        "startAt": "2026-12-01T00:00:00.000Z",
        "endAt": "2026-12-31T23:00:00.000Z",
    }
    assert (record["maxRuns"], record["jitterSeconds"]) == (5, 30.0)
    assert record["budget"] == {"runs": 3, "perSeconds": 3600.0}
    assert record["quietChat"] == {"objectId": cli.world.chat, "seconds": 120.0}
    assert record["limits"]["overlap"] == "restart"
    code, out, _ = await cli("triggers", "show", record["id"])
    assert code == 0
    lines = {" ".join(line.split()) for line in out.splitlines()}
    for line in (
        "retry 3 attempts, 20 s doubling, ≤ 600 s",
        "max runs 5 (0 ok so far)",
        "budget 3 runs per 3600 s",
        "jitter up to 30 s after each slot",
        "overlap restart",
    ):
        assert line in lines, out


async def test_edit_merges_a_policy_and_none_clears_it(cli: Cli):
    record = await add(cli, "--retry", "3", "--budget", "2/60")
    edited = await cli.json("triggers", "edit", record["id"], "--backoff", "5")
    assert edited["retry"]["attempts"] == 3 and edited["retry"]["backoffSeconds"] == 5.0
    cleared = await cli.json(
        "triggers", "edit", record["id"], "--retry", "none", "--budget", "none"
    )
    assert cleared.get("retry") is None and cleared.get("budget") is None


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (("--retry", "11"), "--retry:"),
        (("--retry", "two"), "--retry:"),
        (("--budget", "0/60"), "--budget:"),
        (("--budget", "3 per hour"), "--budget:"),
        (("--quiet-chat", "general"), "--quiet-chat:"),
        (("--jitter", "7200"), "--jitter:"),
        (("--max-runs", "0"), "--max-runs:"),
        (
            ("--start-at", "2026-12-02T00:00:00Z", "--end-at", "2026-12-01T00:00:00Z"),
            "--start-at/--end-at:",
        ),
        (("--end-at", "tomorrow"), "--end-at:"),
    ],
)
async def test_a_bad_policy_value_is_exit_2_naming_the_flag(cli: Cli, argv, flag):
    base = ("triggers", "add", "--name", "n", "--cron", "* * * * *", "--program", "n@v1")
    err = await cli.fails(2, *base, *argv)
    assert f"baton: {flag}" in err, err
    assert (await cli.world.admin.triggers("home"))["triggers"] == []  # nothing written


async def test_pause_until_snoozes_with_a_note_and_resume_lifts_it(cli: Cli, tmp_path):
    record = await add(cli)
    until = iso(datetime.now(UTC) + timedelta(hours=2))
    code, out, _ = await cli(
        "triggers", "pause", record["id"], "--until", until, "--note", "away, back at 5"
    )
    assert code == 0 and out.startswith(f"snoozed until {until}")
    snoozed = await cli.world.admin.trigger_get("home", record["id"])
    assert (snoozed["pausedUntil"], snoozed["activeSince"], snoozed["enabled"]) == (
        until,
        until,
        True,
    )
    notes = (
        sqlite3.connect(tmp_path / "space.db")
        .execute("SELECT note FROM history_revisions")
        .fetchall()
    )
    assert ("away, back at 5",) in notes
    resumed = await cli.json("triggers", "resume", record["id"])
    assert resumed.get("pausedUntil") is None and resumed["activeSince"] < until


async def test_backfill_dry_run_lists_the_slots_and_refuses_a_range_before_the_record(cli: Cli):
    record = await add(cli)
    since = datetime.fromisoformat(record["activeSince"])
    start, end = since, datetime.now(UTC)  # a range that has passed (none of it ahead)
    code, out, _ = await cli(
        "triggers", "backfill", record["id"], "--from", iso(start), "--to", iso(end), "--dry-run"
    )
    assert code == 0 and out.startswith(f"{record['id']} would run ")
    assert "0 already fired" in out.splitlines()[0]
    early = iso(since - timedelta(hours=1))
    err = await cli.fails(
        2, "triggers", "backfill", record["id"], "--from", early, "--to", iso(end)
    )
    assert "activeSince" in err


async def test_a_backfill_backwards_or_ahead_is_exit_2_naming_the_range(cli: Cli):
    """(Over 100 slots: tests/space/test_policy_state.py, with the space's clock moved.)"""
    record = await add(cli)
    since = datetime.fromisoformat(record["activeSince"])
    backfill = ("triggers", "backfill", record["id"])
    ahead = iso(since + timedelta(hours=3))
    err = await cli.fails(2, *backfill, "--from", iso(since), "--to", ahead)
    assert "`to`" in err and "still to come" in err, err
    err = await cli.fails(
        2, *backfill, "--from", iso(since + timedelta(minutes=5)), "--to", iso(since)
    )
    assert "`to`" in err and "before `from`" in err, err
    assert (await cli.world.admin.trigger_get("home", record["id"])).get("backfill") is None
