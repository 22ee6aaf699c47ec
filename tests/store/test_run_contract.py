"""Run records on both stores: a posted run once (its stamps, rollup, outcome and tokens with
it, all or nothing), a list each run on its own, the listings; two servers on one database
posting one run write it once, and lists stamping the same records concurrently neither
deadlock nor skip a seq of the feed."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from core.vocab import RunStatus
from core.wire import FireIn, RunAsk, RunIn, Stamps
from space.appstate import RunRetention
from space.history import Author
from space.store import Store
from space.store.logwire import LogQuery, Poster
from space.token_store import Principal, Role, TokenError

SPACE = "home"
PEER = "box"
ADMIN = Author("admin", "by hand")
DEVICE = Poster(who=Principal(role=Role.DEVICE, peer=PEER, space=SPACE), keep=RunRetention())
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


async def _pinned(store: Store, name: str = "tick") -> str:
    body = {"name": name, "kind": "cron", "spec": {"expr": "0 3 * * *"}, "program": "p@v1"}
    return str((await store.create_record(SPACE, {**body, "owner": PEER}, ADMIN))["id"])


async def _claimed(store: Store, tid: str, key: str, run_id: str = "") -> str:
    """Claim `(tid, key)` as the device; the run's token if `run_id`."""
    ask = RunAsk(runId=run_id) if run_id else None
    fire = FireIn(triggerId=tid, key=key, term=0, peer=PEER, run=ask)
    return str((await store.claim_fire(SPACE, fire, 30.0)).get("token", ""))


def _run(tid: str, n: int, **kw: Any) -> RunIn:
    at = T0 + timedelta(seconds=n)
    fields: dict[str, Any] = {
        "runId": f"run_{tid}_{n}",
        "triggerId": tid,
        "peer": PEER,
        "key": f"k{n}",
        "startedAt": at,
        "status": RunStatus.OK,
        "stamps": Stamps(lastStatus="ok", lastRunAt=at, rollup={"runs": n}),
    }
    return RunIn(**{**fields, **kw})


async def test_a_run_is_written_once_with_its_stamps_rollup_and_the_end_of_its_token(
    store: Store,
) -> None:
    tid = await _pinned(store)
    token = await _claimed(store, tid, "k1", f"run_{tid}_1")
    await store.lookup_token(token)  # live while its run is
    posted = await store.post_run(SPACE, _run(tid, 1), DEVICE)
    assert posted.refusal is None and posted.added and posted.run is not None
    assert posted.run.stamps is None  # the stamps are the trigger's, not the run's
    with pytest.raises(TokenError):
        await store.lookup_token(token)
    again = await store.post_run(SPACE, _run(tid, 1), DEVICE)
    assert again.refusal is None and not again.added
    other = await store.post_run(SPACE, _run(tid, 1, status=RunStatus.ERROR), DEVICE)
    assert other.refusal is not None and other.refusal.code == "run_exists"
    _, record = await _record(store, tid)
    assert (record["lastStatus"], record["lastRunAt"]) == ("ok", "2026-12-01T09:00:01.000Z")
    assert record["rev"] == 1  # stamps never bump the rev
    feed = await store.changes_since(SPACE, 0, 10)
    assert [c["op"] for c in feed] == ["create", "stamp"]
    assert await store.rollups(SPACE, None) == [
        {"triggerId": tid, "runs": 1, "counts": {"ok": 1}, "lastRunAt": "2026-12-01T09:00:01.000Z"}
    ]
    shown = await store.run_body(SPACE, f"run_{tid}_1")
    assert shown is not None and shown["startedAt"] == "2026-12-01T09:00:01.000Z"
    assert "stamps" not in shown and await store.run_body(SPACE, "nope") is None


async def _record(store: Store, tid: str) -> tuple[int, dict[str, Any]]:
    row = await store.record_row(SPACE, tid)
    assert row is not None
    return row[0], msgspec.json.decode(row[1])


async def test_a_run_whose_stamps_are_refused_is_not_written_but_its_token_ends(
    store: Store,
) -> None:
    tid = await _pinned(store)
    token = await _claimed(store, tid, "k1", "run_x")
    posted = await store.post_run(SPACE, _run(tid, 1, runId="run_x", triggerId=tid), DEVICE)
    assert posted.refusal is None
    stray = _run("trg_0000000000000000", 2, runId="run_y")  # stamps an unknown record
    token = await _claimed(store, tid, "k2", "run_y")
    refused = await store.post_run(SPACE, msgspec.structs.replace(stray, key="k2"), DEVICE)
    assert refused.refusal is not None and refused.refusal.code == "not_claimed"
    assert refused.ended  # the run is over all the same
    with pytest.raises(TokenError):
        await store.lookup_token(token)
    admin = Poster(who=None, keep=RunRetention())
    unknown = await store.post_run(SPACE, _run("trg_0000000000000000", 3), admin)
    assert unknown.refusal is not None and unknown.refusal.code == "unknown_trigger"
    assert await store.run_body(SPACE, "run_trg_0000000000000000_3") is None  # all or nothing
    assert [r["runId"] for r in await store.runs_page(SPACE, _all())] == ["run_x"]


def _all(**filters: str) -> LogQuery:
    return LogQuery(filters=filters, since=None, limit=100)


async def test_a_list_takes_or_refuses_each_run_and_lists_them_oldest_first(store: Store) -> None:
    one, two = await _pinned(store, "a"), await _pinned(store, "b")
    for n in range(3):
        await _claimed(store, one, f"k{n}")
    await _claimed(store, two, "k1")
    runs = [_run(one, 0), _run(one, 1), _run(two, 1), _run(one, 9), _run(one, 2)]
    writer = msgspec.structs.replace(DEVICE, writer=f"{PEER}/rec")
    posted = await store.post_runs(SPACE, runs, writer)
    got = [(r.status, r.error, r.stamps) for r in posted.results]
    assert got == [(201, None, 200)] * 3 + [(403, "not_claimed", 200), (201, None, 200)]
    assert posted.ended == sorted(r.runId for r in runs if r.key != "k9")
    feed = await store.changes_since(SPACE, 0, 20)
    assert [(c["op"], c["triggerId"]) for c in feed[2:]] == [("stamp", one), ("stamp", two)]
    mine = await store.changes_since(SPACE, 0, 20, omit=f"{PEER}/rec")  # the device's own
    assert mine[2:] == [{"seq": 3, "omitted": True}, {"seq": 4, "omitted": True}]
    assert [c["seq"] for c in await store.changes_since(SPACE, 0, 20)] == [1, 2, 3, 4]
    listed = await store.runs_page(SPACE, _all(trigger_id=one))
    assert [r["runId"] for r in listed] == [f"run_{one}_{n}" for n in range(3)]
    latest = await store.runs_page(SPACE, LogQuery(filters={}, since=None, limit=2))
    assert [r["runId"] for r in latest] == [f"run_{two}_1", f"run_{one}_2"]  # ties by seq
    since = (T0 + timedelta(seconds=2)).timestamp()
    later = await store.runs_page(SPACE, LogQuery(filters={}, since=since, limit=10))
    assert [r["runId"] for r in later] == [f"run_{one}_2"]
    rolled = {r["triggerId"]: r["counts"] for r in await store.rollups(SPACE, None)}
    assert rolled == {one: {"ok": 3}, two: {"ok": 1}}
    assert [r["triggerId"] for r in await store.rollups(SPACE, two)] == [two]


async def test_runs_are_pruned_per_trigger_by_count_failures_kept_longer(store: Store) -> None:
    tid = await _pinned(store)
    keep = Poster(who=None, keep=RunRetention(ok_per_trigger=2, failure_per_trigger=3))
    statuses = [RunStatus.OK, RunStatus.ERROR] * 4
    runs = [_run(tid, n, status=s, stamps=None) for n, s in enumerate(statuses)]
    for run in runs:
        assert (await store.post_run(SPACE, run, keep)).added
    kept = [r["runId"] for r in await store.runs_page(SPACE, _all())]
    assert kept == [f"run_{tid}_{n}" for n in (3, 4, 5, 6, 7)]
    rolled = (await store.rollups(SPACE, tid))[0]
    assert rolled["counts"] == {"error": 4, "ok": 4} and rolled["runs"] == 8  # never pruned


async def test_two_servers_posting_one_run_write_it_once(store: Store, other_store: Store) -> None:
    tid = await _pinned(store)
    for n in range(10):
        await _claimed(store, tid, f"k{n}")
    for n in range(10):
        a, b = await asyncio.gather(
            store.post_run(SPACE, _run(tid, n), DEVICE),
            other_store.post_run(SPACE, _run(tid, n), DEVICE),
        )
        assert (a.refusal, b.refusal) == (None, None)
        assert sorted([a.added, b.added]) == [False, True]
    assert (await store.rollups(SPACE, tid))[0]["counts"] == {"ok": 10}
    assert len(await other_store.runs_page(SPACE, _all())) == 10


async def test_lists_stamping_the_same_records_at_once_keep_the_feed_gapless(
    store: Store, other_store: Store
) -> None:
    """Runs unclaimed (refused, so no rollup row orders the lists) with their stamps applied,
    the records of each list in opposite orders: locked as posted, two would deadlock."""
    tids = [await _pinned(store, f"t{i}") for i in range(4)]
    lists = [[_run(tid, n) for tid in (tids if n % 2 else tids[::-1])] for n in range(16)]
    answers = await asyncio.gather(
        *(
            (store, other_store)[n % 2].post_runs(SPACE, runs, DEVICE)
            for n, runs in enumerate(lists)
        )
    )
    assert all(r.error == "not_claimed" and r.stamps == 200 for a in answers for r in a.results)
    feed = await store.changes_since(SPACE, 0, 100)
    assert [c["seq"] for c in feed] == list(range(1, len(feed) + 1)) and len(feed) == 4 + 64
    seqs = sorted(r.stampsSeq or 0 for a in answers for r in a.results)
    assert len(set(seqs)) == len(seqs) == 64 and seqs[0] > 4
