"""Agent turns: posted by devices (never run tokens), checked strictly, listed and pruned."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from space_support import SPACE, Api, FakeClock, snapshot

from space.app import create_app, default_admin_token_file
from space.appstate import RunRetention

S = f"/spaces/{SPACE}"

BOTH_STORES = True  # turns answer from the store seam


def turn(turn_id: str, chat: str = "chat_a", *, minute: int = 0, **fields: Any) -> dict[str, Any]:
    return {
        "turnId": turn_id,
        "space": SPACE,
        "objectId": chat,
        "messageIds": [f"msg_{turn_id}"],
        "calls": 1,
        "replies": 1,
        "startedAt": f"2026-12-01T09:{minute:02d}:00.000Z",
        "finishedAt": f"2026-12-01T09:{minute:02d}:01.000Z",
        "durationMs": 1000.0,
        "outcome": "ok",
        "error": "",
        **fields,
    }


def ids(listing: dict[str, Any]) -> list[str]:
    return [t["turnId"] for t in listing["turns"]]


async def test_a_device_records_a_turn_once_and_reads_it_back(api: Api) -> None:
    device = api.as_(await api.device_token("box"))
    status, body = await device.post(f"{S}/turns", turn("t1"))
    assert status == 201 and body == turn("t1", startedAt="2026-12-01T09:00:00.000Z", peer="box")
    assert (await device.post(f"{S}/turns", turn("t1")))[0] == 200  # the same entry: no-op
    status, body = await device.post(f"{S}/turns", turn("t1", outcome="error"))
    assert status == 409 and body["error"] == "turn_exists"
    status, listing = await device.get(f"{S}/turns")
    assert status == 200 and listing["turns"] == [turn("t1", peer="box")]
    status, body = await device.post(f"{S}/turns", turn("t2", peer="phone"))
    assert (status, body["error"]) == (403, "forbidden") and "$.peer" in body["detail"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"outcome": "great"}, "$.outcome"),
        ({"messageIds": ["ok", ""]}, "$.messageIds[1]"),
        ({"calls": -1}, "$.calls"),
        ({"startedAt": "2026-12-01T09:00:00"}, "$.startedAt"),
        ({"extra": 1}, "extra"),
        ({"turnId": None}, "$.turnId"),
        ({"space": "elsewhere"}, "`space`"),
    ],
)
@pytest.mark.sqlite_only  # compares the SQLite file before and after
async def test_a_bad_turn_names_the_field_and_writes_nothing(
    api: Api, change: dict[str, Any], field: str
) -> None:
    before = snapshot(api.db_path)
    status, body = await api.post(f"{S}/turns", turn("t1", **change))
    assert status == 400 and body["error"] == "invalid_turn", body
    assert field in body["detail"]
    assert snapshot(api.db_path) == before


async def test_a_turn_without_its_required_fields_is_refused(api: Api) -> None:
    entry = turn("t1")
    del entry["outcome"]
    status, body = await api.post(f"{S}/turns", entry)
    assert status == 400 and "`outcome`" in body["detail"]


@pytest.mark.sqlite_only  # compares the SQLite file before and after
async def test_run_tokens_may_neither_record_nor_read_turns(api: Api) -> None:
    trigger = await api.create_trigger()
    status, body = await api.post(
        f"{S}/tokens/run", {"triggerId": trigger["id"], "runId": "run_1", "ttlSeconds": 60}
    )
    assert status == 201, body
    run = api.as_(body["token"])
    before = snapshot(api.db_path)
    for method, body in (("POST", turn("t1")), ("GET", None)):
        status, refusal = await run.call(method, f"{S}/turns", body)
        assert status == 403 and refusal["error"] == "forbidden", refusal
    assert snapshot(api.db_path) == before


async def test_turns_are_listed_oldest_first_by_chat_since_and_limit(api: Api) -> None:
    for i, chat in enumerate(["chat_a", "chat_b", "chat_a", "chat_b"]):
        assert (await api.post(f"{S}/turns", turn(f"t{i}", chat, minute=3 - i)))[0] == 201
    _, listing = await api.get(f"{S}/turns")
    assert ids(listing) == ["t3", "t2", "t1", "t0"]
    _, listing = await api.get(f"{S}/turns?chat=chat_a")
    assert ids(listing) == ["t2", "t0"]
    _, listing = await api.get(f"{S}/turns?since=2026-12-01T09:01:00Z&limit=2")
    assert ids(listing) == ["t2", "t1"]
    _, listing = await api.get(f"{S}/turns?chat=chat_b&limit=1")
    assert ids(listing) == ["t1"]
    status, body = await api.get(f"{S}/turns?since=yesterday")
    assert status == 400 and "`since`" in body["detail"]
    status, body = await api.get("/spaces/nowhere/turns")
    assert status == 404 and body["error"] == "unknown_space"


async def test_turns_are_pruned_per_chat_by_count_and_age(tmp_path, aiohttp_client) -> None:
    db = tmp_path / "s.db"
    keep = RunRetention(ok_per_trigger=2, failure_per_trigger=3, ok_days=1, failure_days=30)
    clock = FakeClock()
    client: TestClient = await aiohttp_client(create_app(db, clock=clock, retention=keep))
    api = Api(client, default_admin_token_file(db).read_text().strip(), db)
    await api.post("/spaces", {"id": SPACE})
    for i in range(4):
        await api.post(f"{S}/turns", turn(f"ok{i}", minute=i))
        await api.post(f"{S}/turns", turn(f"err{i}", minute=i, outcome="error", error="boom"))
    _, listing = await api.get(f"{S}/turns")
    assert ids(listing) == ["err1", "ok2", "err2", "ok3", "err3"]
    clock.advance(2 * 86400)  # past the age of ok turns, not of failed ones
    later = {**turn("ok4", "chat_b"), "startedAt": "2026-12-03T09:00:00Z"}
    assert (await api.post(f"{S}/turns", later))[0] == 201
    _, listing = await api.get(f"{S}/turns")
    assert ids(listing) == ["err1", "err2", "err3", "ok4"]
