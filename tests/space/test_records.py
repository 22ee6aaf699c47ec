"""Trigger records through a real space server: ids, raw storage, PATCH with If-Match, stamps."""

from __future__ import annotations

import json
import sqlite3

import pytest
from space_support import CRON, SPACE, Api, FakeClock

from space.changes import FANOUT

T = f"/spaces/{SPACE}/triggers"
BOTH_STORES = True  # the record routes answer from the store seam: SQLite and PostgreSQL


@pytest.mark.sqlite_only  # the fake clock's instant
async def test_create_mints_an_id_and_server_fields(api: Api) -> None:
    record = await api.create_trigger()
    assert record["id"].startswith("trg_")
    assert record["rev"] == 1
    assert record["createdAt"] == record["updatedAt"] == "2026-12-01T09:00:00.000Z"
    status, got = await api.get(f"{T}/{record['id']}")
    assert status == 200 and got == record


@pytest.mark.sqlite_only  # moves the fake clock
async def test_active_since_starts_at_creation_resume_and_a_change_of_kind_or_spec(
    api: Api, space_clock: FakeClock
) -> None:
    record = await api.create_trigger()
    path = f"{T}/{record['id']}"
    assert record["activeSince"] == record["createdAt"]

    async def after(seconds: float, body: dict) -> str:
        space_clock.advance(seconds)
        status, got = await api.patch(path, body)
        assert status == 200, got
        return got["activeSince"]

    assert await after(1, {"name": "n", "args": {"x": 1}, "owner": "box"}) == record["createdAt"]
    assert await after(1, {"enabled": False}) == record["createdAt"]  # a pause starts nothing
    assert await after(1, {"name": "still paused"}) == record["createdAt"]
    assert await after(1, {"enabled": True}) == "2026-12-01T09:00:04.000Z"  # resumed
    assert await after(1, {"spec": {"expr": "*/5 * * * *"}}) == "2026-12-01T09:00:04.000Z"  # same
    assert await after(1, {"spec": {"expr": "*/7 * * * *"}}) == "2026-12-01T09:00:06.000Z"
    assert await after(1, {"enabled": True}) == "2026-12-01T09:00:06.000Z"  # was not paused
    event = {"kind": "event", "spec": {"dataset": "chat_messages", "objectId": "c1"}}
    assert await after(1, event) == "2026-12-01T09:00:08.000Z"
    chat = {"spec": {"dataset": "chat_messages", "objectId": "c2"}}
    assert await after(1, chat) == "2026-12-01T09:00:09.000Z"
    status, body = await api.patch(path, {"activeSince": "2020-01-01T00:00:00Z"})
    assert status == 400 and "$.activeSince" in body["detail"]


@pytest.mark.sqlite_only  # reads the SQLite file
async def test_a_deleted_id_is_never_minted_again(api: Api) -> None:
    first = await api.create_trigger()
    assert (await api.delete(f"{T}/{first['id']}"))[0] == 200
    conn = sqlite3.connect(api.db_path)
    try:
        used = {r[0] for r in conn.execute("SELECT id FROM trigger_ids")}
    finally:
        conn.close()
    assert first["id"] in used
    assert (await api.get(f"{T}/{first['id']}"))[0] == 404
    second = await api.create_trigger()
    assert second["id"] != first["id"]


async def test_invalid_input_is_refused_with_the_path(api: Api) -> None:
    status, body = await api.post(T, {**CRON, "spec": {"expr": "every day"}})
    assert status == 400
    assert body["error"] == "invalid_record"
    assert "`$.spec.expr`" in body["detail"]


@pytest.mark.sqlite_only  # moves the fake clock
async def test_patch_merges_user_fields_and_bumps_rev(api: Api, space_clock: FakeClock) -> None:
    record = await api.create_trigger(args={"a": 1})
    space_clock.advance(60)
    status, got = await api.patch(f"{T}/{record['id']}", {"name": "renamed"})
    assert status == 200
    assert got["name"] == "renamed" and got["args"] == {"a": 1}
    assert got["spec"] == {**CRON["spec"], "tz": "UTC", "catchup": "none", "graceSeconds": 30}
    assert got["rev"] == 2 and got["updatedAt"] == "2026-12-01T09:01:00.000Z"
    assert got["createdAt"] == record["createdAt"]


async def test_patch_with_if_match_is_compare_and_set(api: Api) -> None:
    record = await api.create_trigger()
    path = f"{T}/{record['id']}"
    status, _ = await api.patch(path, {"name": "a"}, headers={"If-Match": "1"})
    assert status == 200
    status, body = await api.patch(path, {"name": "b"}, headers={"If-Match": "1"})
    assert status == 409 and body["error"] == "rev_mismatch" and body["rev"] == 2
    assert (await api.get(path))[1]["name"] == "a"


async def test_patch_refuses_server_fields_and_invalid_results(api: Api) -> None:
    record = await api.create_trigger()
    path = f"{T}/{record['id']}"
    status, body = await api.patch(path, {"rev": 9})
    assert status == 400 and "`$.rev`" in body["detail"]
    status, body = await api.patch(path, {"kind": "once"})  # a cron spec is not a once spec
    assert status == 400 and body["error"] == "invalid_record"
    assert (await api.get(path))[1]["rev"] == 1


async def test_status_writes_stamps_only(api: Api) -> None:
    record = await api.create_trigger(name="keep")
    path = f"{T}/{record['id']}"
    stamps = {"lastStatus": "ok", "nextFireAt": "2026-12-01T09:05:00Z", "breaker": {"open": False}}
    status, got = await api.post(f"{path}/status", stamps)
    assert status == 200 and got["rev"] == 1 and got["name"] == "keep"  # stamps keep the rev
    assert got["updatedAt"] == record["updatedAt"]
    assert got["lastStatus"] == "ok" and got["breaker"] == {"open": False}
    status, again = await api.post(f"{path}/status", stamps)  # unchanged: nothing written
    assert status == 200 and again["rev"] == 1
    status, patched = await api.patch(path, {"name": "k2"}, headers={"If-Match": "1"})
    assert status == 200 and patched["rev"] == 2  # the rev the user read still matches
    status, body = await api.post(f"{path}/status", {"name": "x"})
    assert status == 400 and body["error"] == "invalid_status"


class Wakes:
    """A change-feed subscriber that only counts how often it was woken."""

    def __init__(self) -> None:
        self.count = 0

    def push(self, item: object) -> bool:
        self.count += 1
        return True


async def test_unchanged_stamps_wake_no_change_stream(api: Api) -> None:
    record = await api.create_trigger()
    path = f"{T}/{record['id']}/status"
    wakes = Wakes()
    api.client.app[FANOUT].add(SPACE, wakes)  # type: ignore[arg-type]
    assert (await api.post(path, {"lastStatus": "ok"}))[0] == 200
    assert wakes.count == 1
    status, again = await api.post(path, {"lastStatus": "ok"})
    assert status == 200 and again["rev"] == 1
    assert wakes.count == 1


def _write_raw(api: Api, tid: str, body: dict) -> None:
    conn = sqlite3.connect(api.db_path)
    try:
        conn.execute("INSERT INTO triggers VALUES (?, ?, 1, ?)", [SPACE, tid, json.dumps(body)])
        conn.commit()
    finally:
        conn.close()


@pytest.mark.sqlite_only  # writes the SQLite file
async def test_undecodable_records_are_listed_flagged_and_stamps_keep_their_fields(
    api: Api,
) -> None:
    good = await api.create_trigger()
    newer = {"id": "trg_newer", "kind": "webhook", "spec": {"url": "x"}, "future": [1], "rev": 1}
    _write_raw(api, "trg_newer", newer)
    status, listing = await api.get(T)
    assert status == 200
    by_id = {r["id"]: r for r in listing["triggers"]}
    assert "undecodable" not in by_id[good["id"]]
    assert by_id["trg_newer"]["undecodable"] is True and by_id["trg_newer"]["decodeError"]
    status, _ = await api.post(f"{T}/trg_newer/status", {"lastStatus": "unsupported_kind"})
    assert status == 200
    conn = sqlite3.connect(api.db_path)
    try:
        (stored,) = conn.execute("SELECT body FROM triggers WHERE id = 'trg_newer'").fetchone()
    finally:
        conn.close()
    stored = json.loads(stored)
    assert "undecodable" not in stored
    assert {k: stored[k] for k in ("kind", "spec", "future")} == {
        "kind": "webhook",
        "spec": {"url": "x"},
        "future": [1],
    }
    assert stored["lastStatus"] == "unsupported_kind"


async def test_reserved_id_is_create_if_absent(api: Api) -> None:
    seed = {
        "name": "Chat responder",
        "kind": "event",
        "program": "internal:chat-watch",
        "spec": {"dataset": "chat_messages", "objectId": "chat_x"},
    }
    status, first = await api.put(f"{T}/chat-watch", seed)
    assert status == 201 and first["id"] == "chat-watch"
    await api.patch(f"{T}/chat-watch", {"enabled": False})
    status, again = await api.put(f"{T}/chat-watch", seed)
    assert status == 200 and again["enabled"] is False  # an existing one is never overwritten
    status, body = await api.put(f"{T}/trg_mine", seed)
    assert status == 400 and body["error"] == "not_reserved"


async def test_change_feed_pages_every_write_in_order(api: Api) -> None:
    a = await api.create_trigger()
    await api.patch(f"{T}/{a['id']}", {"name": "b"})
    await api.post(f"{T}/{a['id']}/status", {"lastStatus": "ok"})
    await api.delete(f"{T}/{a['id']}")
    status, page = await api.get(f"/spaces/{SPACE}/changes?since=0&limit=2")
    assert status == 200 and page["more"] is True
    status, rest = await api.get(f"/spaces/{SPACE}/changes?since={page['next']}")
    changes = page["changes"] + rest["changes"]
    assert [c["op"] for c in changes] == ["create", "update", "stamp", "delete"]
    assert [c["rev"] for c in changes] == [1, 2, 2, 3]  # a stamp keeps the rev
    seqs = [c["seq"] for c in changes]
    assert seqs == sorted(seqs) and len(set(seqs)) == 4
    assert changes[-1]["record"] is None and changes[1]["record"]["name"] == "b"
    assert rest["more"] is False


async def test_unknown_space_is_404(api: Api) -> None:
    status, body = await api.get("/spaces/nowhere/triggers")
    assert status == 404 and body["error"] == "unknown_space"


@pytest.mark.sqlite_only  # the chat list is the SQLite file's yet (the space is the seam's)
async def test_a_space_comes_with_its_general_chat(api: Api) -> None:
    status, space = await api.post("/spaces", {"id": "work", "name": "Work"})
    assert status == 201 and space["generalChat"].startswith("chat_")
    _, chats = await api.get("/spaces/work/chats")
    assert [c["objectId"] for c in chats["chats"]] == [space["generalChat"]]
    _, listing = await api.get("/spaces")
    assert [s["id"] for s in listing["spaces"]] == [SPACE, "work"]


@pytest.mark.sqlite_only  # writes the SQLite file
async def test_a_record_that_is_not_even_json_is_listed_and_never_rewritten(api: Api) -> None:
    conn = sqlite3.connect(api.db_path)
    try:
        conn.execute("INSERT INTO triggers VALUES (?, 'trg_junk', 1, '{broken')", [SPACE])
        conn.commit()
    finally:
        conn.close()
    _, listing = await api.get(T)
    (junk,) = listing["triggers"]
    assert junk["id"] == "trg_junk" and junk["undecodable"] is True and junk["raw"] == "{broken"
    status, body = await api.post(f"{T}/trg_junk/status", {"lastStatus": "invalid_spec"})
    assert status == 409 and body["error"] == "undecodable_record"
    assert (await api.delete(f"{T}/trg_junk"))[0] == 200


async def test_get_fills_in_defaults_and_keeps_unknown_fields(api: Api) -> None:
    made = await api.create_trigger(spec={"expr": "*/5 * * * *"})
    status, one = await api.get(f"{T}/{made['id']}")
    assert status == 200
    assert (one["enabled"], one["owner"], one["args"]) == (True, "", {})
    assert one["limits"] == {
        "timeoutSeconds": 60,
        "memoryMB": 512,
        "overlap": "skip",
        "maxQueue": 100,
        "network": "space",
        "diskMB": 64,
    }
    assert (one["spec"]["expr"], one["spec"]["tz"], one["spec"]["catchup"]) == (
        "*/5 * * * *",
        "UTC",
        "none",
    )
    status, listed = await api.get(f"/spaces/{SPACE}/triggers")
    assert [r for r in listed["triggers"] if r["id"] == made["id"]] == [one]


@pytest.mark.sqlite_only  # writes the SQLite file
async def test_the_listing_pages_by_id_and_answers_records_as_stored(api: Api) -> None:
    made = sorted([(await api.create_trigger())["id"] for _ in range(5)])
    conn = sqlite3.connect(api.db_path)
    with conn:
        conn.execute("UPDATE triggers SET body = 'not json' WHERE id = ?", [made[3]])
    conn.close()
    status, full = await api.get(T)
    seen, after = [], ""
    while True:
        status, page = await api.get(f"{T}?stored=1&limit=2" + (f"&after={after}" if after else ""))
        assert status == 200 and page["seq"] == full["seq"]
        seen += page["triggers"]
        if not page["next"]:
            break
        after = page["next"]
    assert [r["id"] for r in seen] == made
    assert "limits" not in seen[0]  # as stored: no defaults filled in
    assert seen[3]["undecodable"] is True  # what is not JSON is still flagged
    assert [r["id"] for r in full["triggers"]] == made and "limits" in full["triggers"][0]


async def test_a_record_is_answered_with_every_default_filled_in(api: Api) -> None:
    """No `null` where the runtime goes by a default, and one numeric form for seconds."""
    cron = await api.create_trigger(limits={"timeoutSeconds": 20.0})
    latest = await api.create_trigger(spec={"expr": "* * * * *", "catchup": "latest"})
    event = await api.create_trigger(
        kind="event", spec={"dataset": "chat_messages", "objectId": "chat_x"}, limits={}
    )
    once = await api.create_trigger(kind="once", spec={"at": "2026-12-24T18:00:00+01:00"})
    for made in (cron, latest, event, once):
        for got in (made, (await api.get(f"{T}/{made['id']}"))[1]):
            limits = got["limits"]
            spec = {k: v for k, v in got["spec"].items() if k != "filter"}  # reserved, ignored
            assert None not in limits.values() and None not in spec.values(), got
            assert all(type(v) is int for v in limits.values() if not isinstance(v, str)), got
    assert cron["limits"] == {
        "timeoutSeconds": 20,
        "memoryMB": 512,
        "overlap": "skip",
        "maxQueue": 100,
        "network": "space",
        "diskMB": 64,
    }
    assert event["limits"]["overlap"] == "queue" and event["limits"]["timeoutSeconds"] == 60
    assert cron["spec"]["graceSeconds"] == 30 and latest["spec"]["graceSeconds"] == 3600
    assert once["spec"]["graceSeconds"] == 3600
    listed = {t["id"]: t for t in (await api.get(T))[1]["triggers"]}
    assert listed[cron["id"]]["limits"] == cron["limits"]


async def test_a_run_token_writes_as_the_program(api: Api) -> None:
    _, space = await api.get(f"/spaces/{SPACE}")
    made = await api.create_trigger(program="greeter@v1")
    status, minted = await api.post(
        f"/spaces/{SPACE}/tokens/run", {"triggerId": made["id"], "runId": "run_1"}
    )
    assert status == 201, minted
    path = f"/spaces/{SPACE}/chats/{space['generalChat']}/messages"
    status, sent = await api.post(path, {"text": "hello"}, token=minted["token"])
    assert status == 201 and sent["agent"] == {"name": "greeter@v1"}, sent
