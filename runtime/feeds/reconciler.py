"""The reconcile loop: the space's trigger records, kept in memory and diffed into the registry.

Owns `records` (every record, undecodable too) and `registry` (the armed ones), kept
current by a full sync, the change feed (gaps filled from pages, nothing applied twice) and
a slow resync (SPEC "Reconcile, registry, health pass"). A stamp-only change is applied in
O(1) with no diff; so are this device's own stamps, which its stream names in `own` events
and which are taken, in the feed's order, from the answers to its writes (runtime.feeds.own).
Publishes `DiffApplied` and `RecordEdited`, feeds `touched`. Never dies of a record, a
callback or the network. Must not write records or decide when anything fires.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from datetime import datetime

import msgspec

from core.aio import Backoff, sleep_until
from core.clock import iso
from core.wire import Change, Stamps
from runtime.client.seat import Seat
from runtime.client.sse import SseEvent
from runtime.client.stream import Stream, StreamOptions
from runtime.events import Bus, DiffApplied, RecordEdited
from runtime.feeds import pages as feed
from runtime.feeds.own import OwnStamps, with_stamps
from runtime.health.touched import Touched
from triggers import diffing
from triggers import registry as reg
from triggers.records import Loaded, Salvaged, TriggerId

log = logging.getLogger(__name__)

RETRY = Backoff(base=1.0, cap=30.0, jitter=False)  # a failed sync; the feed retries at the cap
RESYNC_SPACING = 1000.0  # the slow resync waits at least this many times its last sync's length
OWN_WAIT = 10.0  # an `own` event waits at most this long for the answer of a write in flight


class OwnEvent(msgspec.Struct, frozen=True):
    seqs: list[int]  # changes of this device's stamps (space.changes, "own")


class ReconcilerStatus(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    ready: bool
    records: int
    armed: int
    undecodable: int
    seq: int
    received: int  # changes the feed brought
    own_taken: int  # own changes the feed named, taken from the writes' answers
    synced_at: str | None
    feed: str | None  # the change feed's stream state
    feed_connections: int
    error: str | None


class Reconciler:
    """Keeps `records` and `registry` equal to the space; `await run()` until cancelled."""

    def __init__(
        self,
        seat: Seat,
        *,
        is_active: Callable[[], bool],
        bus: Bus,
        resync_s: float = 300.0,
        stream_options: StreamOptions | None = None,
        touched: Touched | None = None,
        own_stamps: bool = True,
    ) -> None:
        self._client, self._space, self._peer, self._clock = seat
        self._is_active = is_active
        self._bus = bus
        self._resync_s = resync_s
        self._stream_options = stream_options or StreamOptions()
        self.records: dict[TriggerId, Loaded] = {}
        self.registry = reg.Registry()
        self.ready = asyncio.Event()
        self.seq = 0  # the last change reflected in `records`
        self.touched = Touched() if touched is None else touched  # for the health pass
        self._sorted_as: bool | None = None  # the role the last full sort was made with
        self._warned: dict[TriggerId, bytes] = {}
        self._sync_lock = asyncio.Lock()
        self._resync_now = asyncio.Event()
        self._retry = RETRY.streak()
        self._wait = 0.0  # the backoff after the latest failure
        self._error = ""
        self._synced_at: datetime | None = None
        self._sync_took = 0.0  # seconds the last full sync took
        self._sub: Stream | None = None
        self.received = 0
        # the recorder's stamps, named by the feed; None: they come back through it in full
        self.own = OwnStamps() if own_stamps else None

    # --- the loop ------------------------------------------------------------------------

    async def run(self) -> None:
        """First sync (retried until it succeeds), then the feed and the slow resync."""
        while not await self._sync_safely():
            await self._clock.sleep(self._wait)
        self.ready.set()
        async with asyncio.TaskGroup() as group:
            group.create_task(self._follow())
            group.create_task(self._resync_loop())

    async def resync(self) -> reg.Diff:
        """Re-sort responsibility now (e.g. the lease moved), then a full sync; never raises.

        Before the first sync is done, it waits for that one (which reads the role as it
        sorts: a second listing would double a start's work) and re-sorts if the role moved."""
        if not self.ready.is_set():
            await self.ready.wait()
            if self._sorted_as == self._is_active():
                return reg.Diff()
            return self._reconcile(list(self.records.values()))
        local = self._reconcile(list(self.records.values()))
        try:
            fetched = await self.sync()
        except Exception as exc:
            self._failed("resync", exc)
            self._resync_now.set()
            return local
        return feed.merge(local, fetched)

    async def sync(self) -> reg.Diff:
        """One full sync from the space: listing, folded with changes past its `seq`."""
        async with self._sync_lock:
            began = self._clock.monotonic()
            loaded, seq = await feed.listing(self._client, self._space, self._kept)
            while seq < self.seq:  # the feed already applied changes newer than the listing
                folded = await feed.fold_pages(self._client, self._space, loaded, seq)
                if folded == seq:  # the space's feed is behind ours (a restored store)
                    log.warning("reconcile: the space's feed is at %d, ours at %d", seq, self.seq)
                    self.seq = seq
                seq = folded
            self.seq = max(self.seq, seq)
            if self.own is not None:
                self.own.forget(self.seq)
            diff = self._reconcile(list(loaded.values()))
            self._synced_at, self._sync_took = self._clock.wall(), self._clock.monotonic() - began
            return diff

    async def _sync_safely(self) -> bool:
        try:
            await self.sync()
        except Exception as exc:  # ApiError, or a body that is not what the API promises
            self._failed("full sync", exc)
            return False
        self._retry.reset()
        self._error = ""
        return True

    async def _resync_loop(self) -> None:
        while True:
            await self._wait_resync()
            self._resync_now.clear()
            if not await self._sync_safely():
                await self._clock.sleep(self._wait)
                self._resync_now.set()  # try again after the backoff

    async def _wait_resync(self) -> None:
        wait = max(self._resync_s, RESYNC_SPACING * self._sync_took)
        await sleep_until(self._clock, self._clock.monotonic() + wait, self._resync_now)

    # --- the change feed -----------------------------------------------------------------

    async def _follow(self) -> None:
        while True:
            omit = self.own.tag if self.own is not None else None
            self._sub = self._client.changes_stream(
                self._space, last_id=self.seq, omit=omit, **self._stream_options
            )
            try:
                await self._sub.run(self._on_event)
            except Exception as exc:  # Permanent (401, 404 …): retry slowly, resync meanwhile
                self._failed("change feed", exc)
            self._resync_now.set()
            await self._clock.sleep(RETRY.cap)

    async def _on_event(self, event: SseEvent) -> None:
        try:
            if event.event == "change":
                self._apply_changes([msgspec.json.decode(event.data, type=Change)])
            elif event.event == "own":
                await self._apply_own(msgspec.json.decode(event.data, type=OwnEvent).seqs)
            elif event.event == "gap" or (event.event == "hello" and feed.cursor(event) > self.seq):
                await self._fill_gap()
        except Exception as exc:  # a bad event must not end the stream
            log.warning("change feed: event %s not applied: %r", event.seq, exc)
            self._resync_now.set()

    async def _fill_gap(self) -> None:
        async with self._sync_lock:
            more = True
            while more:
                page = await self._client.changes(self._space, since=self.seq)
                self._apply_changes(page.changes)
                more = page.more and bool(page.changes)
            if self.own is not None:
                self.own.forget(self.seq)

    def _kept(self, record: Loaded) -> Loaded:
        """The record object already held when it equals `record` (nothing new is kept)."""
        old = self.records.get(record.id)
        return old if old is not None and old == record else record

    def _apply_changes(self, changes: Iterable[Change]) -> None:
        fresh = [c for c in changes if c.seq > self.seq]
        if not fresh:
            return
        self.seq = fresh[-1].seq
        self.received += len(fresh)
        items = [item for item in map(feed.item, fresh) if not self._restamped(item)]
        if items:
            self._apply_items(items)

    async def _apply_own(self, seqs: list[int]) -> None:
        """This device's stamps at `seqs`, taken from its writes' answers in the feed's order;
        one whose answer is lost (or a stream not asked to leave them out) is read from the
        pages instead."""
        fresh = [seq for seq in seqs if seq > self.seq]
        if not fresh:
            return
        own = self.own
        taken = await own.answered(fresh, self._clock, OWN_WAIT) if own is not None else None
        if taken is None or fresh[0] <= self.seq:  # the pages brought them meanwhile: none lost
            await self._fill_gap()
            return
        self.seq = fresh[-1]
        for tid, stamps in taken:
            self._take_own(tid, stamps)

    def _take_own(self, tid: TriggerId, stamps: Stamps) -> None:
        """This device's stamps: the held record takes them as the feed would have brought
        them (user fields, rev and backfill unchanged: no diff)."""
        record = self.records.get(tid)
        if record is None:
            return
        self.records[tid] = new = with_stamps(record, stamps)
        self.touched.add(tid)
        if not isinstance(new, Salvaged):
            reg.restamp(self.registry, new)

    def _restamped(self, item: Loaded | reg.Deleted) -> bool:
        """A stamp-only write of a record held here, taken in O(1); False for anything else.

        Stamps never bump `rev` nor `updatedAt`, so the same pair on the same kind means
        the user fields are the ones already held (a `stamp` op, or an echo of one). A
        backfill request is stamped too, but the ticker must take it: it goes to the diff."""
        if isinstance(item, reg.Deleted | Salvaged):
            return False
        prev = self.records.get(item.id)
        if (
            prev is None
            or type(prev) is not type(item)
            or prev.rev != item.rev
            or prev.updated_at != item.updated_at
            or item.updated_at is None
            or prev.backfill != item.backfill
        ):
            return False
        self.records[item.id] = item
        self.touched.add(item.id)
        reg.restamp(self.registry, item)
        return True

    def _apply_items(self, items: list[Loaded | reg.Deleted]) -> None:
        edited = False
        for item in items:
            edited = edited or feed.edited(self.records.get(item.id), item)
            self.touched.add(item.id)
            if isinstance(item, reg.Deleted):
                self.records.pop(item.id, None)
                self._warned.pop(item.id, None)
            else:
                self.records[item.id] = item
        active = self._is_active()
        diff = diffing.reconcile_changes(self.registry, items, self._peer, active)
        self._publish(diff)
        if edited:
            self._bus.publish(RecordEdited())

    # --- applying ------------------------------------------------------------------------

    def _reconcile(self, records: list[Loaded]) -> reg.Diff:
        held, self.records = self.records, {r.id: r for r in records}
        if held:
            self.touched.update(t for t, r in self.records.items() if held.get(t) is not r)
            self.touched.update(tid for tid in held if tid not in self.records)
        else:
            self.touched.update(self.records)  # a first sync: every record is news
        self._warned = {k: v for k, v in self._warned.items() if k in self.records}
        self._sorted_as = self._is_active()
        diff = diffing.reconcile(self.registry, records, self._peer, self._sorted_as)
        self._publish(diff)
        return diff

    def _publish(self, diff: reg.Diff) -> None:
        for skip in diff.skipped:
            self._warn_once(skip)
        self.registry = reg.absorb(self.registry, diff)  # keeps `refresh` too
        if diff.empty:
            return
        log.info("reconcile: %s", diff.summary)
        self._bus.publish(DiffApplied(diff))

    def _warn_once(self, skip: reg.Skipped) -> None:
        record = self.records.get(skip.id)
        raw = record.raw if isinstance(record, Salvaged) else {}
        mark = feed.fingerprint(raw)
        if self._warned.get(skip.id) != mark:
            self._warned[skip.id] = mark
            log.warning(skip.warning)

    # --- failures and status -------------------------------------------------------------

    def _failed(self, what: str, exc: Exception) -> None:
        self._wait = self._retry.failed()
        self._error = f"{what}: {exc}"
        log.warning("reconcile: %s failed (attempt %d): %s", what, self._retry.failures, exc)

    def status(self) -> ReconcilerStatus:
        stream = self._sub.status if self._sub is not None else None
        return ReconcilerStatus(
            ready=self.ready.is_set(),
            records=len(self.records),
            armed=len(self.registry),
            undecodable=sum(isinstance(r, Salvaged) for r in self.records.values()),
            seq=self.seq,
            received=self.received,
            own_taken=self.own.taken if self.own is not None else 0,
            synced_at=iso(self._synced_at) if self._synced_at else None,
            feed=stream.state.value if stream is not None else None,
            feed_connections=stream.connections if stream is not None else 0,
            error=self._error,
        )
