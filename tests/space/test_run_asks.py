"""`POST …/triggers/{id}/run`: a run asked by hand, written for the device that runs the trigger.

The ask is a record write (the next rev, `runAsked {key, requestedAt}`, a revision `run`
by its asker) only when the responsible device is live; bad asks change nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from space_support import SPACE, Api, rows

BOTH_STORES = True  # the route reads and writes through the store seam: SQLite and PostgreSQL
S = f"/spaces/{SPACE}"


async def beat(api: Api, peer: str) -> Api:
    """A device `peer` that has just sent a heartbeat (live), as a caller."""
    device = api.as_(await api.device_token(peer))
    assert (await device.put(f"{S}/devices/{peer}", {}))[0] == 200
    return device


async def run(api: Api, tid: str, **kw: Any) -> tuple[int, Any]:
    return await api.post(f"{S}/triggers/{tid}/run", **kw)


async def test_an_unknown_trigger_is_404_and_the_wrong_token_403(api: Api) -> None:
    status, body = await run(api, "trg_0000000000000000")
    assert (status, body["error"]) == (404, "unknown_trigger")
    pinned = await api.create_trigger(owner="box")
    box = await beat(api, "box")
    assert (await api.post("/spaces", {"id": "away"}))[0] == 201
    elsewhere = api.as_(await api.device_token("box", space="away"))
    status, body = await run(elsewhere, pinned["id"])
    assert (status, body["error"]) == (403, "forbidden")
    status, minted = await api.post(
        f"{S}/tokens/run", {"triggerId": pinned["id"], "runId": "run_1", "ttlSeconds": 60}
    )
    assert status == 201
    status, body = await run(api.as_(minted["token"]), pinned["id"])
    assert (status, body["error"]) == (403, "forbidden")
    status, body = await run(api.as_("not-a-token"), pinned["id"])
    assert status == 401
    assert (await api.get(f"{S}/triggers/{pinned['id']}"))[1]["rev"] == 1  # nothing written
    assert (await run(box, pinned["id"]))[0] == 202  # a device token of the space may


async def test_a_pinned_trigger_is_asked_of_its_live_owner(api: Api) -> None:
    pinned = await api.create_trigger(owner="box")
    status, body = await run(api, pinned["id"])
    assert (status, body["error"], body["peer"]) == (409, "device_offline", "box")
    assert "pinned to 'box', which is offline (never seen)" in body["detail"]
    await beat(api, "box")
    status, asked = await run(api, pinned["id"], headers={"Baton-Note": "try%20it"})
    assert status == 202, asked
    assert (asked["triggerId"], asked["peer"], asked["rev"]) == (pinned["id"], "box", 2)
    assert asked["key"] == "manual:" + asked["requestedAt"]
    assert asked["requestedAt"].endswith("Z") and len(asked["requestedAt"]) == 24
    record = (await api.get(f"{S}/triggers/{pinned['id']}"))[1]
    assert record["runAsked"] == {"key": asked["key"], "requestedAt": asked["requestedAt"]}
    assert record["rev"] == 2 and record["spec"] == pinned["spec"]
    status, feed = await api.get(f"{S}/changes?since=0")
    last = feed["changes"][-1]
    assert (last["op"], last["rev"], last["record"]["runAsked"]["key"]) == (
        "update",
        2,
        asked["key"],
    )


@pytest.mark.sqlite_only  # reads the SQLite file's history
async def test_the_ask_is_a_revision_by_its_asker(api: Api) -> None:
    pinned = await api.create_trigger(owner="box")
    box = await beat(api, "box")
    assert (await run(box, pinned["id"], headers={"Baton-Note": "by%20hand"}))[0] == 202
    [(op, actor, note)] = rows(api, "SELECT op, actor, note FROM history_revisions WHERE rev = 2")
    assert (op, actor, note) == ("run", "device:box", "by hand")


async def test_if_match_is_a_compare_and_set(api: Api) -> None:
    pinned = await api.create_trigger(owner="box")
    await beat(api, "box")
    status, body = await run(api, pinned["id"], headers={"If-Match": "7"})
    assert (status, body["error"]) == (409, "rev_mismatch")
    assert (await run(api, pinned["id"], headers={"If-Match": "1"}))[0] == 202


async def test_a_floating_trigger_is_asked_of_the_lease_holder(api: Api) -> None:
    floating = await api.create_trigger()
    status, body = await run(api, floating["id"])
    assert (status, body["error"]) == (409, "device_offline")
    assert "no device holds the lease" in body["detail"]
    laptop = await beat(api, "laptop")
    assert (await laptop.post(f"{S}/election/claim", {"peer": "laptop", "term": 0}))[0] == 200
    status, asked = await run(api, floating["id"])
    assert (status, asked["peer"]) == (202, "laptop")


async def test_a_paused_or_internal_trigger_is_refused_and_nothing_written(api: Api) -> None:
    await beat(api, "box")
    paused = await api.create_trigger(owner="box", enabled=False)
    status, body = await run(api, paused["id"])
    assert (status, body["error"]) == (409, "paused")
    assert "resume it first" in body["detail"]
    chat = (await api.get(S))[1]["generalChat"]
    watch = {
        "name": "Chat responder",
        "kind": "event",
        "program": "internal:chat-watch",
        "owner": "box",
        "spec": {"dataset": "chat_messages", "objectId": chat},
    }
    assert (await api.put(f"{S}/triggers/chat-watch", watch))[0] == 201
    status, body = await run(api, "chat-watch")
    assert (status, body["error"]) == (409, "internal_program")
    for tid in (paused["id"], "chat-watch"):
        record = (await api.get(f"{S}/triggers/{tid}"))[1]
        assert record["rev"] == 1 and record.get("runAsked") is None
