"""History, spaces and the scrape on both stores of the seam: what `why` reads back, the
prune by retention (two servers pruning one database at once), a backfill's stamp, a space
created once of many servers racing, and what `/metrics` reads."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from core.chatwire import MessageIn
from core.peerwire import HeartbeatIn
from space import leases
from space.history import Author
from space.http import Refusal
from space.servertime import iso
from space.store import Claimed, ClaimIn, Store
from space.store.postgres import PostgresStore
from space.store.sqlite import SqliteStore

SPACE = "home"
CRON = {"kind": "cron", "spec": {"expr": "*/5 * * * *"}, "program": "tick@v1", "owner": "box"}
DAY = 86400.0
INSTANTS = {("history_terms", "began"), ("history_terms", "ended"), ("fires", "claimed_at")}


async def _put(store: Store, table: str, row: dict[str, Any]) -> None:
    """A row written as the store keeps it: the instants of `INSTANTS` given as unix seconds
    (PostgreSQL: timestamptz; SQLite: `fires.claimed_at` the wire's text, the rest REAL)."""
    if isinstance(store, PostgresStore):
        values = [
            datetime.fromtimestamp(v, UTC) if (table, k) in INSTANTS and v is not None else v
            for k, v in row.items()
        ]
        marks = ", ".join(f"${i}" for i in range(1, len(row) + 1))
        await store.pool.execute(
            f"INSERT INTO {table} ({', '.join(row)}) VALUES ({marks})", *values
        )
        return
    assert isinstance(store, SqliteStore)
    values = [
        iso(datetime.fromtimestamp(v, UTC)) if (table, k) == ("fires", "claimed_at") else v
        for k, v in row.items()
    ]
    sql = f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})"
    await store.thread.call(lambda db: db.execute(sql, values))


async def _rows(store: Store, sql: str) -> list[tuple[Any, ...]]:
    if isinstance(store, PostgresStore):
        return [tuple(r) for r in await store.pool.fetch(sql)]
    assert isinstance(store, SqliteStore)
    return [tuple(r) for r in await store.thread.call(lambda db: db.execute(sql).fetchall())]


async def _prune_all(store: Store, days: float = 30.0, claims_days: float = 30.0) -> int:
    total = 0
    while (gone := await store.prune_history(days, claims_days)) > 0:
        total += gone
    return total


async def test_prune_forgets_past_the_retention_by_the_store_s_clock(store: Store) -> None:
    now = datetime.now(UTC).timestamp()
    old, young = now - 40 * DAY, now - DAY
    for at in (old, young):
        refusal = {"space": SPACE, "trigger_id": "t", "key": str(at), "at": at, "peer": "p"}
        await _put(store, "history_refusals", {**refusal, "term": 1, "code": "c", "detail": ""})
        await _put(store, "history_applied", {"space": SPACE, "peer": "p", "at": at, "seq": 1})
        offset = {"space": SPACE, "peer": "p", "at": at, "offset_ms": 5.0}
        await _put(store, "history_offsets", offset)
        window = {"space": SPACE, "peer": "p", "began": at - 5, "last_seen": at}
        await _put(store, "history_windows", window)
        stream = {"space": SPACE, "peer": "p", "object_id": "c", "began": at - 5, "ended": at}
        await _put(store, "history_subscriptions", {**stream, "resumed": False})
        fire = {"space": SPACE, "trigger_id": "t", "key": str(at), "term": 1, "peer": "p"}
        await _put(store, "fires", {**fire, "claimed_at": at})
    term = {"space": SPACE, "holder": "p", "began": old - 5}
    await _put(store, "history_terms", {**term, "term": 1, "ended": old, "how": "expired"})
    await _put(store, "history_terms", {**term, "term": 2, "ended": None, "how": None})  # open
    stream = {"space": SPACE, "peer": "p", "object_id": "c", "began": old, "ended": None}
    await _put(store, "history_subscriptions", {**stream, "resumed": False})  # a crash's
    revision = {"space": SPACE, "seq": 1, "actor": "admin", "note": "", "changes": "{}"}
    for tid, rev, at, op in (
        ("kept", 1, old, "create"),
        ("kept", 2, old + 1, "edit"),  # how the record stood at the cutoff: kept
        ("kept", 3, young, "edit"),
        ("gone", 1, old, "create"),
        ("gone", 2, old + 1, "delete"),
    ):
        fields = {"trigger_id": tid, "rev": rev, "at": at, "op": op, "record": None}
        await _put(store, "history_revisions", {**revision, **fields})
    assert await _prune_all(store) == 11
    for table in ("history_refusals", "history_applied", "history_offsets", "fires"):
        assert len(await _rows(store, f"SELECT * FROM {table}")) == 1, table
    assert await _rows(store, "SELECT term FROM history_terms") == [(2,)]
    assert len(await _rows(store, "SELECT * FROM history_windows")) == 1
    assert len(await _rows(store, "SELECT * FROM history_subscriptions")) == 1
    kept = await _rows(store, "SELECT trigger_id, rev FROM history_revisions ORDER BY rev")
    assert kept == [("kept", 2), ("kept", 3)]
    assert await store.prune_history(0.5, 0.5) == 7  # a shorter retention: the young ones
    assert await _rows(store, "SELECT trigger_id, rev FROM history_revisions") == [("kept", 3)]


async def test_two_servers_pruning_at_once_forget_each_row_once(
    store: Store, other_store: Store
) -> None:
    old = datetime.now(UTC).timestamp() - 40 * DAY
    rows = 1200  # more than two batches of each
    if isinstance(store, PostgresStore):
        await store.pool.execute(
            "INSERT INTO history_refusals SELECT 'home', 't', g::text, $1, 'p', 1, 'c', '' "
            "FROM generate_series(1, $2) g",
            old,
            rows,
        )
    else:
        assert isinstance(store, SqliteStore)
        sql = "INSERT INTO history_refusals VALUES ('home', 't', ?, ?, 'p', 1, 'c', '')"
        await store.thread.call(
            lambda db: db.conn.executemany(sql, [(str(i), old) for i in range(rows)])
        )
    gone = await asyncio.gather(_prune_all(store), _prune_all(other_store), _prune_all(store))
    assert sum(gone) == rows
    assert await _rows(store, "SELECT count(*) FROM history_refusals") == [(0,)]


async def test_why_reads_a_record_s_revisions_and_the_facts_around_its_slot(
    store: Store, other_store: Store
) -> None:
    admin = Author("admin")
    made = await store.create_record(SPACE, dict(CRON), admin)
    tid = made["id"]
    await other_store.patch_record(SPACE, tid, {"enabled": False}, None, Author("device:p", "away"))
    told = await store.trigger_history(SPACE, tid)
    assert [(r.rev, r.op, r.actor, r.note) for r in told.revisions] == [
        (1, "create", "admin", ""),
        (2, "pause", "device:p", "away"),
    ]
    assert told.revisions[1].changes == {"enabled": [None, False]}
    assert told.stored is not None and told.stored[0] == 2
    assert told.began <= told.revisions[0].at <= told.now
    assert abs((told.now - datetime.now(UTC)).total_seconds()) < 5  # the store's clock

    beat = HeartbeatIn(instance="i1", appliedSeq=2, offsetMs=-300.0)
    await store.heartbeat(SPACE, "box", beat, 15.0)

    def take(lease: leases.Lease, now: datetime) -> leases.Lease:
        return leases.Lease(
            active="box", term=lease.term + 1, expires_at=now + timedelta(seconds=15)
        )

    await store.change_lease(SPACE, take)
    key = iso(datetime.now(UTC).replace(second=0, microsecond=0))
    for attempt in (key, f"{key}#3", f"{key}#2", f"{key}#20"):
        claim = ClaimIn(
            space=SPACE, trigger_id=tid, key=attempt, term=1, peer="box", floating=False
        )
        assert isinstance(await store.claim(claim), Claimed)
    slot = datetime.fromisoformat(key).timestamp()
    facts = await other_store.slot_history(SPACE, tid, key, slot, 120.0)
    assert facts.claim is not None and (facts.claim.peer, facts.claim.term) == ("box", 1)
    assert list(facts.retries) == [f"{key}#2", f"{key}#3", f"{key}#20"]  # attempt order
    assert [(t.term, t.holder, t.ended) for t in facts.terms] == [(1, "box", None)]
    assert [w.peer for w in facts.windows] == ["box"] and facts.windows[0].stopped is False
    assert [(a.peer, a.seq) for a in facts.applied] == [("box", 2)]
    assert [(o.peer, o.ms) for o in facts.offsets] == [("box", -300.0)]
    assert facts.refusals == [] and facts.run is None
    none = await store.slot_history(SPACE, tid, "2020-01-01T00:00:00.000Z", 1577836800.0, 120.0)
    assert none.claim is None and none.retries == {} and none.terms == []
    assert await store.done_at(SPACE, tid, 1) is None  # no run ended ok


async def test_a_message_and_the_streams_of_its_chat_are_read_back(store: Store) -> None:
    chat = await store.create_chat(SPACE, "feed")
    sent, _ = await store.add_message(
        SPACE, chat.objectId, MessageIn(text="hi", agent={"name": "a"})
    )
    by_id = await store.chat_message("", 0.0, sent.message_id)
    assert by_id is not None and (by_id.message_id, by_id.agent) == (sent.message_id, "a")
    last = await store.chat_message(chat.objectId, by_id.accepted.timestamp() + 1, None)
    assert last == by_id
    assert await store.chat_message(chat.objectId, by_id.accepted.timestamp() - 60, None) is None
    accepted = await store.messages_accepted([sent.message_id, "msg_nope"])
    assert accepted == {sent.message_id: iso(by_id.accepted), "msg_nope": None}
    at = by_id.accepted.timestamp()
    stream = {"space": SPACE, "peer": "box", "object_id": chat.objectId, "began": at - 5}
    await _put(store, "history_subscriptions", {**stream, "ended": None, "resumed": True})
    streams = await store.chat_streams(SPACE, chat.objectId, at)
    assert [(s.peer, s.ended, s.resumed) for s in streams] == [("box", None, True)]
    assert await store.chat_turn(SPACE, chat.objectId, sent.message_id, at) is None


async def test_a_backfill_stamps_the_never_claimed_slots_in_one_transaction(store: Store) -> None:
    made = await store.create_record(SPACE, dict(CRON), Author("admin"))
    tid, keys = made["id"], ["2026-12-01T09:00:00.000Z", "2026-12-01T09:05:00.000Z"]
    claim = ClaimIn(space=SPACE, trigger_id=tid, key=keys[0], term=0, peer="box", floating=False)
    assert isinstance(await store.claim(claim), Claimed)
    seen: list[datetime] = []

    def slots(record: dict[str, Any], now: datetime) -> list[str]:
        assert record["id"] == tid
        seen.append(now)
        return keys

    def dry(fresh: list[str], now: datetime) -> None:
        return None

    seq = await store.latest_seq(SPACE)
    assert await store.backfill(SPACE, tid, slots, dry) == ([keys[1]], 1)
    assert await store.latest_seq(SPACE) == seq  # nothing written

    def stamp(fresh: list[str], now: datetime) -> dict[str, Any]:
        return {"backfill": {"id": "bf_1", "keys": fresh, "requestedAt": iso(now)}}

    assert await store.backfill(SPACE, tid, slots, stamp) == ([keys[1]], 1)
    rev, body = await store.record_row(SPACE, tid) or (0, "")
    assert rev == 1 and '"backfill":{"id":"bf_1","keys":["2026-12-01T09:05:00.000Z"]' in body
    assert await store.latest_seq(SPACE) == seq + 1
    assert abs((seen[-1] - datetime.now(UTC)).total_seconds()) < 5

    def refuse(record: dict[str, Any], now: datetime) -> list[str]:
        raise Refusal(400, "invalid_backfill", "no")

    with pytest.raises(Refusal):
        await store.backfill(SPACE, tid, refuse, stamp)
    with pytest.raises(Refusal) as unknown:
        await store.backfill(SPACE, "trg_nope", slots, stamp)
    assert unknown.value.status == 404


async def test_a_scrape_reads_spaces_devices_claims_and_leases(store: Store) -> None:
    await store.create_space("a-space", "a-space")
    await store.create_space(SPACE, SPACE)
    await store.heartbeat(SPACE, "box", HeartbeatIn(status={"ready": True}), 15.0)
    await store.heartbeat(SPACE, "old", HeartbeatIn(stopped=True), 15.0)

    def take(lease: leases.Lease, now: datetime) -> leases.Lease:
        return leases.Lease(
            active="box", term=lease.term + 1, expires_at=now + timedelta(seconds=15)
        )

    await store.change_lease(SPACE, take)
    made = await store.create_record(SPACE, dict(CRON), Author("admin"))
    claim = ClaimIn(space=SPACE, trigger_id=made["id"], key="k", term=1, peer="box", floating=False)
    assert isinstance(await store.claim(claim), Claimed)
    got = await store.scrape()
    assert got.spaces == ["a-space", SPACE]
    assert [(d[0], d[1], bool(d[3])) for d in got.devices] == [
        (SPACE, "box", False),
        (SPACE, "old", True),
    ]
    assert got.fires == [(SPACE, 1)] and got.runs == [] and got.failed == {} and got.late == {}
    assert [(s, lease.active, lease.term) for s, lease in got.held] == [(SPACE, "box", 1)]
    assert not got.held[0][1].lapsed(got.now)
    assert abs((got.now - datetime.now(UTC)).total_seconds()) < 5
