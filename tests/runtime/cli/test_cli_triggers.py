"""`baton triggers` against a real space server: every verb, in text and `--json`, and refusals.

Bad input is exit 2 with one line naming the flag and nothing written; an unknown
id is exit 1. `run` has its own file (test_cli_trigger_run.py): it needs a device.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from clikit import SPACE, Cli, World

BERLIN_MARCH_SUNDAYS = ["--cron", "30 2 * 3 0", "--tz", "Europe/Berlin"]


async def add(cli: Cli, *argv: str) -> dict[str, Any]:
    return await cli.json("triggers", "add", "--program", "counter@v1", *argv)


async def test_add_a_cron_then_list_and_show_it_with_dst_notes(cli: Cli):
    record = await add(cli, "--name", "march", *BERLIN_MARCH_SUNDAYS, "--args", '{"n": 1}')
    assert record["id"].startswith("trg_") and record["rev"] == 1
    assert (record["kind"], record["spec"]["expr"], record["spec"]["tz"]) == (
        "cron",
        "30 2 * 3 0",
        "Europe/Berlin",
    )
    assert (record["args"], record["owner"], record["enabled"]) == ({"n": 1}, "", True)
    code, out, _ = await cli("triggers", "list")
    header, row = out.splitlines()
    assert code == 0 and header.split()[:4] == ["ID", "NAME", "KIND", "WHEN"]
    assert row.startswith(record["id"]) and row.index("march") == header.index("NAME")
    assert "30 2 * 3 0 Europe/Berlin" in row and "(floating)" in row
    listed = await cli.json("triggers", "list")
    assert [t["id"] for t in listed["triggers"]] == [record["id"]]

    shown = await cli.json("triggers", "show", record["id"])
    assert set(shown) == {"record", "next", "runs", "why"} and shown["runs"] == []
    assert (shown["why"]["verdict"], shown["why"]["reason"]) == ("not_due", "before_active")
    assert shown["record"]["id"] == record["id"] and len(shown["next"]) == 10
    assert all(f["at"].endswith(".000Z") for f in shown["next"])  # one instant format
    assert [f["at"] for f in shown["next"]] == sorted(f["at"] for f in shown["next"])
    shifted = [f for f in shown["next"] if f["dst"] == "shifted"]  # the last Sunday of March
    assert shifted and all(datetime.fromisoformat(f["local"]).hour == 3 for f in shifted)
    assert {f["dst"] for f in shown["next"]} <= {None, "shifted"}
    code, out, _ = await cli("triggers", "show", record["id"])
    assert code == 0 and f"id            {record['id']}\n" in out
    assert "next fires:\n  UTC " in out and "LOCAL (Europe/Berlin)" in out
    assert "shifted: its wall time fell in the spring gap" in out
    assert "\nlast slot     " in out and "not_due: before_active (`baton why` says why)" in out
    assert out.rstrip().endswith("last runs:\n  (none)")


async def test_add_a_once_and_a_chat_trigger(cli: Cli, world: World):
    once = await add(cli, "--name", "later", "--at", "2999-01-01T09:00:00+01:00", "--paused")
    assert once["spec"]["at"] == "2999-01-01T09:00:00+01:00" and once["enabled"] is False
    assert (await cli.json("triggers", "show", once["id"]))["next"] == []  # paused
    await cli("triggers", "resume", once["id"])
    [fire] = (await cli.json("triggers", "show", once["id"]))["next"]
    assert fire == {
        "at": "2999-01-01T08:00:00.000Z",
        "local": "2999-01-01T09:00:00.000+01:00",
        "dst": None,
    }
    unix = await add(cli, "--name", "unix", "--at", "4102444800")
    assert unix["spec"]["at"] == 4102444800.0
    chat = await add(cli, "--name", "on chat", "--chat", world.chat)
    assert chat["kind"] == "event"
    assert chat["spec"] == {"dataset": "chat_messages", "objectId": world.chat, "filter": None}
    shown = await cli.json("triggers", "show", chat["id"])
    assert shown["next"] == []
    code, out, _ = await cli(
        "triggers", "add", "--name", "x", "--at", "2999-01-01T00:00:00Z", "--program", "counter@v1"
    )
    assert code == 0 and out.startswith("created trg_") and out.endswith(" (x)\n")


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--cron", "every day"], "--cron: "),
        (["--cron", "0 0 30 2 *"], "--cron: cron expression '0 0 30 2 *' never matches"),
        (["--cron", "* * * * *", "--tz", "Mars/Olympus"], "--tz: unknown time zone"),
        (["--at", "tomorrow"], "--at: 'tomorrow' is not an RFC 3339 instant"),
        (["--at", "2026-12-01T09:00:00"], "--at: '2026-12-01T09:00:00' has no offset"),
        (["--at", "2026-12-01T09:00:00Z", "--tz", "UTC"], "--tz: only with --cron"),
        (["--at", "2026-12-01T09:00:00Z", "--catchup", "latest"], "--catchup: only with --cron"),
        (["--cron", "* * * * *", "--catchup", "all"], "argument --catchup: invalid choice"),
        (["--cron", "* * * * *", "--args", "{nope"], "--args: not JSON"),
        (["--cron", "* * * * *", "--args", "[1]"], "--args: must be a JSON object"),
        (["--cron", "* * * * *", "--args", '{"n": 1e999}'], "--args: args: number inf"),
        (["--cron", "* * * * *", "--program", "Counter@v1"], "--program: "),
        (["--cron", "* * * * *", "--program", "internal:chat-watch"], "--program: "),
        (["--cron", "* * * * *", "--name", " "], "--name: must not be empty"),
        (["--cron", "* * * * *", "--at", "2026-12-01T09:00:00Z"], "argument --at: not allowed"),
        (["--chat", "chat_nope"], "--chat: space home has no chat 'chat_nope'"),
        (["--cron", "* * * * *", "--pin", "laptop"], "--pin: space home has never seen device"),
    ],
)
async def test_add_refuses_bad_input_with_exit_2_naming_the_flag(
    cli: Cli, argv: list[str], field: str
):
    base = {"--name": "t", "--program": "counter@v1"}
    flags = [x for k, v in base.items() if k not in argv for x in (k, v)]
    err = await cli.fails(2, "triggers", "add", *flags, *argv)
    assert err.startswith(f"baton: {field}"), err
    assert (await cli.json("triggers", "list"))["triggers"] == []  # nothing written


async def test_edit_changes_only_what_it_is_given(cli: Cli):
    t = await add(
        cli,
        "--name",
        "t",
        "--cron",
        "0 9 * * *",
        "--tz",
        "Europe/Berlin",
        "--catchup",
        "latest",
        "--args",
        '{"a": 1}',
    )
    edited = await cli.json(
        "triggers", "edit", t["id"], "--name", "renamed", "--cron", "0 10 * * *"
    )
    assert edited["name"] == "renamed" and edited["rev"] == 2
    assert edited["spec"] == {**t["spec"], "expr": "0 10 * * *"}  # zone and catch-up kept
    assert edited["args"] == {"a": 1}
    code, out, _ = await cli("triggers", "edit", t["id"], "--tz", "UTC", "--args", '{"b": 2}')
    assert (code, out) == (0, f"edited {t['id']}: args, spec\n")
    now = await cli.json("triggers", "show", t["id"])
    assert (now["record"]["spec"]["tz"], now["record"]["args"]) == ("UTC", {"b": 2})
    assert now["next"][0]["at"].endswith("T10:00:00.000Z")
    code, out, _ = await cli("triggers", "edit", t["id"], "--name", "renamed")
    assert (code, out) == (0, f"{t['id']} already says so: nothing changed\n")
    once = await cli.json("triggers", "edit", t["id"], "--at", "2999-01-01T00:00:00Z")
    assert (once["kind"], once["spec"]["at"]) == ("once", "2999-01-01T00:00:00Z")
    err = await cli.fails(2, "triggers", "edit", t["id"], "--tz", "UTC")
    assert err.startswith(f"baton: --tz: trigger {t['id']} is a once trigger")
    assert (await cli.fails(2, "triggers", "edit", t["id"])).startswith("baton: nothing to change")
    err = await cli.fails(2, "triggers", "edit", t["id"], "--cron", "61 * * * *")
    assert err.startswith("baton: --cron: ")
    assert (await cli.fails(2, "triggers", "edit", t["id"], "--args", "1")).startswith(
        "baton: --args: must be a JSON object"
    )
    assert (await cli.json("triggers", "show", t["id"]))["record"]["kind"] == "once"  # unchanged


async def test_pause_resume_repin_float(cli: Cli, world: World):
    t = await add(cli, "--name", "t", "--cron", "*/5 * * * *")
    code, out, _ = await cli("triggers", "pause", t["id"])
    assert (code, out) == (0, f"paused {t['id']} (t)\n")
    assert (await cli.json("triggers", "show", t["id"]))["record"]["enabled"] is False
    resumed = await cli.json("triggers", "resume", t["id"])
    assert resumed["enabled"] is True
    err = await cli.fails(2, "triggers", "repin", t["id"], "laptop")
    assert "PEER: space home has never seen device 'laptop' (seen: none yet)" in err
    assert "--force" in err
    assert (await cli.json("triggers", "show", t["id"]))["record"]["owner"] == ""
    forced = await cli.json("triggers", "repin", t["id"], "laptop", "--force")
    assert forced["owner"] == "laptop"
    await world.admin.device_put(SPACE, "phone", {"name": "Phone"})
    code, out, _ = await cli("triggers", "repin", t["id"], "phone")
    assert (code, out) == (0, f"pinned to phone: {t['id']} (t)\n")
    err = await cli.fails(2, "triggers", "repin", t["id"], "tablet")
    assert "(seen: phone)" in err
    floated = await cli.json("triggers", "float", t["id"])
    assert floated["owner"] == ""
    code, out, _ = await cli("triggers", "list")
    assert "(floating)" in out
    pinned = await add(cli, "--name", "p", "--cron", "* * * * *", "--pin", "phone")
    assert pinned["owner"] == "phone"


async def test_rm(cli: Cli):
    t = await add(cli, "--name", "t", "--cron", "*/5 * * * *")
    code, out, _ = await cli("triggers", "rm", t["id"])
    assert (code, out) == (0, f"deleted {t['id']}\n")
    assert (await cli.json("triggers", "list"))["triggers"] == []
    err = await cli.fails(1, "triggers", "rm", t["id"])
    assert err == f"baton: unknown_trigger: no trigger '{t['id']}' in space 'home'\n"


@pytest.mark.parametrize(
    "verb",
    [
        ["show"],
        ["edit", "--name", "x"],
        ["pause"],
        ["resume"],
        ["float"],
        ["rm"],
        ["run"],
        ["repin", "--force", "PEER"],
    ],
)
async def test_an_unknown_id_is_exit_1_with_a_clear_line(cli: Cli, verb: list[str]):
    argv = [verb[0], "trg_0000000000000000", *[("phone" if a == "PEER" else a) for a in verb[1:]]]
    err = await cli.fails(1, "triggers", *argv)
    assert err == "baton: unknown_trigger: no trigger 'trg_0000000000000000' in space 'home'\n"
    code, out, err = await cli("triggers", *argv, "--json")
    assert (code, out) == (1, "")
    assert json.loads(err)["error"] == "unknown_trigger"


async def test_an_undecodable_record_is_shown_but_not_run_nor_edited(
    cli: Cli, world: World, tmp_path: Path
):
    newer = {
        "id": "trg_newer",
        "name": "from a newer build",
        "kind": "webhook",
        "rev": 1,
        "spec": {"path": "/hook"},
        "program": "counter@v1",
    }
    conn = sqlite3.connect(tmp_path / "space.db")
    try:
        conn.execute(
            "INSERT INTO triggers VALUES (?, ?, 1, ?)", [SPACE, "trg_newer", json.dumps(newer)]
        )
        conn.commit()
    finally:
        conn.close()
    code, out, _ = await cli("triggers", "list")
    assert code == 0 and "undecodable" in out and "(webhook)" in out
    shown = await cli.json("triggers", "show", "trg_newer")
    assert shown["record"]["undecodable"] is True and shown["next"] == []
    code, out, _ = await cli("triggers", "show", "trg_newer")
    assert code == 0 and "decode error" in out
    assert (await cli.fails(1, "triggers", "run", "trg_newer")).startswith(
        "baton: undecodable_record: trigger trg_newer does not decode"
    )
    assert (await cli.fails(1, "triggers", "edit", "trg_newer", "--name", "x")).startswith(
        "baton: undecodable_record: "
    )
    assert (await cli.json("triggers", "rm", "trg_newer")) == {"id": "trg_newer", "deleted": True}


async def test_pause_json_and_text_agree_with_the_record(cli: Cli):
    t = await add(cli, "--name", "t", "--cron", "*/5 * * * *")
    paused = await cli.json("triggers", "pause", t["id"])
    assert paused["enabled"] is False and paused["id"] == t["id"]
    code, out, _ = await cli("triggers", "list")
    assert code == 0 and " paused " in out
    code, out, _ = await cli("triggers", "show", t["id"])
    assert "enabled       no (paused)" in out and "next fires:\n  (none)" in out
    code, out, _ = await cli("triggers", "resume", t["id"])
    assert (code, out) == (0, f"resumed {t['id']} (t)\n")
    code, out, _ = await cli("triggers", "float", t["id"])
    assert (code, out) == (0, f"floating {t['id']} (t)\n")


@pytest.mark.e2e  # `baton triggers …` as processes
async def test_foot_guns_warn_on_stderr_or_are_refused(cli: Cli, world: World):
    """Each of these did what it was told silently, exit 0: now the user is told."""
    code, out, err = await cli.process(
        "triggers", "add", "--name", "t", "--cron", "*/5 * * * *", "--program", "later@v1"
    )
    assert code == 0 and out.startswith("created trg_"), err
    assert err == (
        "baton: warning: program later@v1 is not published in space home: each due fire is "
        "skipped (unknown_program) until `baton programs publish` puts it there\n"
    )
    tid = out.split()[1]
    code, out, err = await cli.process("triggers", "edit", tid, "--program", "never@v1")
    assert code == 0 and "program never@v1 is not published" in err, err

    code, out, err = await cli.process(
        "triggers", "add", "--name", "t", "--cron", "* * * * *", "--program", "later@v1"
    )
    assert (code, out) == (1, "") and err.startswith("baton: name_taken: "), err
    assert f"trigger {tid} in space 'home' is named 't' already" in err and err.count("\n") == 1

    await world.admin.device_put(SPACE, "box", {"name": "Box"})
    await world.admin.device_put(SPACE, "box", {"stopped": True})
    code, out, err = await cli.process("triggers", "repin", tid, "box")
    assert (code, out) == (0, f"pinned to box: {tid} (t)\n"), err
    assert err.startswith("baton: warning: device 'box' is offline (last seen 20"), err
    assert err.endswith("Z): nothing runs this trigger until it is back\n"), err

    code, out, err = await cli.process("triggers", "rm", "chat-watch")
    assert (code, out) == (2, ""), err
    assert err.startswith("baton: ID: chat-watch is the chat responder, seeded again"), err
    assert "`baton triggers pause chat-watch`" in err


@pytest.mark.e2e  # `baton triggers …` as processes
async def test_a_trigger_is_addressed_by_its_name_with_did_you_mean(cli: Cli, world: World):
    made = await add(cli, "--name", "digest", "--cron", "0 8 * * *")
    code, out, err = await cli.process("triggers", "pause", "digest")
    assert (code, out) == (0, f"paused {made['id']} (digest)\n"), err
    code, out, err = await cli.process("triggers", "show", "digest", "--json")
    assert code == 0 and json.loads(out)["record"]["enabled"] is False, err
    code, out, err = await cli.process("triggers", "resume", "digets")
    assert (code, out) == (1, "")
    assert (
        err
        == "baton: unknown_trigger: no trigger 'digets' in space 'home'; did you mean 'digest'?\n"
    )
    await world.admin.run_create(
        SPACE,
        {
            "runId": "run_1",
            "triggerId": made["id"],
            "key": "k",
            "startedAt": "2026-12-01T09:00:00.000Z",
            "status": "ok",
        },
    )
    code, out, err = await cli.process("runs", "--trigger", "digest", "--json")
    assert code == 0 and [r["runId"] for r in json.loads(out)["runs"]] == ["run_1"], err
    code, out, err = await cli.process("triggers", "rm", "digest")
    assert (code, out) == (0, f"deleted {made['id']}\n"), err
