"""The reconcile loop against a real space server on 127.0.0.1 (SQLite in tmp_path).

Full sync, the change feed (create, patch, delete, stamps), responsibility flips,
skipped records, a server restart on the same file and the slow resync.
"""

import asyncio
import itertools
import json
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from multidict import CIMultiDict
from waiting import eventually

from core.aio import Backoff
from core.clock import Clock, FakeClock, SystemClock
from core.vocab import iso
from core.wire import Change
from runtime.client.api import SpaceClient
from runtime.client.seat import Seat
from runtime.events import Bus, DiffApplied, RecordEdited
from runtime.feeds.reconciler import Reconciler
from space import change_log, trigger_store
from space.app import create_app, default_admin_token_file
from space.db import open_db
from space.dbthread import db_call
from triggers.records import CronTrigger, PeerId, Salvaged
from triggers.registry import Diff

SPACE = "home"
ME, OTHER = "laptop", "box"
CRON = {"name": "tick", "kind": "cron", "spec": {"expr": "*/5 * * * *"}, "program": "tick@v1"}
_SERIAL = itertools.count(1)


def named(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with a name of its own (names are unique within a space)."""
    return {**body, "name": f"{body['name']}-{next(_SERIAL)}"}


FAST = {"backoff": Backoff(base=0.05, cap=0.2), "read_timeout": 10.0}


@dataclass
class Space:
    db: Path
    url: str
    port: int
    admin: SpaceClient
    device_token: str
    server: Any

    async def restart(
        self, aiohttp_server: Any, while_down: Callable[[Path], None], *middlewares: Any
    ) -> None:
        """Stop the server, run `while_down` on its file, start it again on the same port."""
        await self.server.close()
        while_down(self.db)
        app = create_app(self.db)
        app.middlewares.extend(middlewares)
        self.server = await aiohttp_server(app, port=self.port)


@web.middleware
async def no_replay(request: web.Request, handler: Any) -> web.StreamResponse:
    if "Last-Event-ID" in request.headers and "/changes" in request.path:
        latest = await db_call(request.app, change_log.latest, SPACE)
        headers = CIMultiDict(request.headers)
        headers["Last-Event-ID"] = str(latest)
        request = request.clone(headers=headers)
    return await handler(request)


@dataclass
class Run:
    """A running Reconciler and the diffs it published."""

    reconciler: Reconciler
    diffs: list[Diff] = field(default_factory=list)
    active: bool = False
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    edits: int = 0

    def on_diff(self, diff: Diff) -> None:
        self.diffs.append(diff)
        asyncio.get_running_loop().create_task(self._notify())

    def on_edit(self) -> None:
        self.edits += 1
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def until(self, predicate: Callable[[], bool], deadline: float = 2.0) -> None:
        async with asyncio.timeout(deadline), self.changed:
            await self.changed.wait_for(predicate)

    def ids(self, what: str) -> list[str]:
        out = []
        for d in self.diffs:
            out += [x if isinstance(x, str) else x.record.id for x in getattr(d, what)]
        return out


@pytest.fixture
async def space(tmp_path: Path, aiohttp_server) -> AsyncIterator[Space]:
    db = tmp_path / "space.db"
    server = await aiohttp_server(create_app(db))
    url = str(server.make_url("/"))
    async with SpaceClient(url, default_admin_token_file(db).read_text().strip()) as admin:
        await admin.space_create({"id": SPACE})
        token = (await admin.token_device({"peer": ME, "space": SPACE}))["token"]
        yield Space(db, url, server.port, admin, token, server)


@pytest.fixture
async def start(space: Space) -> AsyncIterator[Callable[..., Any]]:
    tasks: list[asyncio.Task] = []
    clients: list[SpaceClient] = []

    async def starter(
        clock: Clock | None = None, wrap: Callable[[Any], Any] = lambda f: f, **kw: Any
    ) -> Run:
        clock = clock or SystemClock()
        client = SpaceClient(space.url, space.device_token, clock=clock)
        clients.append(client)
        run = Run(reconciler=None)  # type: ignore[arg-type]
        kw.setdefault("stream_options", FAST)
        bus, on_diff, on_edit = Bus(), wrap(run.on_diff), kw.pop("on_edit", None)
        bus.subscribe(DiffApplied, lambda event: on_diff(event.diff))
        if on_edit is not None:
            bus.subscribe(RecordEdited, lambda _: on_edit())
        seat = Seat(client, SPACE, PeerId(ME), clock)
        run.reconciler = Reconciler(seat, is_active=lambda: run.active, bus=bus, **kw)
        tasks.append(asyncio.create_task(run.reconciler.run()))
        return run

    yield starter
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for client in clients:
        await client.close()


async def ready(run: Run) -> None:
    async with asyncio.timeout(5):
        await run.reconciler.ready.wait()


def write_raw(db: Path, tid: str, body: dict[str, Any]) -> None:
    """A record the API would refuse (newer build, hand edit): straight into the store."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("INSERT INTO triggers VALUES (?, ?, 1, ?)", [SPACE, tid, json.dumps(body)])
        conn.commit()
    finally:
        conn.close()


BAD_KIND = {"id": "trg_hook", "kind": "webhook", "spec": {"url": "x"}, "program": "p@v1"}
BAD_SPEC = {"id": "trg_bad", "kind": "cron", "spec": {"expr": "61 * * * *"}, "program": "p@v1"}


@pytest.mark.parametrize("active", [False, True])
async def test_first_sync_fills_records_and_registry_by_responsibility(space, start, active):
    floating = await space.admin.trigger_create(SPACE, named(CRON))
    mine = await space.admin.trigger_create(SPACE, named(CRON) | {"owner": ME})
    theirs = await space.admin.trigger_create(SPACE, named(CRON) | {"owner": OTHER})
    paused = await space.admin.trigger_create(SPACE, named(CRON) | {"owner": ME, "enabled": False})
    write_raw(space.db, "trg_hook", BAD_KIND)
    run = await start()
    run.active = active
    await ready(run)
    rec = run.reconciler
    ids = {floating["id"], mine["id"], theirs["id"], paused["id"], "trg_hook"}
    assert set(rec.records) == ids
    assert isinstance(rec.records["trg_hook"], Salvaged)
    assert isinstance(rec.records[theirs["id"]], CronTrigger)
    armed = {mine["id"], floating["id"]} if active else {mine["id"]}
    assert set(rec.registry) == armed
    assert set(run.ids("add")) == armed
    assert [s.id for s in run.diffs[0].skipped] == ["trg_hook"]
    assert rec.status().ready and rec.status().undecodable == 1


async def test_feed_brings_create_patch_stamp_delete_in_well_under_a_second(space, start):
    run = await start()
    await ready(run)
    admin, rec = space.admin, run.reconciler
    made = await admin.trigger_create(SPACE, named(CRON) | {"owner": ME})
    tid = made["id"]
    await run.until(lambda: run.ids("add") == [tid])
    await admin.trigger_patch(SPACE, tid, {"args": {"n": 2}})
    await run.until(lambda: run.ids("update") == [tid])
    await admin.trigger_status(SPACE, tid, {"lastStatus": "ok"})  # stamps only: no diff
    await admin.trigger_patch(SPACE, tid, {"name": "tock"})
    await run.until(lambda: len(run.ids("update")) == 2)
    assert len(run.diffs) == 3
    assert rec.records[tid].last_status == "ok"  # type: ignore[union-attr]
    assert rec.registry[tid].record.name == "tock"
    await admin.trigger_patch(SPACE, tid, {"spec": {"expr": "*/7 * * * *"}})
    await run.until(lambda: run.ids("rearm") == [tid])
    await admin.trigger_delete(SPACE, tid)
    await run.until(lambda: run.ids("remove") == [tid])
    assert tid not in rec.records and tid not in rec.registry
    sizes = [len(d.add) + len(d.remove) + len(d.rearm) + len(d.update) for d in run.diffs]
    assert sizes == [1] * 5  # one diff per change, none for the stamp


async def test_edits_to_records_armed_elsewhere_are_heard_and_stamps_are_not(space, start):
    run = await start(on_edit=lambda: run.on_edit())
    await ready(run)
    admin = space.admin
    theirs = await admin.trigger_create(SPACE, named(CRON) | {"owner": OTHER})  # never armed here
    await run.until(lambda: run.edits == 1)
    assert run.diffs == []
    await admin.trigger_status(SPACE, theirs["id"], {"lastStatus": "owner_offline"})
    await admin.trigger_patch(SPACE, theirs["id"], {"owner": "ghost"})  # a repin elsewhere
    await run.until(lambda: run.reconciler.records[theirs["id"]].owner == "ghost")
    assert run.reconciler.records[theirs["id"]].last_status == "owner_offline"
    assert run.edits == 2 and run.diffs == []  # the stamp alone was not an edit


async def test_bad_records_are_skipped_loudly_once_and_never_armed(space, start, caplog):
    caplog.set_level(logging.WARNING, logger="runtime.feeds.reconciler")
    write_raw(space.db, "trg_hook", BAD_KIND | {"owner": ME})
    write_raw(space.db, "trg_bad", BAD_SPEC | {"owner": ME})
    run = await start()
    await ready(run)
    await space.admin.trigger_status(SPACE, "trg_hook", {"lastStatus": "unsupported_kind"})
    await space.admin.trigger_status(SPACE, "trg_bad", {"lastStatus": "invalid_spec"})
    good = await space.admin.trigger_create(SPACE, named(CRON) | {"owner": ME})
    await run.until(lambda: good["id"] in run.ids("add"))  # the stamps came before it
    await run.reconciler.sync()
    warned = [r.getMessage() for r in caplog.records if r.name == "runtime.feeds.reconciler"]
    assert len([w for w in warned if "trg_hook" in w]) == 1
    assert len([w for w in warned if "trg_bad" in w]) == 1
    assert any("trg_hook" in w and "webhook" in w for w in warned)
    assert any("trg_bad" in w and "'cron'" in w for w in warned)
    assert set(run.reconciler.registry) == {good["id"]}
    assert run.reconciler.records["trg_hook"].raw["lastStatus"] == "unsupported_kind"  # type: ignore[union-attr]


async def test_resync_moves_floating_records_with_the_lease(space, start):
    floating = await space.admin.trigger_create(SPACE, named(CRON))
    mine = await space.admin.trigger_create(SPACE, named(CRON) | {"owner": ME})
    run = await start()
    await ready(run)
    rec = run.reconciler
    assert set(rec.registry) == {mine["id"]}
    run.active = True
    diff = await rec.resync()
    assert [a.record.id for a in diff.add] == [floating["id"]]
    assert set(rec.registry) == {floating["id"], mine["id"]}
    run.active = False
    diff = await rec.resync()
    assert diff.remove == (floating["id"],)
    assert set(rec.registry) == {mine["id"]}


async def test_a_resync_asked_before_the_first_sync_lists_the_records_once(
    space, start, aiohttp_server
):
    floating = await space.admin.trigger_create(SPACE, named(CRON))
    listings = 0

    @web.middleware
    async def counted(request: web.Request, handler: Any) -> web.StreamResponse:
        nonlocal listings
        listings += request.method == "GET" and request.path.endswith("/triggers")
        return await handler(request)

    await space.restart(aiohttp_server, lambda db: None, counted)
    run = await start()
    run.active = True  # the lease came before the first sync ended (a device's start)
    diff = await run.reconciler.resync()
    assert listings == 1 and set(run.reconciler.registry) == {floating["id"]}
    assert diff.empty  # the first sync armed it, as active already


async def test_a_server_restart_on_the_same_file_loses_no_change(space, start, aiohttp_server):
    run = await start()
    await ready(run)
    await space.restart(aiohttp_server, lambda db: create_in_store(db, "while-down"))
    await run.until(lambda: len(run.ids("add")) == 1, deadline=5)
    after = await space.admin.trigger_create(SPACE, named(CRON) | {"owner": ME, "name": "after"})
    await run.until(lambda: len(run.ids("add")) == 2)
    names = [run.reconciler.registry[i].record.name for i in run.ids("add")]
    assert names == ["while-down", "after"] and run.ids("add")[1] == after["id"]
    assert run.reconciler.status().feed == "live"
    assert run.reconciler.status().feed_connections >= 2  # resumed by the feed, not a resync


async def test_a_resumed_feed_that_skipped_changes_is_filled_from_the_pages(
    space, start, aiohttp_server
):
    run = await start()
    await ready(run)
    seq = run.reconciler.seq
    # the new server starts every change stream at its latest change, as a server
    # without a replay window would: the resuming client sees a jump in the cursor
    await space.restart(
        aiohttp_server, lambda db: create_in_store(db, "skipped by the stream"), no_replay
    )
    await run.until(lambda: len(run.ids("add")) == 1, deadline=5)
    (tid,) = run.ids("add")
    assert run.reconciler.registry[tid].record.name == "skipped by the stream"
    assert run.reconciler.seq > seq
    assert run.reconciler.status().feed_connections >= 2


async def test_a_listing_older_than_the_feed_never_moves_a_record_back(
    space, start, aiohttp_server
):
    hold, listed, gate = asyncio.Event(), asyncio.Event(), asyncio.Event()

    @web.middleware
    async def slow_listing(request: web.Request, handler: Any) -> web.StreamResponse:
        response = await handler(request)
        if request.method == "GET" and request.path.endswith("/triggers") and hold.is_set():
            listed.set()
            await gate.wait()  # the listing was taken; hold it back while the feed moves on
        return response

    await space.restart(aiohttp_server, lambda db: None, slow_listing)
    run = await start()
    await ready(run)
    hold.set()
    syncing = asyncio.create_task(run.reconciler.sync())
    async with asyncio.timeout(5):
        await listed.wait()
    made = await space.admin.trigger_create(SPACE, named(CRON) | {"owner": ME})
    await run.until(lambda: run.ids("add") == [made["id"]])
    gate.set()
    async with asyncio.timeout(5):
        diff = await syncing
    assert diff.empty and run.ids("remove") == []
    assert made["id"] in run.reconciler.registry and made["id"] in run.reconciler.records


async def test_the_slow_resync_catches_what_the_feed_missed(space, start):
    clock = FakeClock()
    run = await start(clock, resync_s=60.0)
    await ready(run)
    write_raw(space.db, "trg_quiet", CRON | {"id": "trg_quiet", "owner": ME})  # no feed entry
    async with asyncio.timeout(5):
        await clock.wait_for_sleepers(1)
        for _ in range(2):
            clock.advance(30)
            await clock.wait_for_sleepers(1)
    await run.until(lambda: "trg_quiet" in run.ids("add"))
    assert "trg_quiet" in run.reconciler.records


async def test_the_slow_resync_waits_a_thousand_times_a_long_sync(space, start, aiohttp_server):
    clock = FakeClock()

    @web.middleware
    async def slow_listing(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method == "GET" and request.path.endswith("/triggers"):
            clock.advance(0.1)  # a listing of a large space: 0.1 s
        return await handler(request)

    await space.restart(aiohttp_server, lambda db: None, slow_listing)
    run = await start(clock, resync_s=60.0)
    await ready(run)
    write_raw(space.db, "trg_quiet", CRON | {"id": "trg_quiet", "owner": ME})  # no feed entry
    async with asyncio.timeout(5):
        for _ in range(3):  # 90 s: past `resync_s`, not past 1,000 × 0.1 s
            await clock.wait_for_sleepers(1)
            clock.advance(30)
    assert "trg_quiet" not in run.reconciler.records
    async with asyncio.timeout(5):
        await clock.wait_for_sleepers(1)
        clock.advance(30)
    await run.until(lambda: "trg_quiet" in run.ids("add"))


async def test_an_unreachable_space_is_retried_until_it_answers(space, start, aiohttp_server):
    clock = FakeClock()
    made = await space.admin.trigger_create(SPACE, named(CRON) | {"owner": ME})
    await space.server.close()
    run = await start(clock)
    async with asyncio.timeout(5):
        await clock.wait_for_sleepers(1)  # the first sync failed: backing off
    assert not run.reconciler.ready.is_set()
    assert "unreachable" in (run.reconciler.status().error or "")
    await space.restart(aiohttp_server, lambda db: None)
    clock.advance(30)
    await ready(run)
    assert run.ids("add") == [made["id"]]


async def test_a_failing_callback_does_not_stop_the_loop(space, start):
    calls = 0

    def exploding(on_diff: Callable[[Diff], None]) -> Callable[[Diff], None]:
        def explode(diff: Diff) -> None:
            nonlocal calls
            calls += 1
            on_diff(diff)
            raise RuntimeError("consumer bug")

        return explode

    run = await start(wrap=exploding)
    await ready(run)
    made = await space.admin.trigger_create(SPACE, named(CRON) | {"owner": ME})
    await run.until(lambda: made["id"] in run.ids("add"))
    again = await space.admin.trigger_create(SPACE, named(CRON) | {"owner": ME})
    await run.until(lambda: again["id"] in run.ids("add"))
    assert calls == 2


def create_in_store(db: Path, name: str) -> None:
    """A record created while the server is down (with its feed entry)."""
    store = open_db(db)
    try:
        trigger_store.create(
            store, SPACE, CRON | {"owner": ME, "name": name}, "2026-12-01T09:00:00Z"
        )
    finally:
        store.conn.close()


async def test_a_stamp_change_is_taken_without_a_diff_nor_a_registry_copy(space, start):
    run = await start(on_edit=lambda: run.on_edit())
    await ready(run)
    rec = run.reconciler
    made = await space.admin.trigger_create(SPACE, named(CRON) | {"owner": ME})
    await run.until(lambda: run.ids("add") == [made["id"]])
    registry, edits = rec.registry, run.edits
    stamped = {**made, "nextFireAt": "2026-12-01T09:05:00.000Z", "lastStatus": "ok"}
    change = {"seq": rec.seq + 1, "triggerId": made["id"], "op": "stamp", "rev": made["rev"]}
    rec._apply_changes([Change(**change, at=made["updatedAt"], record=stamped)])
    assert rec.registry is registry and len(run.diffs) == 1 and run.edits == edits
    assert made["id"] in rec.touched.take()  # for the health pass, which judges stamps too
    assert rec.records[made["id"]].last_status == "ok"  # type: ignore[union-attr]
    assert rec.registry[made["id"]].record.next_fire_at is not None  # its stamps kept current


async def test_a_backfill_request_is_the_one_stamp_that_reaches_the_diff(space, start):
    """A backfill is stamped (no rev), yet the ticker must take it: it comes as an update."""
    run = await start()
    await ready(run)
    every_second = {"owner": ME, "spec": {"expr": "* * * * * *"}}
    made = await space.admin.trigger_create(SPACE, named(CRON) | every_second)
    await run.until(lambda: run.ids("add") == [made["id"]])
    since = datetime.fromisoformat(made["activeSince"])
    ask = {"from": iso(since), "to": iso(since + timedelta(seconds=1))}  # a range that passed
    await eventually(lambda: datetime.now(UTC) > since + timedelta(seconds=1), what="a slot")
    answer = await space.admin.trigger_backfill(SPACE, made["id"], ask)
    assert answer["keys"]
    await run.until(lambda: run.ids("update") == [made["id"]])
    held = run.reconciler.registry[made["id"]].record
    assert held.backfill is not None and held.backfill.id == answer["id"]


async def test_a_backfill_request_a_listing_brings_before_the_feed_is_not_missed(space, start):
    """The takeover race: the full sync's listing carries a backfill request the feed has
    not brought yet (its seq then drops the feed's change as old); same rev, same
    updatedAt, yet it is an update, else the ticker never fires the asked slots."""
    run = await start()
    await ready(run)
    made = await space.admin.trigger_create(SPACE, named(CRON) | {"owner": ME})
    await run.until(lambda: run.ids("add") == [made["id"]])
    asked = {"id": "bf_listed", "keys": [made["activeSince"]], "requestedAt": made["updatedAt"]}
    store = open_db(space.db)  # stamped straight into the file: no stream is woken
    try:
        trigger_store.stamp(store, SPACE, made["id"], {"backfill": asked}, made["updatedAt"])
    finally:
        store.conn.close()
    diff = await run.reconciler.sync()
    assert [a.record.id for a in diff.update] == [made["id"]]
    held = run.reconciler.registry[made["id"]].record
    assert held.backfill is not None and held.backfill.id == "bf_listed"


async def test_a_resync_keeps_the_record_objects_it_holds(space, start):
    run = await start()
    await ready(run)
    made = await space.admin.trigger_create(SPACE, named(CRON) | {"owner": ME})
    await run.until(lambda: run.ids("add") == [made["id"]])
    held = run.reconciler.records[made["id"]]
    run.reconciler.touched.take()
    assert (await run.reconciler.sync()).empty
    assert run.reconciler.records[made["id"]] is held
    assert len(run.reconciler.touched) == 0  # nothing changed: nothing for the health pass
