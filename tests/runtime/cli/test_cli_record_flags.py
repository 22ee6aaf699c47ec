"""Every field a user writes, set from `baton triggers add` and `edit` against a real space
and read back from it; a bad value is exit 2 with the sentence the space's 400 says."""

from __future__ import annotations

import json
from typing import Any

import pytest
from clikit import SPACE, Cli

from runtime.client.api import ApiError

CRON = ("--cron", "*/5 * * * *")


def dig(record: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        record = record[part]
    return record


# flag, value, where the record holds it, what it holds: each on `add` and on `edit`
FIELDS = [
    (("--timeout", "30"), "limits.timeoutSeconds", 30),
    (("--timeout", "2.5"), "limits.timeoutSeconds", 2.5),
    (("--memory-mb", "256"), "limits.memoryMB", 256),
    (("--overlap", "queue"), "limits.overlap", "queue"),
    (("--max-queue", "7"), "limits.maxQueue", 7),
    (("--network", "none"), "limits.network", "none"),
    (("--disk-mb", "16"), "limits.diskMB", 16),
    (("--grace", "90"), "spec.graceSeconds", 90),
    (("--catchup", "latest"), "spec.catchup", "latest"),
    (("--retry", "3"), "retry.attempts", 3),
    (("--backoff", "4"), "retry.backoffSeconds", 4),
    (("--start-at", "2026-12-01T00:00:00Z"), "window.startAt", "2026-12-01T00:00:00.000Z"),
    (("--end-at", "2099-01-01T00:00:00+01:00"), "window.endAt", "2098-12-31T23:00:00.000Z"),
    (("--max-runs", "5"), "maxRuns", 5),
    (("--jitter", "20"), "jitterSeconds", 20),
    (("--budget", "3/1h"), "budget", {"runs": 3, "perSeconds": 3600}),
]


async def add(cli: Cli, *argv: str) -> dict[str, Any]:
    base = ("triggers", "add", "--name", "t", "--program", "t@v1")
    return await cli.json(*base, *(argv if "--at" in argv or "--chat" in argv else CRON), *argv)


async def stored(cli: Cli, tid: str) -> dict[str, Any]:
    return await cli.world.admin.trigger_get(SPACE, tid)


@pytest.mark.parametrize(("argv", "path", "value"), FIELDS)
async def test_add_sets_the_field_and_the_space_keeps_it(cli: Cli, argv, path, value):
    created = await add(cli, *argv)
    assert dig(await stored(cli, created["id"]), path) == value


@pytest.mark.parametrize(("argv", "path", "value"), FIELDS)
async def test_edit_sets_the_field_and_the_space_keeps_it(cli: Cli, argv, path, value):
    created = await add(cli)
    before = await stored(cli, created["id"])
    edited = await cli.json("triggers", "edit", "t", *argv)
    after = await stored(cli, created["id"])
    assert dig(after, path) == value and edited["rev"] == before["rev"] + 1
    assert (after["name"], after["spec"]["expr"]) == ("t", before["spec"]["expr"])  # the rest stays


async def test_quiet_chat_on_add_and_edit(cli: Cli):
    chat = cli.world.chat
    created = await add(cli, "--quiet-chat", f"{chat}:60")
    assert (await stored(cli, created["id"]))["quietChat"] == {"objectId": chat, "seconds": 60}
    await cli.json("triggers", "edit", "t", "--quiet-chat", f"{chat}:5")
    assert (await stored(cli, created["id"]))["quietChat"]["seconds"] == 5


async def test_edit_chat_makes_an_event_trigger_and_back(cli: Cli):
    created = await add(cli, "--overlap", "skip")
    await cli.json("triggers", "edit", "t", "--chat", cli.world.chat)
    record = await stored(cli, created["id"])
    spec = record["spec"]
    assert (record["kind"], spec["dataset"], spec["objectId"]) == (
        "event",
        "chat_messages",
        cli.world.chat,
    )
    err = await cli.fails(2, "triggers", "edit", "t", "--grace", "5")
    assert err.startswith("baton: --grace: ") and "event" in err
    err = await cli.fails(2, "triggers", "edit", "t", "--chat", "chat_nope")
    assert "--chat" in err and (await stored(cli, created["id"]))["rev"] == record["rev"]
    await cli.json("triggers", "edit", "t", "--cron", "0 9 * * *", "--grace", "120")
    back = await stored(cli, created["id"])
    assert back["spec"] == {
        "expr": "0 9 * * *",
        "tz": "UTC",
        "catchup": "none",
        "graceSeconds": 120,
    }


async def test_grace_on_a_once_and_none_restores_the_default(cli: Cli):
    created = await add(cli, "--at", "2099-01-01T09:00:00+01:00", "--grace", "600")
    assert (await stored(cli, created["id"]))["spec"]["graceSeconds"] == 600
    await cli.json("triggers", "edit", "t", "--grace", "none")
    assert (await stored(cli, created["id"]))["spec"]["graceSeconds"] == 3600


async def test_catchup_on_edit_moves_a_default_grace_with_it(cli: Cli):
    created = await add(cli)
    assert (await stored(cli, created["id"]))["spec"]["graceSeconds"] == 30  # none's default
    await cli.json("triggers", "edit", "t", "--catchup", "latest")
    assert (await stored(cli, created["id"]))["spec"]["graceSeconds"] == 3600  # latest's
    await cli.json("triggers", "edit", "t", "--grace", "900")
    await cli.json("triggers", "edit", "t", "--catchup", "none")
    assert (await stored(cli, created["id"]))["spec"]["graceSeconds"] == 900  # a choice: kept


@pytest.mark.parametrize(
    ("argv", "flag", "path"),
    [
        (("--timeout", "0"), "--timeout", "$.limits.timeoutSeconds"),
        (("--timeout", "90000"), "--timeout", "$.limits.timeoutSeconds"),
        (("--memory-mb", "-1"), "--memory-mb", "$.limits.memoryMB"),
        (("--max-queue", "100001"), "--max-queue", "$.limits.maxQueue"),
        (("--disk-mb", "0"), "--disk-mb", "$.limits.diskMB"),
        (("--grace", "700000"), "--grace", "$.spec.graceSeconds"),
    ],
)
async def test_a_bad_value_is_exit_2_with_the_spaces_own_sentence(cli: Cli, argv, flag, path):
    base = ("triggers", "add", "--name", "t", *CRON, "--program", "t@v1")
    err = await cli.fails(2, *base, *argv)
    field, value = path.removeprefix("$.").split("."), float(argv[1])
    body: dict[str, Any] = {"name": "t", "kind": "cron", "program": "t@v1"}
    body["spec"] = {"expr": CRON[1], "tz": "UTC"}
    body.setdefault(field[0], {})[field[1]] = int(value) if value.is_integer() else value
    with pytest.raises(ApiError) as refused:  # what the space says of the same record
        await cli.world.admin.trigger_create(SPACE, body)
    assert refused.value.status == 400 and path in refused.value.detail
    assert err == f"baton: {flag}: {refused.value.detail}\n"
    assert (await cli.world.admin.triggers(SPACE))["triggers"] == []


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (("--timeout", "soon"), "--timeout: 'soon' is not a number"),
        (("--timeout", "nan"), "--timeout: 'nan' is not a number"),
        (("--memory-mb", "1.5"), "--memory-mb: '1.5' is not a whole number"),
        (("--network", "lan"), "--network"),
    ],
)
async def test_a_value_of_the_wrong_form_names_the_flag(cli: Cli, argv, said):
    created = await add(cli)
    err = await cli.fails(2, "triggers", "edit", "t", *argv)
    assert said in err
    assert (await stored(cli, created["id"]))["rev"] == created["rev"]


@pytest.mark.e2e  # the CLI as a process, as a user runs it
async def test_every_flag_as_a_process_on_add_then_edit(cli: Cli):
    code, out, err = await cli.process(
        *("triggers", "add", "--name", "all", *CRON, "--program", "t@v1", "--json"),
        *("--timeout", "30", "--memory-mb", "256", "--overlap", "parallel", "--max-queue", "9"),
        *("--network", "any", "--disk-mb", "32", "--grace", "45", "--catchup", "latest"),
        *("--retry", "2", "--backoff", "3", "--max-runs", "4", "--jitter", "5"),
        *("--start-at", "2026-12-01T00:00:00Z", "--budget", "2/1m"),
        *("--quiet-chat", f"{cli.world.chat}:10"),
    )
    assert code == 0, err
    tid = json.loads(out)["id"]
    record = await stored(cli, tid)
    assert record["limits"] == {
        "timeoutSeconds": 30,
        "memoryMB": 256,
        "overlap": "parallel",
        "maxQueue": 9,
        "network": "any",
        "diskMB": 32,
    }
    assert record["spec"] == {"expr": CRON[1], "tz": "UTC", "catchup": "latest", "graceSeconds": 45}
    assert (record["retry"]["attempts"], record["maxRuns"], record["jitterSeconds"]) == (2, 4, 5)
    assert record["budget"] == {"runs": 2, "perSeconds": 60}
    code, out, err = await cli.process(
        *("triggers", "edit", "all", "--timeout", "10", "--memory-mb", "128"),
        *("--overlap", "restart", "--max-queue", "1", "--network", "space", "--disk-mb", "8"),
        *("--catchup", "none", "--grace", "none", "--retry", "none", "--max-runs", "none"),
    )
    assert (code, err) == (0, ""), err
    assert out.startswith(f"edited {tid}: limits, maxRuns, retry, spec")
    record = await stored(cli, tid)
    assert record["limits"] == {
        "timeoutSeconds": 10,
        "memoryMB": 128,
        "overlap": "restart",
        "maxQueue": 1,
        "network": "space",
        "diskMB": 8,
    }
    assert record["spec"]["graceSeconds"] == 30 and record["spec"]["catchup"] == "none"
    assert record["retry"] is None and record["maxRuns"] is None
    code, out, err = await cli.process("triggers", "edit", "all", "--timeout", "86401")
    assert (code, out) == (2, "") and err.startswith("baton: --timeout: ")
    assert "- at `$.limits.timeoutSeconds`" in err and err.count("\n") == 1
