"""`baton runs show RUN` against a real space server: the whole record, `--json`, an unknown id."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from clikit import SPACE, Cli, World

from core.clock import iso

DUE = datetime.now(UTC)  # set again by the autouse fixture as each test starts


@pytest.fixture(autouse=True)
def due() -> None:
    """Five minutes ago, whole seconds: the runs' due instant."""
    global DUE
    DUE = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)


def failed_run(trigger: str) -> dict[str, Any]:
    started = DUE + timedelta(milliseconds=40)
    return {
        "runId": "run_show_1",
        "triggerId": trigger,
        "program": "digest@v2",
        "peer": "box",
        "term": 3,
        "key": iso(DUE),
        "dueAt": iso(DUE),
        "startedAt": iso(started),
        "finishedAt": iso(started + timedelta(milliseconds=250)),
        "durationMs": 250.0,
        "status": "error",
        "result": {"ok": False, "seen": 7},
        "error": "Traceback (most recent call last):\n  File 'x'\nValueError: no mail",
        "stderrTail": "warming up\nfetching 7 messages",
        "lateMs": 40.0,
        "phases": {"wakeMs": 5.0, "claimMs": 10.0, "queueMs": 0.0, "spawnMs": 25.0},
        "attempt": 2,
    }


async def digest(world: World) -> str:
    body = {"name": "digest", "kind": "cron", "spec": {"expr": "0 8 * * *"}, "program": "d@v1"}
    return str((await world.admin.trigger_create(SPACE, body))["id"])


async def test_show_prints_the_whole_record(cli: Cli, world: World) -> None:
    tid = await digest(world)
    await world.admin.run_create(SPACE, failed_run(tid))
    code, out, err = await cli("runs", "show", "run_show_1")
    assert (code, err) == (0, "")
    fields = dict(line.split(None, 1) for line in out.split("\n\n")[0].splitlines())
    assert fields["run"] == "run_show_1" and fields["status"] == "error"
    assert fields["trigger"] == f"digest ({tid})"
    assert fields["key"] == iso(DUE) and fields["peer"] == "box" and fields["term"] == "3"
    assert fields["attempt"] == "2" and fields["reason"] == "-"
    assert fields["due"] == f"{iso(DUE)} (5m ago)"
    assert fields["started"].startswith(iso(DUE + timedelta(milliseconds=40)))
    assert fields["ended"].startswith(iso(DUE + timedelta(milliseconds=290)))
    assert fields["duration"] == "250 ms" and fields["late"] == "40 ms"
    assert fields["phases"] == "wake 5 ms, claim 10 ms, queue 0 ms, spawn 25 ms"
    assert '\nresult:\n  {\n    "ok": false,\n    "seen": 7\n  }\n' in out
    assert "\nerror:\n  Traceback (most recent call last):\n" in out
    assert "\n  ValueError: no mail\n" in out
    assert out.endswith("\nstderr:\n  warming up\n  fetching 7 messages\n")


async def test_show_of_a_skipped_run_of_a_deleted_trigger(cli: Cli, world: World) -> None:
    tid = await digest(world)
    run = {"runId": "run_skip", "triggerId": tid, "startedAt": iso(DUE), "status": "skipped"}
    await world.admin.run_create(SPACE, {**run, "reason": "overlap", "key": iso(DUE)})
    await world.admin.trigger_delete(SPACE, tid)
    code, out, _ = await cli("runs", "show", "run_skip")
    assert code == 0
    fields = dict(line.split(None, 1) for line in out.split("\n\n")[0].splitlines())
    assert fields["trigger"] == f"{tid} (deleted)"
    assert fields["reason"] == "overlap" and fields["due"] == "-" and fields["phases"] == "-"
    assert out.endswith("\nresult: (none)\n\nerror: (none)\n\nstderr: (none)\n")


async def test_show_json_is_the_raw_record_on_one_line(cli: Cli, world: World) -> None:
    tid = await digest(world)
    await world.admin.run_create(SPACE, failed_run(tid))
    code, out, _ = await cli("runs", "show", "run_show_1", "--json")
    assert code == 0 and out.count("\n") == 1
    got = json.loads(out)
    listed = (await world.admin.runs(SPACE))["runs"]
    assert got == listed[0]
    assert got["stderrTail"] == "warming up\nfetching 7 messages"
    assert got["dueAt"] == iso(DUE) and got["phases"]["spawnMs"] == 25.0


async def test_an_unknown_run_is_exit_1_naming_it(cli: Cli) -> None:
    err = await cli.fails(1, "runs", "show", "run_nope")
    assert err == "baton: unknown_run: no run 'run_nope' in space 'home'\n"
    code, out, err = await cli("runs", "show", "run_nope", "--json")
    assert (code, out) == (1, "")
    detail = "no run 'run_nope' in space 'home'"
    assert json.loads(err) == {"error": "unknown_run", "detail": detail}


async def test_runs_without_a_verb_still_lists(cli: Cli, world: World) -> None:
    tid = await digest(world)
    await world.admin.run_create(SPACE, failed_run(tid))
    code, out, _ = await cli("runs", "--limit", "5")
    assert code == 0 and "run_show_1" in out.splitlines()[1]
    err = await cli.fails(2, "runs", "shw", "x")
    assert err.startswith("baton: runs: unknown verb 'shw': one of show")
