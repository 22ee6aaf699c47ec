"""Odd rows written straight into the SQLite file: each row is read on its own.

Every table of the store gets a row no build of ours writes (text in a number column,
a body that is not JSON, or JSON of the wrong shape), beside good rows. Every read of
the API still answers 2xx with valid JSON (or a 4xx with the error body), the good rows
are all there, and the odd one is left out and named under `odd` (or shown flagged).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest
from space_support import SPACE, Api

S = f"/spaces/{SPACE}"
SOURCE = "def main(args):\n    return {'ok': True}\n"
RUN = {
    "runId": "run_good",
    "triggerId": "",
    "program": "p@v1",
    "key": "2026-12-01T09:00:00.000Z",
    "startedAt": "2026-12-01T09:00:00.000Z",
    "status": "ok",
}
TURN = {
    "turnId": "turn_good",
    "space": SPACE,
    "objectId": "",
    "messageIds": [],
    "calls": 0,
    "replies": 0,
    "startedAt": "2026-12-01T09:00:00.000Z",
    "finishedAt": "2026-12-01T09:00:01.000Z",
    "durationMs": 1000,
    "outcome": "ok",
}


async def populate(api: Api) -> dict[str, str]:
    """One good row in every table; the ids the checks look for."""
    trigger = await api.create_trigger()
    _, space = await api.get(S)
    chat = space["generalChat"]
    assert (await api.put(f"{S}/devices/laptop", {"name": "Laptop"}))[0] == 200
    assert (await api.post(f"{S}/chats/{chat}/messages", {"text": "good"}))[0] == 201
    assert (await api.post(f"{S}/runs", {**RUN, "triggerId": trigger["id"]}))[0] == 201
    turn = {**TURN, "objectId": chat}
    assert (await api.post(f"{S}/turns", turn))[0] == 201, await api.post(f"{S}/turns", turn)
    assert (await api.put(f"{S}/programs/p@v1", {"source": SOURCE}))[0] == 201
    assert (await api.put(f"{S}/state/{trigger['id']}/cursor", {"value": 1}))[0] == 200
    assert (await api.post(f"{S}/election/claim", {"peer": "laptop", "term": 0}))[0] == 200
    fire = {"triggerId": trigger["id"], "key": RUN["key"], "term": 1, "peer": "laptop"}
    assert (await api.post(f"{S}/fires", fire))[0] == 201
    return {"trigger": trigger["id"], "chat": chat}


ODD: dict[str, list[str]] = {  # SQL writing odd rows, with {chat} and {trigger}
    "devices": [
        "INSERT INTO devices VALUES ('home', 'odd1', 'Odd', 0, 'soon', 1e300, 'not json', '', 0)",
        "INSERT INTO devices VALUES ('home', 'odd2', 'Odd', 'hi', 1e300, 'x', '[]', '', 'x')",
    ],
    "chat_messages": [
        "INSERT INTO chat_messages VALUES ('{chat}', 90, 'msg_odd1', 1.0, 'not json')",
        "INSERT INTO chat_messages VALUES ('{chat}', 91, 'msg_odd2', 'x', '{{\"seq\": \"x\"}}')",
        "INSERT INTO chat_messages VALUES ('{chat}', 92, 'msg_odd3', 1.0, '[1, 2]')",
    ],
    "runs": [
        "INSERT INTO runs (space, run_id, trigger_id, status, started_at, failure, body) "
        "VALUES ('home', 'run_odd', '{trigger}', 'ok', 1.0, 0, 'not json')",
    ],
    "agent_turns": [
        "INSERT INTO agent_turns (space, turn_id, object_id, started_at, failure, body) "
        "VALUES ('home', 'turn_odd', '{chat}', 1.0, 0, '{{\"broken')",
    ],
    "programs": [
        "INSERT INTO programs VALUES ('home', 'q', 'one', 'x', 'x', 'x', 5, 7)",
    ],
    "state": [
        "INSERT INTO state VALUES ('home', '{trigger}', 'odd', 'not json', 5)",
    ],
    "leases": ["UPDATE leases SET term = 'x', expires_at = 'soon', want = 5"],
    "fires": [
        "INSERT INTO fires (space, trigger_id, key, term, peer, claimed_at, claim_id)"
        " VALUES ('home', '{trigger}', 'k2', 'x', 'laptop', 5, '')",
    ],
    "run_rollups": [
        "INSERT INTO run_rollups VALUES ('home', '{trigger}', 'error', 'many', 5)",
    ],
    "chats": ["INSERT INTO chats VALUES ('cht_odd', 'home', 5, 5, 'x')"],
    "changes": [
        "INSERT INTO changes (space, trigger_id, op, rev, body, at) "
        "VALUES ('home', '{trigger}', 'put', 'x', 'not json', 5)",
    ],
    "spaces": ["INSERT INTO spaces VALUES ('odd', 5, NULL, 5)"],
}


def write_odd(api: Api, table: str, ids: dict[str, str]) -> None:
    conn = sqlite3.connect(api.db_path)
    try:
        with conn:
            for sql in ODD[table]:
                conn.execute(sql.format(**ids))
    finally:
        conn.close()


async def read(api: Api, path: str) -> tuple[int, Any]:
    """GET `path`: its status and its body, which must be JSON whatever the status."""
    headers = {"Authorization": f"Bearer {api.token}"}
    async with api.client.get(path, headers=headers) as resp:
        text = await resp.text()
    try:
        body = json.loads(text)
    except ValueError:
        raise AssertionError(f"GET {path}: {resp.status}, not JSON: {text[:200]!r}") from None
    assert resp.status < 500, (path, resp.status, body)
    return resp.status, body


def reads(ids: dict[str, str]) -> list[str]:
    t, c = ids["trigger"], ids["chat"]
    v1 = "/v1" + S
    return [
        f"{v1}/devices",
        f"{v1}/chats/{c}/messages",
        f"{v1}/chats/{c}/messages?latest=1",
        f"{v1}/chats",
        f"{v1}/runs",
        f"{v1}/runs?trigger={t}",
        f"{v1}/runs?since=2026-01-01T00:00:00Z",
        f"{v1}/runs/rollup",
        f"{v1}/turns",
        f"{v1}/programs",
        f"{v1}/programs/p@v1",
        f"{v1}/state/{t}/cursor",
        f"{v1}/state/{t}/odd",
        f"{v1}/election",
        f"{v1}/fires",
        f"{v1}/changes",
        f"{v1}/triggers",
        f"{v1}",
        "/v1/spaces",
    ]


NOT_YET: set[str] = set()


@pytest.mark.parametrize(
    "table",
    [
        pytest.param(t, marks=pytest.mark.xfail(strict=True, reason="not isolated yet"))
        if t in NOT_YET
        else t
        for t in sorted(ODD)
    ],
)
async def test_an_odd_row_is_isolated_and_every_answer_is_json(api: Api, table: str) -> None:
    ids = await populate(api)
    before = {path: (await read(api, path)) for path in reads(ids)}
    write_odd(api, table, ids)
    for path in reads(ids):
        status, body = await read(api, path)
        old_status, old = before[path]
        if path.endswith("/state/" + ids["trigger"] + "/odd"):
            continue  # the odd value itself: a 4xx naming it (read() holds it below 500)
        assert status == old_status or status == 200, (path, status, body)
        if status == 200:
            assert_kept(old, body, path)
    async with api.client.get("/metrics", headers={"Authorization": f"Bearer {api.token}"}) as r:
        assert r.status == 200, await r.text()
    async with api.client.get("/healthz") as r:
        assert r.status == 200


def assert_kept(old: Any, new: Any, path: str) -> None:
    """Every list of the old answer is still in the new one, item for item."""
    if isinstance(old, dict):
        for key, value in old.items():
            if isinstance(value, list):
                got = new.get(key)
                assert isinstance(got, list), (path, key, new)
                assert all(item in got for item in value), (path, key, value, got)


async def test_an_odd_lease_row_is_free_at_the_last_term_and_the_next_claim_replaces_it(
    api: Api,
) -> None:
    await populate(api)  # laptop holds term 1
    write_odd(api, "leases", {})
    status, lease = await read(api, f"/v1{S}/election")
    assert status == 200 and lease["active"] is None and lease["term"] == 1, lease
    status, body = await api.post(f"{S}/election/claim", {"peer": "laptop", "term": 1})
    assert status == 200 and body["active"] == "laptop" and body["term"] == 2, body
