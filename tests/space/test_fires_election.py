"""The lease (compare-and-set by the server's clock) and fire claims (one winner, fenced)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import datetime, timedelta

import pytest
import sqlite_utils
from space_support import SPACE, Api, FakeClock

from space import fires
from space.servertime import iso

BOTH_STORES = True  # the election and the claims answer from the store seam: SQLite and PostgreSQL
E = f"/spaces/{SPACE}/election"
F = f"/spaces/{SPACE}/fires"


async def claim(api: Api, peer: str, term: int) -> tuple[int, dict]:
    return await api.post(f"{E}/claim", {"peer": peer, "term": term})


@pytest.mark.sqlite_only  # the fake clock's instant
async def test_a_free_lease_is_acquired_with_the_next_term(api: Api) -> None:
    status, lease = await api.get(E)
    assert status == 200 and lease["active"] is None and lease["term"] == 0
    status, lease = await claim(api, "laptop", 0)
    assert status == 200 and lease["active"] == "laptop" and lease["term"] == 1
    assert lease["expiresAt"] == "2026-12-01T09:00:15.000Z" and lease["expiresInMs"] == 15000


@pytest.mark.sqlite_only  # moves the fake clock
async def test_the_holder_renews_and_others_get_409_with_the_lease(
    api: Api, space_clock: FakeClock
) -> None:
    await claim(api, "laptop", 0)
    space_clock.advance(10)
    status, lease = await claim(api, "laptop", 1)
    assert status == 200 and lease["term"] == 1 and lease["expiresAt"].endswith("09:00:25.000Z")
    status, body = await claim(api, "phone", 1)
    assert status == 409 and body["error"] == "lease_conflict"
    assert body["active"] == "laptop" and body["term"] == 1


@pytest.mark.sqlite_only  # moves the fake clock
async def test_a_lapsed_lease_is_taken_with_a_current_term_only(
    api: Api, space_clock: FakeClock
) -> None:
    await claim(api, "laptop", 0)
    space_clock.advance(15)
    assert (await api.get(E))[1]["active"] is None
    status, body = await claim(api, "phone", 0)  # stale view of the term
    assert status == 409 and body["term"] == 1
    status, lease = await claim(api, "phone", 1)
    assert status == 200 and lease["active"] == "phone" and lease["term"] == 2
    status, _ = await claim(api, "laptop", 1)  # the old holder wakes up: refused
    assert status == 409


async def test_release_frees_the_lease_and_the_next_claim_moves_the_term(api: Api) -> None:
    await claim(api, "laptop", 0)
    status, _ = await api.post(f"{E}/release", {"peer": "phone", "term": 1})
    assert status == 409
    status, lease = await api.post(f"{E}/release", {"peer": "laptop", "term": 1})
    assert status == 200 and lease["active"] is None and lease["term"] == 1
    status, lease = await claim(api, "phone", 1)
    assert status == 200 and lease["term"] == 2


async def test_want_and_handover(api: Api) -> None:
    await claim(api, "laptop", 0)
    status, lease = await api.post(f"{E}/want", {"peer": "box"})
    assert status == 200 and lease["want"] == "box" and lease["active"] == "laptop"
    status, lease = await api.post(f"{E}/handover", {"peer": "laptop", "term": 1, "to": "box"})
    assert status == 200 and lease["active"] == "box" and lease["term"] == 2
    assert lease["want"] is None
    status, _ = await claim(api, "box", 2)
    assert status == 200


async def test_lease_length_is_configurable(aiohttp_client, tmp_path) -> None:
    from space.app import create_app, default_admin_token_file

    db = tmp_path / "s.db"
    client = await aiohttp_client(create_app(db, clock=FakeClock(), lease_seconds=3))
    api = Api(client, default_admin_token_file(db).read_text().strip(), db)
    await api.post("/spaces", {"id": SPACE})
    _, lease = await claim(api, "a", 0)
    assert lease["expiresInMs"] == 3000 and lease["leaseSeconds"] == 3


async def test_fire_claims_are_fenced_by_term_and_owner(api: Api) -> None:
    floating = await api.create_trigger()
    pinned = await api.create_trigger(owner="box")
    await claim(api, "laptop", 0)
    slot = floating["activeSince"]  # the record's first slot may fire (by either store's clock)
    fire = {"triggerId": floating["id"], "key": slot, "term": 1, "peer": "laptop"}
    status, body = await api.post(F, {**fire, "term": 0})
    assert status == 409 and body["error"] == "stale_term"
    status, body = await api.post(F, {**fire, "peer": "phone"})
    assert status == 409 and body["error"] == "stale_term"
    status, body = await api.post(F, fire)
    assert status == 201 and body["key"] == slot and body["claimedAt"] >= slot
    status, again = await api.post(F, fire)
    assert status == 409 and again["error"] == "already_claimed"
    assert again["peer"] == "laptop" and again["claimedAt"] == body["claimedAt"]
    pin = {"triggerId": pinned["id"], "key": "k", "term": 0, "peer": "laptop"}
    status, body = await api.post(F, pin)
    assert status == 409 and body["error"] == "not_owner"
    status, _ = await api.post(F, {**pin, "peer": "box"})
    assert status == 201
    status, listed = await api.get(F)
    assert status == 200
    assert [(f["triggerId"], f["key"], f["peer"]) for f in listed["fires"]] == [
        (floating["id"], slot, "laptop"),
        (pinned["id"], "k", "box"),
    ]
    status, listed = await api.get(f"{F}?trigger={pinned['id']}&limit=1")
    assert [f["key"] for f in listed["fires"]] == ["k"]


@pytest.mark.sqlite_only  # moves the fake clock
async def test_a_lapsed_lease_fences_floating_claims_off(api: Api, space_clock: FakeClock) -> None:
    floating = await api.create_trigger()
    await claim(api, "laptop", 0)
    fire = {"triggerId": floating["id"], "key": "2026-12-01T09:00:05Z", "term": 1, "peer": "laptop"}
    status, body = await api.post(F, fire)
    assert status == 201 and body["claimedAt"] == "2026-12-01T09:00:00.000Z"
    space_clock.advance(16)  # the lease lapsed: floating claims are fenced off
    status, body = await api.post(F, {**fire, "key": "later"})
    assert status == 409 and body["error"] == "stale_term"


async def test_a_claim_asking_for_its_run_gets_its_token_for_the_run_s_timeout(api: Api) -> None:
    trigger = await api.create_trigger(owner="box", limits={"timeoutSeconds": 60})
    run = {"runId": "run_1", "ttlSeconds": 3600}
    fire = {"triggerId": trigger["id"], "key": "k", "term": 0, "peer": "box", "run": run}
    status, body = await api.post(F, fire)
    assert status == 201 and body["token"].startswith("btr_"), body
    claimed, expires = (datetime.fromisoformat(body[n]) for n in ("claimedAt", "expiresAt"))
    assert expires - claimed == timedelta(seconds=60 + 30)  # its timeout and the margin
    status, body = await api.post(F, [{**fire, "key": "k2", "run": {**run, "ttlSeconds": 5}}])
    assert status == 200 and body["claims"][0]["token"].startswith("btr_")
    claimed, expires = (
        datetime.fromisoformat(body["claims"][0][n]) for n in ("claimedAt", "expiresAt")
    )
    assert expires - claimed == timedelta(seconds=5)  # the asked ttl, shorter


@pytest.mark.sqlite_only  # writes the SQLite file
async def test_a_key_an_older_build_wrote_names_the_same_fire(
    api: Api, space_clock: FakeClock
) -> None:
    """Keys are kept in the one instant format: an older build's `…:00Z` (a device not yet
    upgraded, or a claim stored before the upgrade) is the same fire as `…:00.000Z`."""
    trigger = await api.create_trigger(owner="box")
    space_clock.advance(600)  # the slots asked about have come
    fire = {"triggerId": trigger["id"], "key": "2026-12-01T09:05:00Z#2", "term": 0, "peer": "box"}
    status, body = await api.post(F, fire)
    assert status == 201 and body["key"] == "2026-12-01T09:05:00.000Z#2"
    status, body = await api.post(F, {**fire, "key": "2026-12-01T09:05:00.000Z#2"})
    assert status == 409 and body["error"] == "already_claimed"
    with sqlite3.connect(api.db_path) as conn:  # a claim stored by an older build
        conn.execute(
            "INSERT INTO fires (space, trigger_id, key, term, peer, claimed_at) VALUES "
            "(?, ?, '2026-12-01T09:10:00Z', 0, 'box', '2026-12-01T09:10:00Z')",
            [SPACE, trigger["id"]],
        )
    db = sqlite_utils.Database(api.db_path)
    fires.ensure_schema(db)  # as the server does at its start
    db.close()
    status, body = await api.post(F, {**fire, "key": "2026-12-01T09:10:00.000Z"})
    assert status == 409 and body["error"] == "already_claimed"


async def test_a_claim_sent_again_is_claimed_and_another_attempt_at_its_key_is_not(
    api: Api,
) -> None:
    trigger = await api.create_trigger(owner="box")
    fire = {"triggerId": trigger["id"], "key": "k", "term": 0, "peer": "box", "claimId": "clm_1"}
    status, first = await api.post(F, fire)
    assert status == 201
    status, again = await api.post(F, fire)  # the answer to the first was lost: a retry
    assert status == 201 and again == first
    status, body = await api.post(F, {**fire, "claimId": "clm_2"})  # another fire of the key
    assert status == 409 and body["error"] == "already_claimed"
    status, body = await api.post(F, {key: v for key, v in fire.items() if key != "claimId"})
    assert status == 409 and body["error"] == "already_claimed"


async def test_a_paused_trigger_or_an_instant_before_active_since_is_not_claimed(
    api: Api, space_clock: FakeClock
) -> None:
    record = await api.create_trigger(owner="box", spec={"expr": "* * * * * *"})
    path = f"/spaces/{SPACE}/triggers/{record['id']}"
    fire = {"triggerId": record["id"], "term": 0, "peer": "box"}
    since = record["activeSince"]
    status, body = await api.post(F, {**fire, "key": _ms_before(since)})
    assert status == 409 and body["error"] == "before_active"  # before the record existed
    assert (await api.post(F, {**fire, "key": since}))[0] == 201  # at it
    await api.patch(path, {"enabled": False})
    space_clock.advance(5)
    status, body = await api.post(F, {**fire, "key": since})
    assert status == 409 and body["error"] == "paused"
    _, resumed = await api.patch(path, {"enabled": True})  # activeSince: now
    later = resumed["activeSince"]
    assert later > since
    status, body = await api.post(F, {**fire, "key": _ms_before(later)})
    assert status == 409 and body["error"] == "before_active"  # from the paused stretch
    assert (await api.post(F, {**fire, "key": later}))[0] == 201


def _ms_before(instant: str) -> str:
    return iso(datetime.fromisoformat(instant) - timedelta(milliseconds=1))


async def test_an_event_fire_for_a_message_accepted_before_active_since_is_not_claimed(
    api: Api, space_clock: FakeClock
) -> None:
    _, chat = await api.post(f"/spaces/{SPACE}/chats", {"name": "c"})
    chats = f"/spaces/{SPACE}/chats/{chat['objectId']}/messages"
    _, early = await api.post(chats, {"text": "before"})
    spec = {"dataset": "chat_messages", "objectId": chat["objectId"]}
    record = await api.create_trigger(owner="box", kind="event", spec=spec)  # same millisecond
    space_clock.advance(1)
    _, late = await api.post(chats, {"text": "after"})
    fire = {"triggerId": record["id"], "term": 0, "peer": "box"}
    status, body = await api.post(F, {**fire, "key": early["messageId"]})
    assert status == 409 and body["error"] == "before_active"
    assert (await api.post(F, {**fire, "key": late["messageId"]}))[0] == 201


async def test_a_list_of_claims_answers_one_result_each(api: Api) -> None:
    trigger = await api.create_trigger(owner="box")
    one = {"triggerId": trigger["id"], "key": "a", "term": 0, "peer": "box"}
    await api.post(F, one)
    status, body = await api.post(F, [one, {**one, "key": "b"}, {**one, "triggerId": "trg_no"}])
    assert status == 200
    assert [(c["status"], c.get("error")) for c in body["claims"]] == [
        (409, "already_claimed"),
        (201, None),
        (404, "unknown_trigger"),
    ]


@pytest.mark.parametrize("n", [100])
async def test_concurrent_claims_of_one_key_have_exactly_one_winner(api: Api, n: int) -> None:
    trigger = await api.create_trigger()
    await claim(api, "laptop", 0)
    fire = {"triggerId": trigger["id"], "key": trigger["activeSince"], "term": 1, "peer": "laptop"}
    results = await asyncio.gather(*(api.post(F, fire) for _ in range(n)))
    statuses = sorted(status for status, _ in results)
    assert statuses.count(201) == 1
    assert statuses.count(409) == n - 1
    assert {b["error"] for s, b in results if s == 409} == {"already_claimed"}


@pytest.mark.sqlite_only  # writes the SQLite file
async def test_an_odd_timeout_written_past_the_api_breaks_no_other_claim(api: Api) -> None:
    """`limits.timeoutSeconds` 1e300 written into the file (and a ttl of 1e300 asked): the
    list is claimed, each with its token, the odd one's held to the bound (was a 500)."""
    odd, good = await api.create_trigger(), await api.create_trigger(name="other")
    conn = sqlite3.connect(api.db_path)
    with conn:
        body = json.loads(
            conn.execute("SELECT body FROM triggers WHERE id = ?", [odd["id"]]).fetchone()[0]
        )
        body["limits"] = {"timeoutSeconds": 1e300}
        conn.execute("UPDATE triggers SET body = ? WHERE id = ?", [json.dumps(body), odd["id"]])
    conn.close()
    await claim(api, "laptop", 0)
    key = "2026-12-01T09:00:00.000Z"
    ask = {"runId": "run_x", "ttlSeconds": 1e300}
    batch = [
        {"triggerId": t, "key": key, "term": 1, "peer": "laptop", "run": {**ask, "runId": r}}
        for t, r in ((odd["id"], "run_odd"), (good["id"], "run_good"))
    ]
    status, body = await api.post(F, batch)
    assert status == 200, body
    odd_result, good_result = body["claims"]
    assert good_result["status"] == 201 and good_result["token"], good_result
    assert odd_result["status"] == 201, odd_result  # held to the bound: a day and a margin
    assert key < odd_result["expiresAt"] <= "2026-12-02T09:01:00.000Z"
    status, fires = await api.get(f"{F}?trigger={odd['id']}")
    assert [f["key"] for f in fires["fires"]] == [key]
