"""The space keeps each trigger policy's state: a snooze as `activeSince`, the window and
a retry's key in the claim fence, a retry's attempt in its run record."""

from __future__ import annotations

import pytest
from space_support import SPACE, Api, FakeClock

BOTH_STORES = True  # records (and the space) answer from the store seam
F = f"/spaces/{SPACE}/fires"
EVERY_SECOND = {"expr": "* * * * * *"}


@pytest.mark.sqlite_only  # moves the fake clock
async def test_a_snooze_moves_active_since_and_fences_the_snoozed_slots(
    api: Api, space_clock: FakeClock
) -> None:
    record = await api.create_trigger(owner="box", spec=EVERY_SECOND)  # 09:00:00
    path = f"/spaces/{SPACE}/triggers/{record['id']}"
    status, snoozed = await api.patch(path, {"pausedUntil": "2026-12-01T09:10:00Z"})
    assert status == 200 and snoozed["activeSince"] == "2026-12-01T09:10:00.000Z"
    space_clock.advance(600)  # 09:10: the snooze is over
    fire = {"triggerId": record["id"], "term": 0, "peer": "box"}
    status, body = await api.post(F, {**fire, "key": "2026-12-01T09:05:00Z"})
    assert status == 409 and body["error"] == "before_active"  # a slot of the snooze
    assert (await api.post(F, {**fire, "key": "2026-12-01T09:10:00Z"}))[0] == 201  # its end
    await api.patch(path, {"pausedUntil": "2026-12-01T09:30:00Z"})
    space_clock.advance(60)
    status, lifted = await api.patch(path, {"pausedUntil": None})  # lifted early: from now
    assert status == 200 and lifted["activeSince"] == "2026-12-01T09:11:00.000Z"


@pytest.mark.sqlite_only  # the snooze ends after the fake clock's instant
async def test_a_trigger_created_snoozed_is_active_from_the_snooze_end(api: Api) -> None:
    record = await api.create_trigger(
        owner="box", spec=EVERY_SECOND, pausedUntil="2026-12-02T00:00:00+01:00"
    )
    assert record["activeSince"] == "2026-12-01T23:00:00.000Z"


@pytest.mark.sqlite_only  # moves the fake clock
async def test_a_snooze_already_over_changes_nothing(api: Api, space_clock: FakeClock) -> None:
    record = await api.create_trigger(owner="box", spec=EVERY_SECOND)
    space_clock.advance(30)
    path = f"/spaces/{SPACE}/triggers/{record['id']}"
    _, after = await api.patch(path, {"pausedUntil": "2026-12-01T09:00:10Z"})
    assert after["activeSince"] == record["activeSince"]


@pytest.mark.sqlite_only  # moves the fake clock
async def test_the_window_fences_claims_and_a_retry_is_fenced_as_its_fire(
    api: Api, space_clock: FakeClock
) -> None:
    window = {"startAt": "2026-12-01T09:00:10Z", "endAt": "2026-12-01T09:00:20Z"}
    record = await api.create_trigger(owner="box", spec=EVERY_SECOND, window=window)
    space_clock.advance(30)  # every slot asked about has come
    fire = {"triggerId": record["id"], "term": 0, "peer": "box"}
    for key in ("2026-12-01T09:00:05Z", "2026-12-01T09:00:20Z", "2026-12-01T09:00:20Z#2"):
        status, body = await api.post(F, {**fire, "key": key})
        assert status == 409 and body["error"] == "outside_window", key
    assert (await api.post(F, {**fire, "key": "2026-12-01T09:00:10Z"}))[0] == 201
    assert (await api.post(F, {**fire, "key": "2026-12-01T09:00:10Z#2"}))[0] == 201  # its retry
    status, body = await api.post(F, {**fire, "key": "2026-12-01T08:59:00Z#3"})
    assert status == 409 and body["error"] in ("before_active", "outside_window")


BAD_POLICIES = [
    ("retry", {"attempts": 11}),
    ("retry", {"attempts": 0}),
    ("retry", {"attempts": 3, "backoffSeconds": -1}),
    ("retry", {"attempts": 3, "tries": 2}),
    ("budget", {"runs": 0, "perSeconds": 60}),
    ("budget", {"runs": 3, "perSeconds": 0}),
    ("budget", {"runs": 1001, "perSeconds": 60}),
    ("window", {"startAt": "2026-12-02T00:00:00Z", "endAt": "2026-12-01T00:00:00Z"}),
    ("window", {"startAt": "2026-12-02T00:00:00Z", "endAt": "2026-12-02T00:00:00Z"}),
    ("window", {"startAt": "tomorrow"}),
    ("jitterSeconds", 7200),
    ("jitterSeconds", -1),
    ("maxRuns", 0),
    ("quietChat", {"objectId": "", "seconds": 30}),
    ("quietChat", {"objectId": "general", "seconds": 0}),
    ("quietChat", {"objectId": "general", "seconds": 90_000}),
    ("pausedUntil", "soon"),
]


@pytest.mark.parametrize(("field", "value"), BAD_POLICIES)
async def test_bad_policy_values_are_refused_naming_the_field(api: Api, field, value) -> None:
    body = {"kind": "cron", "spec": EVERY_SECOND, "program": "p@v1", field: value}
    status, refused = await api.post(f"/spaces/{SPACE}/triggers", body)
    assert status == 400 and field in refused["detail"], refused
    assert (await api.get(f"/spaces/{SPACE}/triggers"))[1]["triggers"] == []  # nothing written


@pytest.mark.parametrize(("field", "value"), BAD_POLICIES)
async def test_a_bad_policy_edit_is_refused_and_the_record_kept(api: Api, field, value) -> None:
    record = await api.create_trigger(owner="box", spec=EVERY_SECOND)
    path = f"/spaces/{SPACE}/triggers/{record['id']}"
    status, refused = await api.patch(path, {field: value})
    assert status == 400 and field in refused["detail"], refused
    assert (await api.get(path))[1] == record


@pytest.mark.sqlite_only  # moves the fake clock
async def test_a_backfill_answers_the_slots_never_claimed_and_stamps_the_request(
    api: Api, space_clock: FakeClock
) -> None:
    record = await api.create_trigger(owner="box", spec={"expr": "* * * * *"})  # 09:00
    space_clock.advance(600)
    fire = {"triggerId": record["id"], "term": 0, "peer": "box"}
    assert (await api.post(F, {**fire, "key": "2026-12-01T09:03:00Z"}))[0] == 201
    path = f"/spaces/{SPACE}/triggers/{record['id']}/backfill"
    ask = {"from": "2026-12-01T09:01:00Z", "to": "2026-12-01T09:05:00Z"}
    status, dry = await api.post(path, {**ask, "dryRun": True})
    assert status == 200 and dry["id"] is None and dry["skipped"] == 1
    assert dry["keys"] == [f"2026-12-01T09:0{m}:00.000Z" for m in (1, 2, 4, 5)]
    assert (await api.get(f"/spaces/{SPACE}/triggers/{record['id']}"))[1].get("backfill") is None
    status, done = await api.post(path, ask)
    assert status == 200 and done["id"].startswith("bf_") and done["keys"] == dry["keys"]
    _, stamped = await api.get(f"/spaces/{SPACE}/triggers/{record['id']}")
    assert stamped["backfill"] == {
        "id": done["id"],
        "keys": done["keys"],
        "requestedAt": "2026-12-01T09:10:00.000Z",
    }
    assert stamped["rev"] == record["rev"]  # a stamp: the user's rev holds


@pytest.mark.sqlite_only  # moves the fake clock
@pytest.mark.parametrize(
    ("ask", "says"),
    [
        ({"from": "2026-12-01T09:00:00Z", "to": "2026-12-01T11:00:00Z"}, "more than 100 slots"),
        ({"from": "2026-12-01T09:05:00Z", "to": "2026-12-01T09:01:00Z"}, "`to`"),
        ({"from": "2026-12-01T08:00:00Z", "to": "2026-12-01T09:01:00Z"}, "activeSince"),
        ({"from": "2026-11-01T08:00:00Z", "to": "2026-12-01T09:01:00Z"}, "claim ledger"),
        ({"from": "soon", "to": "2026-12-01T09:01:00Z"}, "$.from"),
        ({"to": "2026-12-01T09:01:00Z"}, "from"),
        ({"from": "2026-12-01T11:00:00Z", "to": "2026-12-01T12:01:00Z"}, "still to come"),
    ],
)
async def test_a_bad_backfill_is_refused_naming_the_field(
    api: Api, space_clock: FakeClock, ask: dict, says: str
) -> None:
    record = await api.create_trigger(owner="box", spec={"expr": "* * * * *"})  # 09:00
    space_clock.advance(3 * 3600)  # 12:00: every range asked about has passed, or says so
    before = (await api.get(f"/spaces/{SPACE}/triggers/{record['id']}"))[1]
    status, body = await api.post(f"/spaces/{SPACE}/triggers/{record['id']}/backfill", ask)
    assert status == 400 and body["error"] == "invalid_backfill" and says in body["detail"]
    assert (await api.get(f"/spaces/{SPACE}/triggers/{record['id']}"))[1] == before


@pytest.mark.sqlite_only  # the backfill route reads the record from the SQLite file
async def test_only_a_cron_trigger_is_backfilled(api: Api) -> None:
    record = await api.create_trigger(owner="box", kind="once", spec={"at": "2026-12-01T09:30:00Z"})
    ask = {"from": "2026-12-01T09:00:00Z", "to": "2026-12-01T10:00:00Z"}
    status, body = await api.post(f"/spaces/{SPACE}/triggers/{record['id']}/backfill", ask)
    assert status == 400 and "`kind`" in body["detail"]
