"""Bearer tokens and scopes: admin, device (acts only as itself), run (its space and trigger)."""

from __future__ import annotations

import sqlite3
import stat

import pytest
from space_support import SPACE, Api, FakeClock

from space.app import default_admin_token_file
from space.auth import token_hash

S = f"/spaces/{SPACE}"


BOTH_STORES = True  # tokens, devices and programs answer from the store seam


async def run_token(api: Api, trigger_id: str, ttl: float = 60) -> str:
    status, body = await api.post(
        f"{S}/tokens/run", {"triggerId": trigger_id, "runId": "run_1", "ttlSeconds": ttl}
    )
    assert status == 201, body
    return body["token"]


@pytest.mark.sqlite_only  # reads the SQLite file
async def test_admin_token_file_is_owner_only_and_only_hashes_are_stored(api: Api) -> None:
    path = default_admin_token_file(api.db_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    token = path.read_text().strip()
    device = await api.device_token("laptop")
    conn = sqlite3.connect(api.db_path)
    try:
        dump = "\n".join(conn.iterdump())
    finally:
        conn.close()
    assert token not in dump and device not in dump
    assert token_hash(token) in dump and token_hash(device) in dump


@pytest.mark.parametrize("header", [None, "Bearer nope", "Basic abc", "Bearer "])
async def test_missing_or_wrong_token_is_401(api: Api, header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header}
    async with api.client.get(f"/v1{S}/triggers", headers=headers) as resp:
        body = await resp.json()
        assert resp.status == 401 and body["error"] == "unauthorized" and body["detail"]


async def test_a_device_acts_only_as_itself(api: Api) -> None:
    laptop = api.as_(await api.device_token("laptop"))
    assert (await laptop.put(f"{S}/devices/laptop", {"name": "Laptop"}))[0] == 200
    status, body = await laptop.put(f"{S}/devices/phone", {})
    assert status == 403 and body["error"] == "forbidden"
    status, _ = await laptop.post(f"{S}/election/claim", {"peer": "phone", "term": 0})
    assert status == 403
    assert (await laptop.post(f"{S}/election/claim", {"peer": "laptop", "term": 0}))[0] == 200
    trigger = await api.create_trigger(owner="phone")
    fire = {"triggerId": trigger["id"], "key": "k", "term": 0, "peer": "phone"}
    status, _ = await laptop.post(f"{S}/fires", fire)
    assert status == 403
    status, _ = await laptop.post(f"{S}/fires", [{**fire, "peer": "laptop"}, fire])
    assert status == 403
    status, _ = await laptop.post("/tokens/device", {"peer": "evil"})
    assert status == 403
    status, _ = await laptop.post("/spaces", {"id": "other"})
    assert status == 403


async def test_run_token_scope(api: Api) -> None:
    mine = await api.create_trigger()
    other = await api.create_trigger()
    run = api.as_(await run_token(api, mine["id"]))
    chat = (await api.get(S))[1]["generalChat"]
    allowed = [
        ("POST", f"{S}/chats/{chat}/messages", {"text": "from a program"}),
        ("GET", f"{S}/chats/{chat}/messages", None),
        ("GET", f"{S}/triggers", None),
        ("GET", f"{S}/triggers/{other['id']}", None),
        ("PATCH", f"{S}/triggers/{mine['id']}", {"owner": "box"}),
        ("GET", f"{S}/programs", None),
        ("PUT", f"{S}/state/{mine['id']}/cursor", {"value": 3}),
        ("GET", f"{S}/state/{mine['id']}/cursor", None),
        ("GET", f"{S}/chats", None),
        ("GET", "/openapi.json", None),
    ]
    for method, path, body in allowed:
        status, answer = await run.call(method, path, body)
        assert status < 400, (method, path, answer)
    refused = [
        ("GET", f"{S}/election", None),
        ("POST", f"{S}/election/claim", {"peer": "x", "term": 0}),
        ("PUT", f"{S}/devices/x", {}),
        ("GET", f"{S}/devices", None),
        ("POST", f"{S}/fires", {"triggerId": mine["id"], "key": "k", "term": 0, "peer": "x"}),
        ("POST", f"{S}/runs", {}),
        ("GET", f"{S}/state/{other['id']}/cursor", None),
        ("PUT", f"{S}/state/{other['id']}/cursor", {"value": 1}),
        ("POST", f"{S}/triggers", {}),
        ("DELETE", f"{S}/triggers/{mine['id']}", None),
        ("POST", f"{S}/triggers/{mine['id']}/status", {"lastStatus": "ok"}),
        ("POST", f"{S}/tokens/run", {"triggerId": mine["id"], "runId": "r"}),
        ("GET", "/spaces", None),
        ("POST", "/spaces", {"id": "x"}),
        ("PUT", f"{S}/programs/p@v1", {"source": "def main(a): pass"}),
        ("POST", f"{S}/chats", {"name": "new"}),
    ]
    for method, path, body in refused:
        status, answer = await run.call(method, path, body)
        assert (status, answer["error"]) == (403, "forbidden"), (method, path)


async def test_run_token_is_bound_to_its_space(api: Api) -> None:
    await api.post("/spaces", {"id": "work"})
    mine = await api.create_trigger()
    run = api.as_(await run_token(api, mine["id"]))
    status, _ = await run.get("/spaces/work/triggers")
    assert status == 403


@pytest.mark.sqlite_only  # moves the fake clock
async def test_run_token_expires(api: Api, space_clock: FakeClock) -> None:
    mine = await api.create_trigger()
    run = api.as_(await run_token(api, mine["id"], ttl=30))
    assert (await run.get(f"{S}/triggers"))[0] == 200
    space_clock.advance(31)
    status, body = await run.get(f"{S}/triggers")
    assert status == 401 and body["error"] == "token_expired"
