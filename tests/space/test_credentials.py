"""Device and admin tokens against a real space server: bound to one space and one peer,
run tokens only for claimed fires and dead with their run, listing, revocation, rotation."""

from __future__ import annotations

import asyncio
import sqlite3
import stat
from typing import Any

import pytest
import sqlite_utils
from space_support import SPACE, Api, FakeClock

from space import token_store
from space.app import default_admin_token_file
from space.token_store import token_id

S = f"/spaces/{SPACE}"
RUN = {"startedAt": "2026-12-01T09:00:00Z", "status": "ok"}


BOTH_STORES = True  # tokens, devices and programs answer from the store seam


async def claimed(api: Api, device: Api, peer: str, **fields: Any) -> tuple[str, str]:
    """A trigger pinned to `peer` and a fire of it `peer` claimed: (trigger id, key)."""
    trigger = await api.create_trigger(owner=peer, **fields)
    fire = {"triggerId": trigger["id"], "key": "2026-12-01T09:00:05Z", "term": 0, "peer": peer}
    status, body = await device.post(f"{S}/fires", fire)
    assert status == 201, body
    return trigger["id"], fire["key"]


async def test_a_device_token_works_in_its_own_space_only(api: Api) -> None:
    assert (await api.post("/spaces", {"id": "work"}))[0] == 201
    laptop = api.as_(await api.device_token("laptop"))
    assert (await laptop.put(f"{S}/devices/laptop", {}))[0] == 200
    status, listing = await laptop.get("/spaces")
    assert status == 200 and [s["id"] for s in listing["spaces"]] == [SPACE]
    for method, path in [
        ("PUT", "/spaces/work/devices/laptop"),
        ("GET", "/spaces/work/triggers"),
        ("GET", "/spaces/work"),
    ]:
        status, body = await laptop.call(method, path, {} if method == "PUT" else None)
        assert (status, body["error"]) == (403, "forbidden"), (method, path, body)
    status, body = await api.post("/tokens/device", {"peer": "x", "space": "Not A Space"})
    assert (status, body["error"]) == (400, "invalid_body") and "$.space" in body["detail"]
    status, body = await api.post("/tokens/device", {"peer": "x", "space": "later"})
    assert (status, body["error"]) == (404, "unknown_space"), body  # none for no space


@pytest.mark.sqlite_only  # writes the SQLite file
async def test_a_device_token_from_before_space_binding_is_refused(api: Api) -> None:
    token = await api.device_token("laptop")
    conn = sqlite3.connect(api.db_path)
    with conn:
        conn.execute("UPDATE tokens SET space = NULL WHERE role = 'device'")
    conn.close()
    status, body = await api.as_(token).put(f"{S}/devices/laptop", {})
    assert status == 403 and "no space" in body["detail"]


@pytest.mark.sqlite_only  # runs and turns are SQLite's yet
async def test_nothing_is_written_as_another_peer(api: Api) -> None:
    laptop = api.as_(await api.device_token("laptop"))
    tid, key = await claimed(api, api.as_(await api.device_token("phone")), "phone")
    turn = {
        "turnId": "t1",
        "space": SPACE,
        "objectId": "c",
        "messageIds": [],
        "calls": 0,
        "replies": 0,
        "startedAt": RUN["startedAt"],
        "finishedAt": RUN["startedAt"],
        "durationMs": 0,
        "outcome": "ok",
        "peer": "phone",
    }
    as_phone = [
        (
            "POST",
            f"{S}/runs",
            {**RUN, "runId": "r1", "triggerId": tid, "key": key, "peer": "phone"},
        ),
        ("POST", f"{S}/turns", turn),
        ("POST", f"{S}/triggers/{tid}/status", {"lastStatus": "ok"}),
        ("POST", f"{S}/fires", {"triggerId": tid, "key": "k2", "term": 0, "peer": "phone"}),
        ("PUT", f"{S}/devices/phone", {}),
        ("POST", f"{S}/election/claim", {"peer": "phone", "term": 0}),
        ("POST", f"{S}/election/release", {"peer": "phone", "term": 0}),
        ("POST", f"{S}/election/want", {"peer": "phone"}),
        ("POST", f"{S}/election/handover", {"peer": "phone", "term": 0, "to": "laptop"}),
        ("POST", f"{S}/tokens/run", {"triggerId": tid, "runId": "r", "key": key}),
    ]
    for method, path, body in as_phone:
        status, answer = await laptop.call(method, path, body)
        assert status == 403, (method, path, answer)
        assert answer["error"] in ("forbidden", "not_claimed") and answer["detail"], answer
    _, runs = await api.get(f"{S}/runs")
    assert runs["runs"] == []


@pytest.mark.sqlite_only  # runs are SQLite's yet
async def test_a_device_records_runs_of_its_own_fires_only(api: Api) -> None:
    phone = api.as_(await api.device_token("phone"))
    tid, key = await claimed(api, phone, "phone")
    run = {**RUN, "runId": "r1", "triggerId": tid, "key": key}
    status, body = await phone.post(f"{S}/runs", {**run, "term": 7})
    assert (status, body["error"]) == (403, "not_claimed") and "$.key" in body["detail"]
    status, body = await phone.post(f"{S}/runs", {**run, "key": "2026-12-01T09:10:00Z"})
    assert (status, body["error"]) == (403, "not_claimed")
    status, body = await phone.post(f"{S}/runs", run)
    assert status == 201 and body["peer"] == "phone"  # filled in from the token
    skipped = {**run, "runId": "r2", "key": "never-claimed", "status": "skipped"}
    assert (await phone.post(f"{S}/runs", skipped))[0] == 201  # a fire that did not run


@pytest.mark.sqlite_only  # runs are SQLite's yet
async def test_a_device_stamps_the_records_it_answers_for(api: Api) -> None:
    laptop = api.as_(await api.device_token("laptop"))
    phone = api.as_(await api.device_token("phone"))
    floating = (await api.create_trigger())["id"]
    pinned = (await api.create_trigger(owner="laptop"))["id"]
    stamp = {"lastStatus": "owner_offline", "lastStatusDetail": "x"}
    assert (await laptop.post(f"{S}/triggers/{pinned}/status", stamp))[0] == 200
    status, body = await laptop.post(f"{S}/triggers/{floating}/status", stamp)
    assert status == 403 and "does not answer for" in body["detail"]
    status, body = await phone.post(f"{S}/triggers/{pinned}/status", stamp)
    assert status == 403
    assert (await phone.post(f"{S}/election/claim", {"peer": "phone", "term": 0}))[0] == 200
    for tid in (floating, pinned):  # the active device: floating ones, and health of any
        status, body = await phone.post(f"{S}/triggers/{tid}/status", {"lastStatus": "ok"})
        assert status == 200, body


@pytest.mark.sqlite_only  # moves the fake clock
async def test_a_run_stamped_after_the_lease_moved_is_still_its_devices(
    api: Api, space_clock: FakeClock
) -> None:
    laptop = api.as_(await api.device_token("laptop"))
    phone = api.as_(await api.device_token("phone"))
    tid = (await api.create_trigger())["id"]
    lease = (await laptop.post(f"{S}/election/claim", {"peer": "laptop", "term": 0}))[1]
    fire = {
        "triggerId": tid,
        "key": "2026-12-01T09:00:05Z",
        "term": lease["term"],
        "peer": "laptop",
    }
    assert (await laptop.post(f"{S}/fires", fire))[0] == 201
    space_clock.advance(20)  # the lease lapses; the phone takes it
    assert (await phone.post(f"{S}/election/claim", {"peer": "phone", "term": 1}))[0] == 200
    assert (await laptop.post(f"{S}/triggers/{tid}/status", {"lastStatus": "ok"}))[0] == 200


@pytest.mark.sqlite_only  # the fake clock's slot and expiry
async def test_a_device_mints_run_tokens_only_for_its_fires(
    api: Api, space_clock: FakeClock
) -> None:
    phone = api.as_(await api.device_token("phone"))
    laptop = api.as_(await api.device_token("laptop"))
    tid, key = await claimed(api, phone, "phone", limits={"timeoutSeconds": 5})
    body = {"triggerId": tid, "runId": "r1", "ttlSeconds": 3600}
    status, answer = await phone.post(f"{S}/tokens/run", body)
    assert status == 400 and "$.key" in answer["detail"]
    status, answer = await laptop.post(f"{S}/tokens/run", {**body, "key": key})
    assert (status, answer["error"]) == (403, "not_claimed")
    status, answer = await phone.post(f"{S}/tokens/run", {**body, "key": key})
    assert status == 201 and answer["expiresAt"] == "2026-12-01T09:00:35.000Z"  # timeout + 30 s
    run = api.as_(answer["token"])
    assert (await run.get(f"{S}/triggers"))[0] == 200
    space_clock.advance(36)
    status, answer = await run.get(f"{S}/triggers")
    assert (status, answer["error"]) == (401, "token_expired")


@pytest.mark.sqlite_only  # runs are SQLite's yet
async def test_posting_the_run_ends_its_token(api: Api) -> None:
    phone = api.as_(await api.device_token("phone"))
    tid, key = await claimed(api, phone, "phone")
    minted = await phone.post(f"{S}/tokens/run", {"triggerId": tid, "runId": "r1", "key": key})
    run = api.as_(minted[1]["token"])
    assert (await run.put(f"{S}/state/{tid}/cursor", {"value": 1}))[0] == 200
    assert (await phone.post(f"{S}/runs", {**RUN, "runId": "r1", "triggerId": tid, "key": key}))[
        0
    ] == 201
    status, answer = await run.put(f"{S}/state/{tid}/cursor", {"value": 2})
    assert (status, answer["error"]) == (401, "token_revoked")


@pytest.mark.parametrize("field", ["program", "args", "spec", "kind", "name", "limits"])
async def test_a_run_token_changes_owner_and_enabled_only(api: Api, field: str) -> None:
    mine, other = await api.create_trigger(), await api.create_trigger()
    minted = await api.post(f"{S}/tokens/run", {"triggerId": mine["id"], "runId": "r"})
    run = api.as_(minted[1]["token"])
    values = {
        "program": "evil@v1",
        "args": {"x": 1},
        "spec": {"expr": "* * * * *"},
        "kind": "once",
        "name": "evil",
        "limits": {"timeoutSeconds": 1},
    }
    for tid in (mine["id"], other["id"]):
        status, body = await run.patch(f"{S}/triggers/{tid}", {field: values[field]})
        assert (status, body["error"]) == (403, "forbidden"), body
        assert f"`$.{field}`" in body["detail"]
        status, body = await run.patch(
            f"{S}/triggers/{tid}", {"enabled": True, field: values[field]}
        )
        assert status == 403
    assert (await api.get(f"{S}/triggers/{other['id']}"))[1]["rev"] == other["rev"]
    status, body = await run.patch(
        f"{S}/triggers/{other['id']}", {"owner": "box", "enabled": False}
    )
    assert status == 200 and (body["owner"], body["enabled"]) == ("box", False)


async def test_tokens_are_listed_without_secrets_and_revoked(api: Api) -> None:
    device = await api.device_token("laptop")
    status, listing = await api.get("/tokens")
    assert status == 200
    entries = {t["id"]: t for t in listing["tokens"]}
    entry = entries[token_id(device)]
    assert (entry["role"], entry["peer"], entry["space"], entry["state"]) == (
        "device",
        "laptop",
        SPACE,
        "live",
    )
    assert device not in str(listing) and api.token not in str(listing)
    assert entry["createdAt"].endswith("Z") and entry["expiresAt"] is None
    status, body = await api.delete(f"/tokens/{token_id(device)}")
    assert status == 200 and body["state"] == "revoked"
    status, body = await api.as_(device).put(f"{S}/devices/laptop", {})
    assert (status, body["error"]) == (401, "token_revoked")
    assert token_id(device) not in str((await api.get("/tokens"))[1])
    assert token_id(device) in str((await api.get("/tokens?all=1"))[1])
    for tid in ("0123456789abcdef", "nope"):
        status, body = await api.delete(f"/tokens/{tid}")
        assert (status, body["error"]) == (404, "unknown_token")
    status, body = await api.delete(f"/tokens/{token_id(api.token)}")
    assert (status, body["error"]) == (409, "last_admin_token")
    status, body = await api.as_(await api.device_token("box")).get("/tokens")
    assert status == 403


async def test_the_admin_token_is_rotated(api: Api) -> None:
    path = default_admin_token_file(api.db_path)
    old = api.token
    status, body = await api.post("/tokens/admin/rotate")
    assert status == 201 and body["token"] != old and body["file"] == str(path)
    assert path.read_text().strip() == body["token"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    status, answer = await api.get("/tokens")
    assert (status, answer["error"]) == (401, "token_revoked")
    new = api.as_(body["token"])
    assert (await new.get("/spaces"))[0] == 200
    admins = [t for t in (await new.get("/tokens"))[1]["tokens"] if t["role"] == "admin"]
    assert [t["id"] for t in admins] == [token_id(body["token"])]


@pytest.mark.parametrize("end", ["run_posted", "revoked"])
@pytest.mark.sqlite_only  # runs are SQLite's yet
async def test_a_stream_opened_with_a_token_ends_when_the_token_does(api: Api, end: str) -> None:
    phone = api.as_(await api.device_token("phone"))
    tid, key = await claimed(api, phone, "phone")
    minted = await phone.post(f"{S}/tokens/run", {"triggerId": tid, "runId": "r1", "key": key})
    token = minted[1]["token"]
    chat = (await api.get(S))[1]["generalChat"]
    headers = {"Authorization": f"Bearer {token}"}
    async with api.client.get(f"/v1{S}/chats/{chat}/stream", headers=headers) as stream:
        assert stream.status == 200
        assert b"event: hello" in await stream.content.readuntil(b"\n\n")
        if end == "run_posted":
            run = {**RUN, "runId": "r1", "triggerId": tid, "key": key}
            assert (await phone.post(f"{S}/runs", run))[0] == 201
        else:
            assert (await api.delete(f"/tokens/{token_id(token)}"))[0] == 200
        async with asyncio.timeout(5):
            rest = await stream.content.read()  # the stream ends: EOF
        assert b"event: message" not in rest


async def live_run_tokens(api: Api) -> list[dict[str, Any]]:
    return [t for t in (await api.get("/tokens"))[1]["tokens"] if t["role"] == "run"]


@pytest.mark.sqlite_only  # the fake clock's instants
async def test_a_claim_with_run_answers_the_runs_token(api: Api, space_clock: FakeClock) -> None:
    phone = api.as_(await api.device_token("phone"))
    mine = await api.create_trigger(owner="phone", limits={"timeoutSeconds": 5})
    other = await api.create_trigger(owner="phone")
    fire = {
        "triggerId": mine["id"],
        "key": "2026-12-01T09:00:05Z",
        "term": 0,
        "peer": "phone",
        "claimId": "clm_1",
        "run": {"runId": "r1", "ttlSeconds": 3600},
    }
    status, claimed = await phone.post(f"{S}/fires", fire)
    assert status == 201 and claimed["claimedAt"] == "2026-12-01T09:00:00.000Z"
    assert claimed["expiresAt"] == "2026-12-01T09:00:35.000Z"  # timeout + 30 s, as POST tokens/run
    [listed] = await live_run_tokens(api)
    assert (listed["triggerId"], listed["runId"]) == (mine["id"], "r1")
    run = api.as_(claimed["token"])
    assert (await run.put(f"{S}/state/{mine['id']}/cursor", {"value": 1}))[0] == 200
    assert (await run.get(f"{S}/state/{mine['id']}/cursor"))[1]["value"] == 1
    status, body = await run.get(f"{S}/state/{other['id']}/cursor")
    assert (status, body["error"]) == (403, "forbidden")
    status, body = await run.post(f"{S}/fires", {**fire, "key": "k2", "run": None})
    assert (status, body["error"]) == (403, "forbidden")  # a run token claims nothing
    status, again = await phone.post(f"{S}/fires", fire)  # the first answer was lost: a retry
    assert status == 201 and again["claimedAt"] == claimed["claimedAt"]
    assert again["token"].startswith("btr_") and again["token"] != claimed["token"]
    retried = api.as_(again["token"])
    assert (await retried.get(f"{S}/state/{mine['id']}/cursor"))[0] == 200
    record = {**RUN, "runId": "r1", "triggerId": mine["id"], "key": fire["key"], "peer": "phone"}
    assert (await phone.post(f"{S}/runs", record))[0] == 201
    for token in (run, retried):  # both tokens of the run end with its record
        status, body = await token.get(f"{S}/state/{mine['id']}/cursor")
        assert (status, body["error"]) == (401, "token_revoked")
    assert await live_run_tokens(api) == []


async def test_a_claim_without_run_answers_no_token(api: Api) -> None:
    trigger = await api.create_trigger(owner="box")
    fire = {"triggerId": trigger["id"], "key": "k", "term": 0, "peer": "box"}
    status, claimed = await api.post(f"{S}/fires", fire)
    assert status == 201 and "token" not in claimed and "expiresAt" not in claimed
    assert await live_run_tokens(api) == []


@pytest.mark.sqlite_only  # the fake clock's slots
async def test_a_refused_claim_mints_no_token(api: Api, space_clock: FakeClock) -> None:
    phone = api.as_(await api.device_token("phone"))
    laptop = api.as_(await api.device_token("laptop"))
    pinned = await api.create_trigger(owner="phone")
    floating = await api.create_trigger()
    run = {"runId": "r1", "ttlSeconds": 60}
    fire = {
        "triggerId": pinned["id"],
        "key": "2026-12-01T09:00:05Z",
        "term": 0,
        "peer": "phone",
        "claimId": "clm_1",
        "run": run,
    }
    assert (await phone.post(f"{S}/fires", {**fire, "run": None}))[0] == 201
    refusals = [
        (phone, {**fire, "claimId": "clm_2"}, 409, "already_claimed"),
        (laptop, {**fire, "peer": "laptop", "key": "k2"}, 409, "not_owner"),
        (laptop, {**fire, "triggerId": floating["id"], "peer": "laptop"}, 409, "stale_term"),
        (phone, {**fire, "triggerId": "trg_none"}, 404, "unknown_trigger"),
        (phone, {**fire, "key": "2026-12-01T08:00:00Z"}, 409, "before_active"),
        (laptop, {**fire, "key": "k3"}, 403, "forbidden"),  # as another peer
        (phone, {**fire, "key": "k4", "run": {"runId": ""}}, 400, "invalid_body"),
        (phone, {**fire, "key": "k5", "run": {"runId": "r", "ttlSeconds": 0}}, 400, "invalid_body"),
        (phone, {**fire, "key": "k6", "run": {"runId": "r", "x": 1}}, 400, "invalid_body"),
    ]
    for caller, body, status, error in refusals:
        got, answer = await caller.post(f"{S}/fires", body)
        assert (got, answer["error"]) == (status, error), (body, answer)
        assert "token" not in answer
    await api.patch(f"{S}/triggers/{pinned['id']}", {"enabled": False})
    status, answer = await phone.post(f"{S}/fires", {**fire, "key": "k7", "claimId": "clm_7"})
    assert (status, answer["error"]) == (409, "paused")
    assert await live_run_tokens(api) == []


async def test_a_list_of_claims_answers_a_token_for_each_claimed_one(api: Api) -> None:
    phone = api.as_(await api.device_token("phone"))
    one, two = await api.create_trigger(owner="phone"), await api.create_trigger(owner="phone")
    fire = {"triggerId": one["id"], "key": "a", "term": 0, "peer": "phone"}
    await phone.post(f"{S}/fires", fire)
    batch = [
        {**fire, "run": {"runId": "r0"}},  # already claimed: no token
        {**fire, "key": "b", "run": {"runId": "r1"}},
        {**fire, "triggerId": two["id"], "run": {"runId": "r2"}},
        {**fire, "key": "c"},  # claimed, no token asked
    ]
    status, body = await phone.post(f"{S}/fires", batch)
    assert status == 200
    claims = body["claims"]
    assert [(c["status"], "token" in c) for c in claims] == [
        (409, False),
        (201, True),
        (201, True),
        (201, False),
    ]
    assert {(t["triggerId"], t["runId"]) for t in await live_run_tokens(api)} == {
        (one["id"], "r1"),
        (two["id"], "r2"),
    }
    first, second = api.as_(claims[1]["token"]), api.as_(claims[2]["token"])
    assert (await first.get(f"{S}/state/{one['id']}/x"))[0] in (200, 404)
    assert (await first.get(f"{S}/state/{two['id']}/x"))[0] == 403
    assert (await second.get(f"{S}/state/{two['id']}/x"))[0] in (200, 404)


def test_forgetting_expired_tokens_searches_an_index(tmp_path: Any) -> None:
    """`prune` runs at every run token minted, a claim's included: no scan of all tokens."""
    db = sqlite_utils.Database(tmp_path / "t.db")
    token_store.ensure_schema(db)
    plan = db.execute(
        "EXPLAIN QUERY PLAN DELETE FROM tokens WHERE expires_at IS NOT NULL AND expires_at <= ?",
        [0.0],
    ).fetchall()
    assert any("USING INDEX tokens_by_expiry" in str(row[-1]) for row in plan), plan


@pytest.mark.sqlite_only  # runs are SQLite's yet
async def test_a_run_whose_record_is_refused_ends_its_token_all_the_same(api: Api) -> None:
    """Before, a run record the space refused (here `not_claimed`: the wrong term) left the
    run's token alive until its expiry; now the run is over either way. Another device's
    refused post of the same run id does not end it (its tokens only)."""
    phone = api.as_(await api.device_token("phone"))
    laptop = api.as_(await api.device_token("laptop"))
    mine = await api.create_trigger(owner="phone")
    fire = {
        "triggerId": mine["id"],
        "key": "k1",
        "term": 0,
        "peer": "phone",
        "run": {"runId": "r1", "ttlSeconds": 3600},
    }
    status, claimed = await phone.post(f"{S}/fires", fire)
    assert status == 201, claimed
    run = api.as_(claimed["token"])
    record = {**RUN, "runId": "r1", "triggerId": mine["id"], "key": "k1"}
    status, body = await laptop.post(f"{S}/runs", {**record, "peer": "laptop"})
    assert (status, body["error"]) == (403, "not_claimed"), body
    assert (await run.get(f"{S}/state/{mine['id']}/cursor"))[0] == 404  # still alive
    status, body = await phone.post(f"{S}/runs", {**record, "peer": "phone", "term": 7})
    assert (status, body["error"]) == (403, "not_claimed"), body
    status, body = await run.get(f"{S}/state/{mine['id']}/cursor")
    assert (status, body["error"]) == (401, "token_revoked"), body
