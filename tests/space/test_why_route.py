"""`GET …/triggers/{id}/why` against a real space: facts written through the API, answered back."""

from __future__ import annotations

import json
import sqlite3
from typing import Any
from urllib.parse import urlencode

import pytest
from space_support import SPACE, Api, FakeClock, rows
from waiting import eventually

S = f"/spaces/{SPACE}"
LEASE = f"{S}/election"
BOTH_STORES = True  # `why` reads history through the store seam (test_why_stores: one chain)


class Story:
    """A space driven through its API by the fake clock: devices beat, hold, claim, run."""

    def __init__(self, api: Api, clock: FakeClock) -> None:
        self.api, self.clock, self.tid = api, clock, ""

    async def create(self, **fields: Any) -> None:
        self.tid = (await self.api.create_trigger(**fields))["id"]

    async def beat(self, peer: str, seconds: float, term: int | None = None, **body: Any) -> None:
        """`peer` heartbeats every 5 s for `seconds` (the clock moves), renewing the lease
        at `term` if given; `body` goes with the first beat (`instance`, `sleptSeconds`,
        `appliedSeq`: the last two once, the position with every beat)."""
        spent, every = 0.0, 5.0
        beat = {"instance": "i1", **body}
        while spent < seconds:
            status, got = await self.api.put(f"{S}/devices/{peer}", beat)
            assert status == 200, got
            beat = {k: v for k, v in beat.items() if k != "sleptSeconds"}
            if term is not None:
                renewed = await self.api.post(f"{LEASE}/claim", {"peer": peer, "term": term})
                assert renewed[0] == 200, renewed
            self.clock.advance(every)
            spent += every

    async def fire(self, peer: str, term: int, key: str, status: str = "ok", **run: Any) -> None:
        claim = {"triggerId": self.tid, "key": key, "term": term, "peer": peer}
        assert (await self.api.post(f"{S}/fires", claim))[0] == 201
        body = {**claim, "runId": f"r-{key}", "startedAt": key, "status": status, **run}
        assert (await self.api.post(f"{S}/runs", body))[0] == 201

    async def why(self, **query: str) -> dict[str, Any]:
        status, got = await self.api.get(f"{S}/triggers/{self.tid}/why?{urlencode(query)}")
        assert status == 200, got
        return got


@pytest.mark.sqlite_only  # moves the fake clock
async def test_a_day_of_one_trigger_each_slot_explained(api: Api, space_clock: FakeClock) -> None:
    story = Story(api, space_clock)
    await story.create()  # */5, created 09:00
    assert (await api.post(f"{LEASE}/claim", {"peer": "box", "term": 0}))[0] == 200
    await story.beat("box", 300, term=1)  # 09:00 … 09:05
    await story.fire("box", 1, "2026-12-01T09:05:00Z", lateMs=120)
    got = await story.why(at="2026-12-01T09:05:00Z")
    assert (got["verdict"], got["reason"]) == ("fired", "fired")
    assert got["run"]["runId"] == "r-2026-12-01T09:05:00Z" and all(c["ok"] for c in got["checks"])

    phone = await api.device_token("phone")
    status, _ = await api.patch(
        f"{S}/triggers/{story.tid}",
        {"enabled": False},
        token=phone,
        headers={"Baton-Note": "on%20holiday"},
    )
    assert status == 200
    await story.beat("box", 300, term=1)  # 09:05 … 09:10, paused
    got = await story.why(at="2026-12-01T09:10:00Z")
    assert (got["verdict"], got["reason"]) == ("not_fired", "paused")
    assert "by device:phone" in got["detail"] and '"on holiday"' in got["detail"]
    assert got["remedy"].startswith(f"`baton triggers resume {story.tid}`")
    assert [c["name"] for c in got["checks"]] == ["slot", "active", "enabled"]

    got = await story.why(at="2026-12-01T09:07:00Z")
    assert (got["verdict"], got["reason"]) == ("not_due", "not_a_slot")
    assert got["slot"] == "2026-12-01T09:05:00.000Z"


@pytest.mark.sqlite_only  # moves the fake clock
async def test_down_refused_and_never_run_slots(api: Api, space_clock: FakeClock) -> None:
    story = Story(api, space_clock)
    await story.create(owner="box")
    await story.beat("box", 60)  # 09:00 … 09:01, then box is gone
    space_clock.advance(540)  # 09:10
    got = await story.why(at="2026-12-01T09:05:00Z")
    assert (got["verdict"], got["reason"]) == ("not_fired", "owner_offline")
    assert "last seen 2026-12-01T09:00:55.000Z" in got["detail"]

    await story.beat("box", 30)
    claim = {"triggerId": story.tid, "key": "2026-12-01T09:10:00Z", "term": 0, "peer": "laptop"}
    assert (await api.post(f"{S}/fires", claim))[1]["error"] == "not_owner"
    got = await story.why(key="2026-12-01T09:10:00Z")
    assert (got["reason"], got["key"]) == ("claimed_elsewhere", "2026-12-01T09:10:00.000Z")
    assert "laptop's claim" in got["detail"] and "pinned to 'box'" in got["detail"]

    await story.beat("box", 300)  # to 09:15:30
    claim = {"triggerId": story.tid, "key": "2026-12-01T09:15:00Z", "term": 0, "peer": "box"}
    assert (await api.post(f"{S}/fires", claim))[0] == 201  # and box died before its run
    space_clock.advance(600)
    got = await story.why(at="2026-12-01T09:15:00Z")
    assert (got["verdict"], got["reason"]) == ("not_fired", "claimed_not_run")


@pytest.mark.sqlite_only  # moves the fake clock
async def test_bad_input_unknown_trigger_and_past_retention(
    api: Api, space_clock: FakeClock
) -> None:
    story = Story(api, space_clock)
    await story.create()
    for query, field in (({"at": "yesterday"}, "`at`"), ({"key": "x"}, "`key`")):
        status, got = await api.get(f"{S}/triggers/{story.tid}/why?{urlencode(query)}")
        assert (status, got["error"]) == (400, "invalid_query") and field in got["detail"]
    status, got = await api.get(f"{S}/triggers/trg_nope/why")
    assert (status, got["error"]) == (404, "not_found")
    space_clock.advance(29 * 86400)
    assert (await story.why(at="2026-12-01T09:05:00Z"))["reason"] == "no_device_up"
    space_clock.advance(2 * 86400)
    status, got = await api.get(f"{S}/triggers/{story.tid}/why?at=2026-12-01T09:05:00Z")
    assert (status, got["error"]) == (410, "past_retention") and "--history-days" in got["detail"]


@pytest.mark.sqlite_only  # moves the fake clock
async def test_a_range_answers_every_slot_and_a_run_token_may_ask(
    api: Api, space_clock: FakeClock
) -> None:
    story = Story(api, space_clock)
    await story.create(owner="box")
    await story.beat("box", 600)  # 09:00 … 09:10
    await story.fire("box", 0, "2026-12-01T09:05:00Z", result={"secret": 1})
    got = await story.why(since="2026-12-01T09:00:00Z")
    assert [(a["slot"][11:16], a["reason"]) for a in got["answers"]] == [
        ("09:00", "holder_asleep"),  # box was up, and no claim came
        ("09:05", "fired"),
        ("09:10", "claimed_not_run"),  # just now: pending
    ]
    assert got["answers"][2]["verdict"] == "pending"
    status, token = await api.post(
        f"{S}/tokens/run", {"triggerId": story.tid, "runId": "r9", "ttlSeconds": 60}
    )
    assert status == 201, token
    status, got = await api.as_(token["token"]).get(
        f"{S}/triggers/{story.tid}/why?at=2026-12-01T09:05:00Z"
    )
    assert status == 200 and got["reason"] == "fired" and "result" not in got["run"]


@pytest.mark.sqlite_only  # moves the fake clock
async def test_asleep_and_behind_the_feed(api: Api, space_clock: FakeClock) -> None:
    story = Story(api, space_clock)
    await story.create(owner="box")  # change feed position 1
    await story.beat("box", 60, appliedSeq=1)  # 09:00 … 09:01, then the lid closes
    space_clock.advance(650)
    await story.beat("box", 30, instance="i2", sleptSeconds=648.0, appliedSeq=1)
    got = await story.why(at="2026-12-01T09:05:00Z")
    assert (got["verdict"], got["reason"]) == ("not_fired", "holder_asleep")
    assert (
        "box was asleep from 2026-12-01T09:01:02.000Z to 2026-12-01T09:11:50.000Z" in got["detail"]
    )

    tid = story.tid
    assert (await api.patch(f"{S}/triggers/{tid}", {"enabled": False}))[0] == 200  # seq 2
    await story.beat("box", 60, appliedSeq=2)
    assert (await api.patch(f"{S}/triggers/{tid}", {"enabled": True}))[0] == 200  # seq 3
    await story.beat("box", 120, appliedSeq=2)  # its feed is stuck before the resume
    await story.beat("box", 10, appliedSeq=3)
    got = await story.why(at="2026-12-01T09:15:00Z")
    assert (got["verdict"], got["reason"]) == ("not_fired", "not_applied")
    assert "box had applied the change feed to 2" in got["detail"] and "rev 3" in got["detail"]


@pytest.mark.sqlite_only  # moves the fake clock
async def test_an_event_trigger_is_asked_about_its_messages(
    api: Api, space_clock: FakeClock
) -> None:
    chat = (await api.post(f"{S}/chats", {"name": "feed"}))[1]["objectId"]
    story = Story(api, space_clock)
    spec = {"dataset": "chat_messages", "objectId": chat}
    await story.create(kind="event", spec=spec, owner="box")
    space_clock.advance(5)
    sent = (await api.post(f"{S}/chats/{chat}/messages", {"text": "hello"}))[1]
    space_clock.advance(5)
    got = await story.why()
    assert (got["key"], got["reason"]) == (sent["messageId"], "owner_offline")
    await story.beat("box", 30)
    mine = (await api.post(f"{S}/chats/{chat}/messages", {"text": "x", "agent": {"name": "a"}}))[1]
    got = await story.why(key=mine["messageId"])
    assert (got["verdict"], got["reason"]) == ("not_due", "not_a_slot")
    sent = (await api.post(f"{S}/chats/{chat}/messages", {"text": "while up"}))[1]  # box is up
    space_clock.advance(60)
    got = await story.why(key=sent["messageId"])
    assert (got["verdict"], got["reason"]) == ("not_fired", "no_subscriber")
    status, got = await api.get(f"{S}/triggers/{story.tid}/why?key=m_nope")
    assert (status, got["error"]) == (404, "not_found") and "messageId" in got["detail"]


@pytest.mark.sqlite_only  # moves the fake clock
async def test_a_devices_chat_stream_is_the_evidence_of_who_was_subscribed(
    api: Api, space_clock: FakeClock
) -> None:
    chat = (await api.post(f"{S}/chats", {"name": "feed"}))[1]["objectId"]
    story = Story(api, space_clock)
    spec = {"dataset": "chat_messages", "objectId": chat}
    await story.create(kind="event", spec=spec, owner="box")
    box = {"Authorization": f"Bearer {await api.device_token('box')}"}
    async with api.client.get(f"/v1{S}/chats/{chat}/stream", headers=box) as stream:
        assert (await stream.content.readline()).startswith(b"id:")  # hello: it is live
        await story.beat("box", 10)
        carried = (await api.post(f"{S}/chats/{chat}/messages", {"text": "one"}))[1]
    ended = "SELECT COUNT(*) FROM history_subscriptions WHERE ended IS NOT NULL"
    await eventually(lambda: rows(api, ended) == [(1,)], what="the stream's end noted")
    await story.beat("box", 10)
    missed = (await api.post(f"{S}/chats/{chat}/messages", {"text": "two"}))[1]
    await story.beat("box", 60)
    got = await story.why(key=missed["messageId"])
    assert (got["verdict"], got["reason"]) == ("not_fired", "no_subscriber")
    assert "its stream of the chat was not live" in got["detail"] and "had ended" in got["detail"]
    got = await story.why(key=carried["messageId"])
    assert got["reason"] == "holder_asleep" and "made no claim" in got["detail"]


async def test_bad_input_unknown_trigger_and_before_the_history(api: Api) -> None:
    """On either store: what is asked wrong is 400 naming the field, an unknown trigger 404,
    an instant from before the history began (by the store's record of it) 410."""
    story = Story(api, FakeClock())
    await story.create()
    for query, field in (({"at": "yesterday"}, "`at`"), ({"key": "x"}, "`key`")):
        status, got = await api.get(f"{S}/triggers/{story.tid}/why?{urlencode(query)}")
        assert (status, got["error"]) == (400, "invalid_query") and field in got["detail"]
    status, got = await api.get(f"{S}/triggers/trg_nope/why")
    assert (status, got["error"]) == (404, "not_found")
    status, got = await api.get(f"{S}/triggers/{story.tid}/why?at=2020-01-01T00:00:00Z")
    assert (status, got["error"]) == (410, "past_retention") and "--history-days" in got["detail"]
    status, got = await api.get(f"{S}/triggers/{story.tid}/why")  # now: the last due slot
    assert status == 200 and got["trigger"] == story.tid and got["checks"][0]["name"] == "slot"


async def test_odd_instants_are_400_never_500(api: Api) -> None:
    story = Story(api, FakeClock())
    await story.create()
    for query in (
        "at=0001-01-01T00:00:00%2B14:00",
        "at=9999-12-31T23:59:59-14:00",
        "key=0001-01-01T00:00:00%2B14:00",
        "at=99999999999999999999",
        "since=nope",
        "at=1&key=x",
    ):
        status, got = await api.get(f"{S}/triggers/{story.tid}/why?{query}")
        assert (status, got["error"]) == (400, "invalid_query"), (query, got)


@pytest.mark.sqlite_only  # writes the SQLite file and moves the fake clock
async def test_a_record_older_than_the_history_is_answered_as_it_stands(
    api: Api, space_clock: FakeClock
) -> None:
    story = Story(api, space_clock)
    await story.create(owner="box")
    conn = sqlite3.connect(api.db_path)  # as a store kept by a build before the history
    with conn:
        conn.execute("DELETE FROM history_revisions")
    conn.close()
    await story.beat("box", 600)
    got = await story.why(at="2026-12-01T09:05:00Z")
    assert (got["verdict"], got["reason"]) == ("not_fired", "holder_asleep")  # up, no claim
    assert "edited at 2026-12-01T09:00:00.000Z by space" in got["checks"][2]["detail"]


@pytest.mark.sqlite_only  # moves the fake clock
async def test_a_retry_is_asked_by_its_key_and_max_runs_reached_is_outside(
    api: Api, space_clock: FakeClock
) -> None:
    story = Story(api, space_clock)
    await story.create(maxRuns=1, retry={"attempts": 2, "backoffSeconds": 10})
    assert (await api.post(f"{LEASE}/claim", {"peer": "box", "term": 0}))[0] == 200
    await story.beat("box", 300, term=1)  # 09:00 … 09:05
    slot = "2026-12-01T09:05:00Z"
    await story.fire("box", 1, slot, status="error", error="boom")
    await story.fire("box", 1, f"{slot}#2", startedAt="2026-12-01T09:05:10Z", lateMs=40)
    got = await story.why(key=f"{slot}#2")
    want = "2026-12-01T09:05:00.000Z#2"  # the key in the one instant format
    assert (got["verdict"], got["reason"], got["key"]) == ("fired", "fired", want)
    assert "attempt 2, a retry of 2026-12-01T09:05:00.000Z" in got["checks"][0]["detail"]
    first = await story.why(key=slot)  # the first attempt failed; its retry is named
    assert first["reason"] == "run_failed" and "ended error: boom" in first["detail"]
    assert "retried as 2026-12-01T09:05:00.000Z#2 by box: ok" in first["detail"]
    await story.beat("box", 300, term=1)  # 09:05 … 09:10: done after one ok run
    got = await story.why(at="2026-12-01T09:10:00Z")
    assert (got["verdict"], got["reason"]) == ("not_fired", "outside_window")
    assert "maxRuns 1 reached" in got["detail"] and "09:05:10.000Z" in got["detail"]


@pytest.mark.sqlite_only  # moves the fake clock
async def test_why_names_the_clock_offset_the_device_went_by(
    api: Api, space_clock: FakeClock
) -> None:
    """The offset a device's heartbeats report is history, noted when it moves: `why` names
    the one the device went by then, for a slot that fired, one it missed, and one whose
    claim the space refused as ahead of its clock (a skew past the 2 s warning)."""
    story = Story(api, space_clock)
    await story.create(owner="box")
    await story.beat("box", 300, offsetMs=-1250.0)  # 09:00 … 09:05, box 1.25 s ahead
    await story.fire("box", 1, "2026-12-01T09:05:00Z")
    space_clock.advance(1)
    await story.beat("box", 600, offsetMs=40.0)  # 09:05:01 … 09:15:01, 40 ms behind
    fired = await story.why(at="2026-12-01T09:05:00Z")
    assert fired["reason"] == "fired"
    up = next(c["detail"] for c in fired["checks"] if c["name"] == "up")
    assert up == "the claim says so; box's clock was 1.2 s ahead of the space's"
    missed = await story.why(at="2026-12-01T09:10:00Z")
    assert missed["reason"] == "holder_asleep" and "clock" not in missed["detail"]
    assert "box's clock was 40 ms behind the space's" in json.dumps(missed["checks"])

    await story.beat("box", 285, offsetMs=-9000.0)  # to 09:19:46, its clock 9 s ahead
    claim = {"triggerId": story.tid, "key": "2026-12-01T09:20:00Z", "term": 0, "peer": "box"}
    status, refused = await api.post(f"{S}/fires", claim)
    assert (status, refused["error"]) == (409, "ahead_of_clock")
    await story.beat("box", 60, offsetMs=-9000.0)  # past the slot, and never claimed again
    got = await story.why(at="2026-12-01T09:20:00Z")
    assert (got["verdict"], got["reason"]) == ("not_fired", "holder_asleep")
    assert "ahead of the space's clock" in got["detail"]
    assert got["detail"].endswith(
        "box's clock was 9.0 s ahead of the space's, past the 2 s warning "
        "(it fires by the space's clock)"
    )
    assert rows(api, "SELECT offset_ms FROM history_offsets ORDER BY at") == [
        (-1250.0,),
        (40.0,),
        (-9000.0,),
    ]  # one row each time it moved, not one a heartbeat
