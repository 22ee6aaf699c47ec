"""Programs (immutable, checked), device heartbeats, run records with rollups, trigger state."""

from __future__ import annotations

import hashlib

import pytest
from aiohttp.test_utils import TestClient
from space_support import SPACE, Api, FakeClock

from space.app import create_app, default_admin_token_file
from space.appstate import RunRetention

S = f"/spaces/{SPACE}"
SOURCE = "__any_tool__ = True\n\ndef main(args):\n    return {'ok': True}\n"


BOTH_STORES = True  # tokens, devices, programs, spaces and state answer from the store seam


async def test_publish_is_immutable(api: Api) -> None:
    status, body = await api.put(f"{S}/programs/triage@v1", {"source": SOURCE})
    assert status == 201 and body["anyTool"] is True and len(body["sha256"]) == 64
    status, again = await api.put(f"{S}/programs/triage@v1", {"source": SOURCE})
    assert status == 200 and again == body
    status, err = await api.put(f"{S}/programs/triage@v1", {"source": SOURCE + "# changed\n"})
    assert status == 409 and err["error"] == "program_exists"
    status, got = await api.get(f"{S}/programs/triage@v1")
    assert status == 200 and got["source"] == SOURCE and got["createdAt"]
    status, listing = await api.get(f"{S}/programs")
    assert [p["ref"] for p in listing["programs"]] == ["triage@v1"]
    assert "source" not in listing["programs"][0]


@pytest.mark.parametrize(
    ("ref", "source", "code", "fragment"),
    [
        ("Bad@v1", SOURCE, "invalid_program_ref", "name@vN"),
        ("ok@v0", SOURCE, "invalid_program_ref", "name@vN"),
        ("ok@v1", "def main(:\n", "invalid_program", "line 1"),
        ("ok@v1", "x = 1\n\n\ndef main(a)\n", "invalid_program", "line 4"),
        ("ok@v1", "def helper():\n    pass\n", "invalid_program", "no top-level `def main"),
        ("ok@v1", "__any_tool__ = yes\ndef main(a): pass\n", "invalid_program", "__any_tool__"),
        ("ok@v1", "def main():\n    pass\n", "invalid_program", "line 1: `main` must accept"),
        ("ok@v1", "main = lambda args: 1\n", "invalid_program", "no top-level `def main"),
        ("ok@v1", "__any_tool__ = 1\ndef main(a): pass\n", "invalid_program", "__any_tool__"),
        ("internal:chat-watch", SOURCE, "invalid_program_ref", "name@vN"),
    ],
)
async def test_bad_programs_are_refused(
    api: Api, ref: str, source: str, code: str, fragment: str
) -> None:
    status, body = await api.put(f"{S}/programs/{ref}", {"source": source})
    assert status == 400 and body["error"] == code and fragment in body["detail"]
    assert (await api.get(f"{S}/programs"))[1]["programs"] == []


@pytest.mark.parametrize(
    ("source", "any_tool"),
    [
        ("__any_tool__: bool = True\ndef main(a): pass\n", True),
        ("__any_tool__ = True\n__any_tool__ = False\ndef main(a): pass\n", False),
        ("def main(a): pass\n", False),
    ],
)
async def test_any_tool_is_read_as_the_device_reads_it(
    api: Api, source: str, any_tool: bool
) -> None:
    status, body = await api.put(f"{S}/programs/tool@v1", {"source": source})
    assert status == 201 and body["anyTool"] is any_tool
    assert body["sha256"] == hashlib.sha256(source.encode()).hexdigest()


async def test_program_size_is_capped(api: Api) -> None:
    big = "def main(a):\n    pass\n" + "#" * (256 * 1024)
    status, body = await api.put(f"{S}/programs/big@v1", {"source": big})
    assert status == 413 and body["error"] == "program_too_large"


@pytest.mark.sqlite_only  # moves the fake clock
async def test_heartbeats_and_liveness(api: Api, space_clock: FakeClock) -> None:
    status, dev = await api.put(f"{S}/devices/box", {"name": "Box", "priority": 10})
    assert status == 200 and dev["live"] is True and dev["priority"] == 10
    space_clock.advance(10)
    assert (await api.call("PUT", f"{S}/devices/laptop", data=b""))[0] == 200
    space_clock.advance(10)
    _, listing = await api.get(f"{S}/devices")
    live = {d["peer"]: d["live"] for d in listing["devices"]}
    assert live == {"box": False, "laptop": True}
    status, dev = await api.put(f"{S}/devices/box", {})
    assert dev["name"] == "Box" and dev["priority"] == 10  # kept when not sent
    assert dev["upSince"] == dev["lastSeen"] == "2026-12-01T09:00:20.000Z"


@pytest.mark.sqlite_only  # the fake clock's instants
async def test_up_since_restarts_with_a_new_instance_and_a_clean_stop_ends_live(
    api: Api, space_clock: FakeClock
) -> None:
    _, dev = await api.put(f"{S}/devices/box", {"instance": "i1"})
    started = dev["upSince"]
    space_clock.advance(5)
    _, dev = await api.put(f"{S}/devices/box", {"instance": "i1"})
    assert dev["upSince"] == started and dev["lastSeen"] != started  # one unbroken run
    space_clock.advance(2)
    _, dev = await api.put(f"{S}/devices/box", {"instance": "i2"})  # restarted within the window
    assert dev["upSince"] == dev["lastSeen"] == "2026-12-01T09:00:07.000Z"
    _, dev = await api.put(f"{S}/devices/box", {"stopped": True})
    assert dev["live"] is False and dev["stopped"] is True
    space_clock.advance(1)
    _, dev = await api.put(f"{S}/devices/box", {"instance": "i2"})  # back after a clean stop
    assert dev["live"] is True and dev["upSince"] == "2026-12-01T09:00:08.000Z"


@pytest.mark.sqlite_only  # moves the fake clock
async def test_a_device_that_is_not_live_shows_no_live_subscription(
    api: Api, space_clock: FakeClock
) -> None:
    report = {"subscriptions": [{"chat": "c1", "state": "live"}], "armed": 2}
    await api.put(f"{S}/devices/box", {"status": report})
    _, listing = await api.get(f"{S}/devices")
    assert listing["devices"][0]["status"]["subscriptions"][0]["state"] == "live"
    await api.put(f"{S}/devices/box", {"stopped": True})
    _, listing = await api.get(f"{S}/devices")
    (box,) = listing["devices"]
    assert box["live"] is False
    assert box["status"] == {"subscriptions": [{"chat": "c1", "state": "stopped"}], "armed": 2}
    await api.put(f"{S}/devices/box", {})  # beating again: live, as it reports
    space_clock.advance(60)  # silent past the live window
    _, listing = await api.get(f"{S}/devices")
    assert listing["devices"][0]["status"]["subscriptions"][0]["state"] == "stopped"


async def test_a_heartbeat_carries_the_device_status_until_the_next_one_sends_another(
    api: Api,
) -> None:
    report = {"holding": True, "subscriptions": [{"chat": "c1", "state": "live"}]}
    status, dev = await api.put(f"{S}/devices/box", {"status": report})
    assert status == 200 and dev["status"] == report
    _, dev = await api.put(f"{S}/devices/box", {})
    assert dev["status"] == report  # kept when not sent
    _, listing = await api.get(f"{S}/devices")
    assert listing["devices"][0]["status"] == report
    status, body = await api.put(f"{S}/devices/box", {"status": [1]})
    assert status == 400 and "$.status" in body["detail"]


def run(run_id: str, status: str = "ok", trigger: str = "trg_a", minute: int = 0) -> dict:
    return {
        "runId": run_id,
        "triggerId": trigger,
        "program": "p@v1",
        "peer": "box",
        "term": 1,
        "key": f"k{run_id}",
        "startedAt": f"2026-12-01T09:{minute:02d}:00Z",
        "finishedAt": f"2026-12-01T09:{minute:02d}:01Z",
        "durationMs": 1000.0,
        "status": status,
        "result": {"ok": status == "ok"},
        "lateMs": 12.0,
    }


async def test_runs_are_answered_with_instants_in_the_one_format(api: Api) -> None:
    body = run("r9") | {
        "startedAt": "2026-12-01T10:00:00.123456+01:00",
        "finishedAt": "2026-12-01T09:00:01.5Z",
    }
    assert (await api.post(f"{S}/runs", body))[0] == 201
    _, listing = await api.get(f"{S}/runs")
    (found,) = listing["runs"]
    assert found["startedAt"] == "2026-12-01T09:00:00.123Z"
    assert found["finishedAt"] == "2026-12-01T09:00:01.500Z"
    assert (await api.post(f"{S}/runs", body))[0] == 200  # the same run again: idempotent


async def test_runs_are_listed_oldest_first_with_filters(api: Api) -> None:
    for i, status in enumerate(["ok", "error", "ok", "skipped"]):
        code, _ = await api.post(f"{S}/runs", run(f"r{i}", status, minute=i))
        assert code == 201
    assert (await api.post(f"{S}/runs", run("r0", "ok", minute=0)))[0] == 200  # idempotent
    status, body = await api.post(f"{S}/runs", run("r0", "error", minute=0))
    assert status == 409 and body["error"] == "run_exists"
    _, listing = await api.get(f"{S}/runs")
    assert [r["runId"] for r in listing["runs"]] == ["r0", "r1", "r2", "r3"]
    _, listing = await api.get(f"{S}/runs?status=ok")
    assert [r["runId"] for r in listing["runs"]] == ["r0", "r2"]
    _, listing = await api.get(f"{S}/runs?since=2026-12-01T09:02:00Z&limit=1")
    assert [r["runId"] for r in listing["runs"]] == ["r2"]
    _, listing = await api.get(f"{S}/runs?limit=2")
    assert [r["runId"] for r in listing["runs"]] == ["r2", "r3"]


async def test_pruning_keeps_failures_longer_and_never_changes_rollups(
    tmp_path, aiohttp_client
) -> None:
    db = tmp_path / "s.db"
    keep = RunRetention(ok_per_trigger=2, failure_per_trigger=3, ok_days=1, failure_days=30)
    clock = FakeClock()
    client: TestClient = await aiohttp_client(create_app(db, clock=clock, retention=keep))
    api = Api(client, default_admin_token_file(db).read_text().strip(), db)
    await api.post("/spaces", {"id": SPACE})
    for i in range(5):
        await api.post(f"{S}/runs", run(f"ok{i}", "ok", minute=i))
        await api.post(f"{S}/runs", run(f"err{i}", "error", minute=i))
    _, listing = await api.get(f"{S}/runs")
    assert [r["runId"] for r in listing["runs"]] == ["err2", "ok3", "err3", "ok4", "err4"]
    clock.advance(2 * 86400)  # past the age of successes, not of failures
    later = {**run("ok5", "ok", trigger="trg_b"), "startedAt": "2026-12-03T09:00:00Z"}
    assert (await api.post(f"{S}/runs", later))[0] == 201
    _, listing = await api.get(f"{S}/runs")
    assert [r["runId"] for r in listing["runs"]] == ["err2", "err3", "err4", "ok5"]
    _, body = await api.get(f"{S}/runs/rollup?trigger=trg_a")
    (rollup,) = body["rollups"]
    assert rollup["runs"] == 10 and rollup["counts"] == {"ok": 5, "error": 5}
    assert rollup["lastRunAt"] == "2026-12-01T09:04:00.000Z"


async def test_state_is_a_json_value_per_trigger_and_key(api: Api) -> None:
    path = f"{S}/state/trg_a/cursor"
    status, body = await api.get(path)
    assert status == 404 and body["error"] == "unknown_state"
    status, body = await api.put(path, {"value": {"after": 41, "seen": [1, 2]}})
    assert status == 200
    status, body = await api.get(path)
    assert status == 200 and body["value"] == {"after": 41, "seen": [1, 2]}
    assert (await api.get(f"{S}/state/trg_b/cursor"))[0] == 404
