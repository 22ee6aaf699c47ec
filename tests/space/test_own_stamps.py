"""A device's own stamps marked with its writer tag: its own change stream names their seqs in
`own` events instead of sending them, so its cursor still passes every seq; pages and every
other stream send them in full (a real space on 127.0.0.1, real SSE)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import aiohttp
import sqlite_utils
from space_support import SPACE, Api
from test_change_stream import next_event

from space import change_log, trigger_store

S = f"/spaces/{SPACE}"


def run(run_id: str, trigger: str, **stamps: Any) -> dict[str, Any]:
    return {
        "runId": run_id,
        "triggerId": trigger,
        "peer": "box",
        "key": f"k{run_id}",
        "startedAt": "2026-12-01T09:00:00Z",
        "status": "skipped",
        "reason": "overlap",
        "stamps": {"lastStatus": "skipped", "lastStatusDetail": "overlap", **stamps},
    }


async def stream(
    api: Api, token: str, query: str = "", since: int | None = None
) -> aiohttp.ClientResponse:
    if since is None:
        since = (await api.get(f"{S}/changes?limit=5000"))[1]["next"]
    h = {"Authorization": f"Bearer {token}", "Last-Event-ID": str(since)}
    resp = await api.client.get(f"/v1{S}/changes/stream{query}", headers=h)
    assert resp.status == 200
    assert (await next_event(resp))["event"] == "hello"
    return resp


async def test_a_devices_own_stamps_are_named_not_sent_and_everyone_else_gets_them(
    api: Api,
) -> None:
    mine, other = await api.create_trigger(owner="box"), await api.create_trigger(owner="cart")
    box, cart = await api.device_token("box"), await api.device_token("cart")
    own = await stream(api, box, "?omit=t1")
    plain = await stream(api, box)  # the same device, no omit: everything
    cart_view = await stream(api, cart, "?omit=t1")  # another device naming the tag: its own
    try:
        status, answer = await api.as_(box).post(
            f"{S}/runs", [run("r1", mine["id"])], headers={"Baton-Writer": "t1"}
        )
        assert status == 200 and answer["runs"][0]["stamps"] == 200
        seq = answer["runs"][0]["stampsSeq"]
        _, page = await api.get(f"{S}/changes?since={seq - 1}")
        assert [(c["seq"], c["op"]) for c in page["changes"]] == [(seq, "stamp")]  # pages: all
        for resp in (plain, cart_view):
            change = (await next_event(resp))["data"]
            assert (change["seq"], change["op"], change["record"]["lastStatus"]) == (
                seq,
                "stamp",
                "skipped",
            )
        named = await next_event(own)  # the writer's cursor passes it, without its record
        assert (named["event"], named["id"], named["data"]) == ("own", str(seq), {"seqs": [seq]})
        cart_runs = [{**run("r2", other["id"]), "peer": "cart"}]
        status, answer = await api.as_(cart).post(
            f"{S}/runs", cart_runs, headers={"Baton-Writer": "t1"}
        )  # another device's stamps under the same tag
        assert answer["runs"][0]["stamps"] == 200, answer
        await api.patch(f"{S}/triggers/{mine['id']}", {"name": "renamed"})  # a user's edit
        seen = [await next_event(own) for _ in range(2)]
        assert [(e["event"], e["data"]["triggerId"], e["data"]["op"]) for e in seen] == [
            ("change", other["id"], "stamp"),
            ("change", mine["id"], "update"),
        ]
        assert [int(e["id"]) for e in seen] == [seq + 1, seq + 2]  # every seq, in order
        assert seen[1]["data"]["record"]["lastStatus"] == "skipped"  # the edit carries them
    finally:
        for resp in (own, plain, cart_view):
            resp.close()


async def test_a_batchs_own_stamps_come_as_one_event_and_a_resume_goes_on_after_it(
    api: Api,
) -> None:
    ids = [(await api.create_trigger(owner="box"))["id"] for _ in range(3)]
    box = await api.device_token("box")
    before = (await api.get(f"{S}/changes?limit=5000"))[1]["next"]
    runs = [run(f"r{n}", tid) for n, tid in enumerate(ids)]
    _, answer = await api.as_(box).post(f"{S}/runs", runs, headers={"Baton-Writer": "t1"})
    seqs = [r["stampsSeq"] for r in answer["runs"]]
    assert seqs == [before + 1, before + 2, before + 3]
    await api.patch(f"{S}/triggers/{ids[0]}", {"name": "renamed"})
    replay = await stream(api, box, "?omit=t1", since=before)  # a replay, not live
    resumed = None
    try:
        named = await next_event(replay)
        assert (named["event"], named["id"], named["data"]) == (
            "own",
            str(seqs[-1]),
            {"seqs": seqs},
        )
        edit = await next_event(replay)
        assert (edit["event"], int(edit["id"])) == ("change", seqs[-1] + 1)
        resumed = await stream(api, box, "?omit=t1", since=int(named["id"]))  # Last-Event-ID
        again = await next_event(resumed)
        assert (again["event"], int(again["id"])) == ("change", seqs[-1] + 1)
    finally:
        replay.close()
        if resumed is not None:
            resumed.close()


async def test_omit_leaves_nothing_out_for_a_token_that_is_not_a_devices(api: Api) -> None:
    mine = await api.create_trigger(owner="box")
    box = await api.device_token("box")
    before = (await api.get(f"{S}/changes?limit=5000"))[1]["next"]
    await api.as_(box).post(f"{S}/runs", [run("r1", mine["id"])], headers={"Baton-Writer": "t1"})
    admin = await stream(api, api.token, "?omit=t1", since=before)
    try:
        change = await next_event(admin)  # the admin is not box: the stamp comes in full
        assert (change["event"], change["data"]["op"]) == ("change", "stamp")
    finally:
        admin.close()


async def test_the_same_stamps_again_write_no_change(api: Api) -> None:
    mine = await api.create_trigger(owner="box")
    box = api.as_(await api.device_token("box"))
    first = await box.post(f"{S}/runs", [run("r1", mine["id"])], headers={"Baton-Writer": "t"})
    again = await box.post(f"{S}/runs", [run("r2", mine["id"])], headers={"Baton-Writer": "t"})
    assert first[1]["runs"][0]["stampsSeq"] > 0
    assert again[1]["runs"][0]["stampsSeq"] == 0  # nothing changed: no change on the feed


async def test_a_malformed_writer_tag_is_refused_naming_where(api: Api) -> None:
    mine = await api.create_trigger(owner="box")
    box = api.as_(await api.device_token("box"))
    status, body = await box.post(
        f"{S}/runs", [run("r1", mine["id"])], headers={"Baton-Writer": "a b"}
    )
    assert status == 400 and body["error"] == "invalid_writer"
    assert "Baton-Writer" in body["detail"]
    _, record = await api.get(f"{S}/triggers/{mine['id']}")
    assert record.get("lastStatus", "") == ""  # nothing written
    assert (await api.get(f"{S}/runs"))[1]["runs"] == []
    status, body = await box.get(f"{S}/changes/stream?omit={'x' * 65}")
    assert status == 400 and "omit" in body["detail"]


def test_an_older_builds_feed_gains_the_writer_column_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:  # the changes table as the build before this one made it
        conn.executescript(
            "CREATE TABLE changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, space TEXT NOT NULL,"
            " trigger_id TEXT NOT NULL, op TEXT NOT NULL, rev INTEGER NOT NULL, body TEXT,"
            " at TEXT NOT NULL);"
            f"INSERT INTO changes (space, trigger_id, op, rev, body, at) VALUES ('{SPACE}', 't1',"
            " 'stamp', 1, '{\"id\":\"t1\",\"rev\":1}', '2026-12-01T08:00:00.000Z');"
        )
    conn.close()
    db = sqlite_utils.Database(path)
    trigger_store.ensure_schema(db)  # as the server does at its start
    trigger_store.ensure_schema(db)  # and again: nothing to add
    assert "writer" in {c.name for c in db["changes"].columns}
    old = change_log.since(db, SPACE, 0, 10, "box/t1")
    assert [(c["seq"], c["op"], c["record"]) for c in old] == [(1, "stamp", {"id": "t1", "rev": 1})]
    db.close()
