"""A list of runs is one write: its runs, stamps, rollups and prunes in one transaction,
with few statements per run, and each run still taken or refused on its own."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from space_support import SPACE, Api, on_db

S = f"/spaces/{SPACE}"
PEER = "box"

BOTH_STORES = True  # runs, their stamps, rollups and tokens answer from the store seam


@asynccontextmanager
async def statements(api: Api) -> AsyncIterator[Counter[str]]:
    """The SQL statements the space runs meanwhile, by their first word."""
    seen: Counter[str] = Counter()

    def trace(sql: str) -> None:
        seen.update([sql.split(None, 1)[0].upper()])

    await on_db(api, lambda db: db.conn.set_trace_callback(trace))
    try:
        yield seen
    finally:
        await on_db(api, lambda db: db.conn.set_trace_callback(None))


def run(tid: str, n: int, **extra: Any) -> dict[str, Any]:
    at = f"2026-12-01T09:00:{n:02d}.000Z"
    return {
        "runId": f"run_{tid}_{n}",
        "triggerId": tid,
        "peer": PEER,
        "key": f"k{n}",
        "dueAt": at,
        "startedAt": at,
        "finishedAt": at,
        "durationMs": 1.0,
        "status": "ok",
        "result": {"ok": True},
        "lateMs": 0.0,
        "phases": {"wakeMs": 0.0, "claimMs": 0.0, "queueMs": 0.0, "spawnMs": 0.0},
        "stamps": {"lastStatus": "ok", "lastRunAt": at, "rollup": {"runs": n + 1, "ok": n + 1}},
        **extra,
    }


async def claimed(api: Api, box: Api, tids: list[str], n: int) -> None:
    claims = [
        {"triggerId": t, "key": f"k{i}", "term": 0, "peer": PEER} for t in tids for i in range(n)
    ]
    status, answer = await box.post(f"{S}/fires", claims)
    assert status == 200 and all(c["status"] == 201 for c in answer["claims"]), answer


@pytest.mark.sqlite_only  # counts the statements on the SQLite file's connection
async def test_a_batch_of_runs_is_one_transaction_of_few_statements_per_run(api: Api) -> None:
    box = api.as_(await api.device_token(PEER))
    tids = [(await api.create_trigger(owner=PEER))["id"] for _ in range(4)]
    await claimed(api, box, tids, 5)
    batch = [run(t, i) for i in range(5) for t in tids]  # 20 runs of 4 triggers
    async with statements(api) as seen:
        status, answer = await box.post(f"{S}/runs", batch)
    assert (
        status == 200 and [(r["status"], r["stamps"]) for r in answer["runs"]] == [(201, 200)] * 20
    )
    assert seen["BEGIN"] == 1 and seen["COMMIT"] == 1
    per_run = sum(seen.values()) / len(batch)
    assert per_run <= 6, seen  # 20.4 when each run was its own savepoints and prunes
    assert seen["SAVEPOINT"] <= 2, seen  # the token lookup's: the write has none
    _, rollups = await api.get(f"{S}/runs/rollup")
    assert sorted(r["counts"]["ok"] for r in rollups["rollups"]) == [5, 5, 5, 5]
    _, stamped = await api.get(f"{S}/triggers/{tids[0]}")
    assert (stamped["lastRunAt"], stamped["rollup"]["runs"]) == ("2026-12-01T09:00:04.000Z", 5)


async def test_a_refused_run_in_a_batch_leaves_the_others_and_its_tokens_written(api: Api) -> None:
    box = api.as_(await api.device_token(PEER))
    tid = (await api.create_trigger(owner=PEER))["id"]
    await claimed(api, box, [tid], 3)
    assert (await box.post(f"{S}/runs", [run(tid, 0)]))[0] == 200
    again = {**run(tid, 0), "status": "error", "error": "x"}  # another run under a taken id
    unclaimed = {**run(tid, 9), "key": "k9"}  # a fire nobody claimed
    status, answer = await box.post(f"{S}/runs", [run(tid, 1), again, unclaimed, run(tid, 2)])
    assert status == 200
    got = [(r["status"], r.get("error"), r.get("stamps")) for r in answer["runs"]]
    assert got == [
        (201, None, 200),
        (409, "run_exists", 200),
        (403, "not_claimed", 200),
        (201, None, 200),
    ]
    _, listing = await api.get(f"{S}/runs")
    assert [(r["runId"], r["status"]) for r in listing["runs"]] == [
        (f"run_{tid}_0", "ok"),
        (f"run_{tid}_1", "ok"),
        (f"run_{tid}_2", "ok"),
    ]
    _, rollups = await api.get(f"{S}/runs/rollup")
    assert rollups["rollups"][0]["counts"] == {"ok": 3}


async def test_a_free_part_beyond_the_bounds_is_refused_naming_its_path(api: Api) -> None:
    tid = (await api.create_trigger())["id"]
    deep: Any = 1
    for _ in range(63):
        deep = [deep]
    cases = [
        (
            [run(tid, 0), run(tid, 1, result={"n": 2**64})],
            "integer beyond 64 bits - at `$[1].result.n`",
        ),
        (run(tid, 0, term=2**64), "integer beyond 64 bits - at `$.term`"),
        ([run(tid, 0, result=deep)], "JSON nested deeper than 64 levels - at `$[0].result"),
        (
            run(tid, 0, stamps={"rollup": {"runs": -(2**70)}}),
            "integer beyond 64 bits - at `$.stamps.rollup.runs`",
        ),
    ]
    for body, detail in cases:
        status, answer = await api.post(f"{S}/runs", body)
        assert (status, answer["error"]) == (400, "invalid_run"), answer
        assert answer["detail"].startswith(detail), answer
    _, listing = await api.get(f"{S}/runs")
    assert listing["runs"] == []
