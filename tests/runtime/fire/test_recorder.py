"""The recorder is the one writer of runs, stamps and turns: no other device module calls
the routes that write them (the CLI's `baton space` commands are the user's own writes)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from msgspec import convert

from core.clock import FakeClock
from core.wire import RunIn, Stamps
from runtime.client.api import SpaceClient
from runtime.client.seat import Seat
from runtime.fire.recorder import Recorder
from space.app import create_app, default_admin_token_file
from triggers.records import PeerId, Trigger, load

RUNTIME = Path(__file__).resolve().parents[3] / "runtime"
WRITES = {"run_create", "trigger_status", "turn_create"}
ALLOWED = {"fire/recorder.py", "client/api.py"}  # the writer, and the client that defines the calls


def calls_of_writes(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        f"{path.name}:{node.lineno} {node.func.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in WRITES
    ]


def test_only_the_recorder_writes_runs_stamps_and_turns() -> None:
    modules = [
        p
        for p in RUNTIME.rglob("*.py")
        if p.relative_to(RUNTIME).as_posix() not in ALLOWED and p.parent.name != "cli"
    ]
    assert len(modules) > 10  # the scan sees the device's modules
    found = [hit for path in modules for hit in calls_of_writes(path)]
    assert found == []
    assert calls_of_writes(RUNTIME / "fire" / "recorder.py")  # and the recorder does write them


async def test_a_run_the_space_refuses_for_its_body_is_written_as_an_error(
    tmp_path: Path, aiohttp_server: Any
) -> None:
    """What the device's own check of a result misses, the space's refusal catches: the
    record is sent again without its result, as an `error` saying why, with its stamps."""
    db = tmp_path / "space.db"
    server = await aiohttp_server(create_app(db))
    admin = SpaceClient(str(server.make_url("")), default_admin_token_file(db).read_text().strip())
    try:
        await admin.space_create({"id": "home"})
        made = await admin.trigger_create(
            "home", {"name": "t", "kind": "cron", "spec": {"expr": "* * * * *"}, "program": "x@v1"}
        )
        record = load(made)
        assert isinstance(record, Trigger)
        recorder = Recorder(Seat(admin, "home", PeerId("p"), FakeClock()))
        run = {
            "runId": "run_1",
            "triggerId": record.id,
            "program": "x@v1",
            "startedAt": "2026-12-01T09:00:00.000Z",
            "status": "ok",
            "result": {"n": 2**70},
        }
        stamps = {"lastStatus": "ok", "lastStatusDetail": ""}
        await recorder.ended(record, convert(run, RunIn), convert(stamps, Stamps))
        [stored] = (await admin.runs("home", trigger=record.id))["runs"]
        assert (stored["status"], stored["result"]) == ("error", None), stored
        assert "refused by the space: integer beyond 64 bits" in stored["error"], stored
        stamped = await admin.trigger_get("home", record.id)
        assert stamped["lastStatus"] == "error", stamped
    finally:
        await admin.close()
