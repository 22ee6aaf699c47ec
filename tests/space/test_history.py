"""The history `why` answers from: each fact written with the write it describes, pruned by age."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import sqlite_utils
from space_support import SPACE, Api, FakeClock, rows, store_rows
from waiting import eventually

from core.vocab import iso
from space import forget
from space.store import STORE
from space.store.postgres import PostgresStore

S = f"/spaces/{SPACE}"
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC).timestamp()
BOTH_STORES = True  # history is written and read, and pruned, through the store seam


@pytest.mark.sqlite_only  # moves the fake clock
async def test_every_change_of_a_record_is_a_revision_with_actor_and_note(
    api: Api, space_clock: FakeClock
) -> None:
    created = await api.create_trigger()
    tid = created["id"]
    space_clock.advance(60)
    phone = await api.device_token("phone")
    status, _ = await api.patch(
        f"{S}/triggers/{tid}",
        {"enabled": False},
        token=phone,
        headers={"Baton-Note": "vacation%20%E2%9B%B1"},
    )
    assert status == 200
    space_clock.advance(60)
    assert (await api.patch(f"{S}/triggers/{tid}", {"owner": "phone"}))[0] == 200
    assert (await api.post(f"{S}/triggers/{tid}/status", {"lastStatus": "ok"}))[0] == 200
    assert (await api.delete(f"{S}/triggers/{tid}"))[0] == 200
    got = rows(api, "SELECT rev, op, actor, note, changes, at FROM history_revisions ORDER BY rev")
    assert [(r[0], r[1], r[2], r[3]) for r in got] == [
        (1, "create", "admin", ""),
        (2, "pause", "device:phone", "vacation ⛱"),
        (3, "repin", "admin", ""),
        (4, "delete", "admin", ""),
    ]  # the stamp is no revision
    assert json.loads(got[1][4]) == {"enabled": [None, False]}
    assert got[1][5] == T0 + 60


async def test_a_note_that_is_not_printable_text_is_refused(api: Api) -> None:
    tid = (await api.create_trigger())["id"]
    for bad in ("%0A", "x" * 501, "%FF"):
        status, body = await api.patch(
            f"{S}/triggers/{tid}", {"enabled": False}, headers={"Baton-Note": bad}
        )
        assert (status, body["error"]) == (400, "invalid_header") and "Baton-Note" in body["detail"]
    assert await store_rows(api, "SELECT COUNT(*) FROM history_revisions") == [(1,)]


@pytest.mark.sqlite_only  # moves the fake clock
async def test_terms_say_who_held_them_and_how_they_ended(api: Api, space_clock: FakeClock) -> None:
    e = f"{S}/election"
    assert (await api.post(f"{e}/claim", {"peer": "laptop", "term": 0}))[0] == 200
    space_clock.advance(5)
    assert (await api.post(f"{e}/claim", {"peer": "laptop", "term": 1}))[0] == 200  # renewal
    space_clock.advance(40)  # lapsed at +20
    assert (await api.post(f"{e}/claim", {"peer": "phone", "term": 1}))[0] == 200
    body = {"peer": "phone", "term": 2, "to": "box"}
    assert (await api.post(f"{e}/handover", body))[0] == 200
    space_clock.advance(1)
    assert (await api.post(f"{e}/release", {"peer": "box", "term": 3}))[0] == 200
    got = rows(
        api,
        "SELECT term, holder, began - ?, ended - ?, how FROM history_terms".replace("?", str(T0)),
    )
    assert got == [
        (1, "laptop", 0.0, 20.0, "expired"),
        (2, "phone", 45.0, 45.0, "handed over"),
        (3, "box", 45.0, 46.0, "released"),
    ]


@pytest.mark.sqlite_only  # moves the fake clock
async def test_device_windows_follow_heartbeats_and_what_they_report(
    api: Api, space_clock: FakeClock
) -> None:
    d = f"{S}/devices/laptop"
    assert (await api.put(d, {"instance": "a", "appliedSeq": 1}))[0] == 200
    space_clock.advance(5)
    assert (await api.put(d, {"instance": "a", "appliedSeq": 1}))[0] == 200
    space_clock.advance(600)  # asleep
    assert (await api.put(d, {"instance": "b", "sleptSeconds": 598.5, "appliedSeq": 1}))[0] == 200
    space_clock.advance(5)
    assert (await api.put(d, {"stopped": True}))[0] == 200
    got = rows(
        api,
        "SELECT began - ?, last_seen - ?, stopped, slept FROM history_windows".replace(
            "?", str(T0)
        ),
    )
    assert got == [(0.0, 5.0, 0, None), (605.0, 610.0, 1, 598.5)]
    assert rows(api, "SELECT at - ?, seq FROM history_applied".replace("?", str(T0))) == [
        (0.0, 1),
        (605.0, 1),
    ]


@pytest.mark.sqlite_only  # moves the fake clock
async def test_a_device_s_clock_offset_is_noted_per_window_and_when_it_moved(
    api: Api, space_clock: FakeClock
) -> None:
    d = f"{S}/devices/laptop"
    for ms in (None, -310.0, -350.0, -409.9, -420.0, 15.0):  # jitter under 100 ms: kept once
        beat = {"instance": "a"} if ms is None else {"instance": "a", "offsetMs": ms}
        assert (await api.put(d, beat))[0] == 200
        space_clock.advance(5)
    assert (await api.put(d, {"instance": "b", "offsetMs": 15.0}))[0] == 200  # a new window
    space_clock.advance(31 * 86400)
    assert (await api.put(d, {"instance": "c"}))[0] == 200
    got = rows(api, "SELECT at - ?, offset_ms FROM history_offsets".replace("?", str(T0)))
    assert got == [(5.0, -310.0), (20.0, -420.0), (25.0, 15.0), (30.0, 15.0)]
    store = sqlite_utils.Database(api.db_path)
    cutoff = space_clock.now.timestamp() - 30 * 86400
    while forget.prune_batch(store, cutoff, cutoff):
        pass
    assert rows(api, "SELECT COUNT(*) FROM history_offsets") == [(0,)]
    status, body = await api.put(d, {"offsetMs": 2e12})
    assert (status, body["error"]) == (400, "invalid_body")


@pytest.mark.sqlite_only  # runs are SQLite's yet
async def test_refused_claims_and_run_outcomes_enter_the_claim_ledger(api: Api) -> None:
    tid = (await api.create_trigger(owner="box"))["id"]
    fire = {"triggerId": tid, "key": "2026-12-01T09:00:05Z", "term": 0, "peer": "box"}
    assert (await api.post(f"{S}/fires", fire))[0] == 201
    status, body = await api.post(f"{S}/fires", {**fire, "peer": "laptop"})
    assert (status, body["error"]) == (409, "not_owner")
    run = {
        **fire,
        "runId": "r1",
        "startedAt": "2026-12-01T09:05:01Z",
        "status": "ok",
        "lateMs": 1000,
    }
    assert (await api.post(f"{S}/runs", run))[0] == 201
    assert rows(api, "SELECT peer, code FROM history_refusals") == [("laptop", "not_owner")]
    assert rows(api, "SELECT peer, run_id, status, late_ms FROM fires") == [
        ("box", "r1", "ok", 1000.0)
    ]


@pytest.mark.sqlite_only  # moves the fake clock
async def test_prune_forgets_past_the_retention_but_keeps_how_a_record_stood(
    api: Api, space_clock: FakeClock
) -> None:
    tid = (await api.create_trigger())["id"]
    assert (await api.patch(f"{S}/triggers/{tid}", {"name": "a"}))[0] == 200
    fire = {"triggerId": tid, "key": "2026-12-01T09:00:00Z", "term": 0, "peer": "laptop"}
    assert (await api.post(f"{S}/fires", fire))[0] == 409  # stale term: a refusal kept
    assert (await api.put(f"{S}/devices/laptop", {}))[0] == 200
    space_clock.advance(31 * 86400)
    assert (await api.patch(f"{S}/triggers/{tid}", {"name": "b"}))[0] == 200
    store = sqlite_utils.Database(api.db_path)
    cutoff = space_clock.now.timestamp() - 30 * 86400
    gone = forget.prune_batch(store, cutoff, cutoff)
    assert gone == 3  # the create (superseded before the cutoff), the refusal, the window
    assert forget.prune_batch(store, cutoff, cutoff) == 0
    assert rows(api, "SELECT rev FROM history_revisions") == [(2,), (3,)]


async def test_a_write_a_term_a_heartbeat_and_a_refusal_each_leave_their_fact(api: Api) -> None:
    """On either store: each fact is written with the write it describes."""
    tid = (await api.create_trigger(owner="box"))["id"]
    phone = await api.device_token("phone")
    note = {"Baton-Note": "vacation"}
    assert (await api.patch(f"{S}/triggers/{tid}", {"enabled": False}, token=phone, headers=note))[
        0
    ] == 200
    assert (await api.post(f"{S}/election/claim", {"peer": "laptop", "term": 0}))[0] == 200
    beat = {"instance": "a", "appliedSeq": 2, "offsetMs": -250.0}
    assert (await api.put(f"{S}/devices/laptop", beat))[0] == 200
    fire = {"triggerId": tid, "key": "2026-12-01T09:00:00Z", "term": 1, "peer": "laptop"}
    assert (await api.post(f"{S}/fires", fire))[1]["error"] == "paused"
    got = await store_rows(api, "SELECT rev, op, actor, note FROM history_revisions ORDER BY rev")
    assert got == [(1, "create", "admin", ""), (2, "pause", "device:phone", "vacation")]
    assert await store_rows(api, "SELECT term, holder, how FROM history_terms") == [
        (1, "laptop", None)
    ]
    assert await store_rows(api, "SELECT peer FROM history_windows") == [("laptop",)]
    assert await store_rows(api, "SELECT peer, seq FROM history_applied") == [("laptop", 2)]
    assert await store_rows(api, "SELECT offset_ms FROM history_offsets") == [(-250.0,)]
    assert await store_rows(api, "SELECT peer, code FROM history_refusals") == [
        ("laptop", "paused")
    ]


async def test_the_prune_forgets_by_history_days_at_the_store_s_clock(api: Api) -> None:
    """`forget.prune` through the seam: a refusal past `--history-days` (30) by the store's
    own clock goes, one within it stays."""
    app = api.client.server.app
    assert app is not None
    now = (await app[STORE].trigger_history(SPACE, "trg_none")).now.timestamp()
    values = [(SPACE, "t", str(at), at, "p", 1, "c", "") for at in (now - 31 * 86400, now - 86400)]
    store = app[STORE]
    if isinstance(store, PostgresStore):
        for row in values:
            await store.pool.execute(
                "INSERT INTO history_refusals VALUES ($1, $2, $3, $4, $5, $6, $7, $8)", *row
            )
    else:
        db = sqlite_utils.Database(api.db_path)
        db.conn.executemany("INSERT INTO history_refusals VALUES (?, ?, ?, ?, ?, ?, ?, ?)", values)
        db.conn.commit()
    assert await forget.prune(app) == 1
    assert await store_rows(api, "SELECT at FROM history_refusals") == [(now - 86400,)]


async def test_a_backfill_stamps_the_never_claimed_slots_on_either_store(
    api: Api, space_clock: FakeClock
) -> None:
    """Through the seam at the store's clock: the slots of the range, the claimed one left
    out, stamped on the record; a dry run stamps nothing."""
    record = await api.create_trigger(owner="box", spec={"expr": "* * * * * *"})  # each second
    first = datetime.fromisoformat(record["activeSince"]).replace(microsecond=0)
    first += timedelta(seconds=1)
    keys = [iso(first + timedelta(seconds=s)) for s in range(3)]
    space_clock.advance(5)  # SQLite's clock; PostgreSQL's passes the slots by itself
    await eventually(lambda: datetime.now(UTC) > first + timedelta(seconds=2.2), what="slots")
    fire = {"triggerId": record["id"], "key": keys[1], "term": 0, "peer": "box"}
    assert (await api.post(f"{S}/fires", fire))[0] == 201
    path = f"{S}/triggers/{record['id']}/backfill"
    ask = {"from": keys[0], "to": keys[2]}
    status, dry = await api.post(path, {**ask, "dryRun": True})
    assert (status, dry["id"], dry["keys"], dry["skipped"]) == (200, None, [keys[0], keys[2]], 1)
    assert (await api.get(f"{S}/triggers/{record['id']}"))[1].get("backfill") is None
    status, done = await api.post(path, ask)
    assert status == 200 and done["id"].startswith("bf_") and done["keys"] == dry["keys"]
    _, stamped = await api.get(f"{S}/triggers/{record['id']}")
    assert stamped["backfill"]["id"] == done["id"] and stamped["backfill"]["keys"] == dry["keys"]
    assert stamped["rev"] == record["rev"]
