"""The health pass: stamps every record this device answers for with why it cannot run.

Owns the loop around `triggers.health` (SPEC "Reconcile, registry, health pass"): it builds
`HealthInputs`, judges what changed (a `Touched`) and the records whose re-check came
(runtime.health.rechecks), and writes only the stamps that change, `nextFireAt` included,
through runtime.fire.recorder (a `nextFireAt` a previous holder left is written anew at
once, never shown in the past); at rest it judges nothing. Must not judge a record itself
(`triggers.health`), and must not die of a record or the space.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta

import msgspec

from core.aio import sleep_until
from core.clock import iso
from core.wire import Stamps
from runtime.client.api import ApiError
from runtime.client.seat import Seat
from runtime.election.loop import Elector
from runtime.fire.recorder import Recorder
from runtime.health import verdicts as stamps
from runtime.health.rechecks import Rechecks
from runtime.health.touched import Touched
from triggers import health
from triggers.records import CHAT_WATCH_PROGRAM, Loaded, PeerId, Salvaged, Trigger, TriggerId

log = logging.getLogger(__name__)

INTERNAL_PROGRAMS = frozenset({CHAT_WATCH_PROGRAM})
RETRY_S = 5.0
PASS_CHUNK = 2000  # records judged between two yields to the loop

Records = Callable[[], Mapping[TriggerId, Loaded]]
NextFireAt = Callable[[TriggerId], datetime | None]


class HealthStatus(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    passes: int
    stamped: int
    judged: int
    last_pass_at: str | None
    last_error: str | None


class HealthPass:
    """Periodic, kickable health stamping for one device in one space."""

    def __init__(
        self,
        seat: Seat,
        *,
        recorder: Recorder,
        records: Records,
        elector: Elector,
        missing_chats: Callable[[], frozenset[str]],
        next_fire: NextFireAt | None = None,
        interval: float = 30.0,
        internal_programs: frozenset[str] = INTERNAL_PROGRAMS,
        touched: Touched | None = None,
        settled: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        self._client, self._space, self._peer, self._clock = seat
        self._records, self._elector = records, elector
        self._recorder = recorder
        self._missing = missing_chats
        self._next_fire = next_fire
        self._interval, self._internal = interval, internal_programs
        self._touched, self._settled = touched, settled
        self._inputs_seen: object = None  # what every verdict read at the last full pass
        self._dirty: set[TriggerId] = set()  # to judge; kept across a pass that failed
        self._turns = Rechecks()
        self._sent: dict[TriggerId, tuple[tuple[str, str], health.Stamp]] = {}
        self._wake = asyncio.Event()
        self.passes = 0
        self.stamped = 0
        self.judged = 0  # records judged so far (a pass at rest judges none)
        self._last_pass: datetime | None = None
        self._error: str | None = None
        self._started: datetime | None = None  # the first pass
        self._held_since: datetime | None = None  # the first pass that saw this device active

    def kick(self) -> None:
        """Run a pass soon (records, programs, chats or the election changed)."""
        self._wake.set()

    def status(self) -> HealthStatus:
        last = iso(self._last_pass) if self._last_pass else None
        return HealthStatus(
            passes=self.passes,
            stamped=self.stamped,
            judged=self.judged,
            last_pass_at=last,
            last_error=self._error,
        )

    async def run(self) -> None:
        """A pass now, then one every `interval`, on `kick()` or at a turn, until cancelled."""
        while True:
            wait = self._interval
            try:
                if self._settled is not None:
                    await self._settled()
                await self.run_pass()
                self._error = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                wait = min(self._interval, RETRY_S)
                self._failed(exc)
            await self._nap(self._until_turn(wait))

    async def run_pass(self) -> int:
        """One pass over what changed (everything, the first time); how many stamps it wrote."""
        programs = await self._programs()
        now = self._clock.wall()
        self._gather(programs, now)
        todo = list(self._dirty)
        written = 0
        for start in range(0, len(todo), PASS_CHUNK):
            chunk = todo[start : start + PASS_CHUNK]
            written += await self._judge(chunk, programs, now)
            self._dirty.difference_update(chunk)
            if len(todo) > PASS_CHUNK:
                await asyncio.sleep(0)  # 100,000 records: the loop is never held for the pass
        self.passes += 1
        self.stamped += written
        self._last_pass = now
        return written

    def _gather(self, programs: frozenset[str], now: datetime) -> None:
        """What this pass judges: what changed and what turned, or everything when what every
        verdict reads changed (or there is no `Touched`, or stale turns piled up)."""
        records = self._records()
        active = self._elector.active
        if self._started is None:
            self._started = now
        if active == self._peer and self._held_since is None:
            self._held_since = now  # took the lease: what came due before is not ours
        elif active != self._peer:
            self._held_since = None
        seen = (programs, active, frozenset(self._elector.live), self._missing())
        piled = self._turns.held > 2 * len(records) + 1024
        if self._touched is None or seen != self._inputs_seen or piled:
            self._inputs_seen = seen
            self._turns.clear()
            if self._touched is not None:
                self._touched.take()  # judged below with everything else
            self._dirty = set(records)
            return
        self._dirty |= self._touched.take()
        self._dirty |= self._turns.pop_due(now)

    async def _judge(
        self, ids: Sequence[TriggerId], programs: frozenset[str], now: datetime
    ) -> int:
        records = self._records()
        found = [r for tid in ids if (r := records.get(tid)) is not None]
        for tid in ids:
            if tid not in records:
                self._sent.pop(tid, None)  # gone: nothing to remember of it
        inputs = self._inputs(found, programs, now)
        found, written = await self._drop_stale(found, inputs)
        for stamp in health.due(found, self._peer, inputs):
            written += await self._write(stamp, stamps.shown(records.get(stamp.id)), now)
        for record in found:
            if isinstance(record, Salvaged) or not self._stamps(record, inputs):
                continue
            want = self._next_fire(record.id) if self._next_fire is not None else None
            if self._next_fire is not None:
                written += await self._stamp_next_fire(record, want, inputs)
            if (at := stamps.turn(record, want, inputs)) is not None:
                self._turns.push(at, record.id)
        self.judged += len(found)
        return written

    async def _drop_stale(
        self, found: list[Loaded], inputs: health.HealthInputs
    ) -> tuple[list[Loaded], int]:
        """A `nextFireAt` that came due before this device began stamping the record (the
        previous holder's, or from before this device started) is not its fire to wait for:
        it is written anew from the armed next fire before anything is judged, so a
        takeover never shows a next fire in the past, nor `overdue` for it."""
        kept: list[Loaded] = []
        written = 0
        for record in found:
            if (
                isinstance(record, Salvaged)
                or (want := self._instead_of_stale(record, inputs)) is None
            ):
                kept.append(record)
            elif await self._stamp_next_fire(record, want, inputs, check_run=False):
                kept.append(msgspec.structs.replace(record, next_fire_at=want))
                written += 1
            else:
                kept.append(record)
        return kept, written

    def _instead_of_stale(self, record: Trigger, inputs: health.HealthInputs) -> datetime | None:
        """The armed next fire to show instead of a stamped one that came due before this
        device began stamping `record`; None when the stamp is not stale."""
        if record.next_fire_at is None or self._next_fire is None:
            return None
        if record.next_fire_at >= self._stamping_since(record) or not self._stamps(record, inputs):
            return None
        return self._next_fire(record.id)

    def _stamping_since(self, record: Trigger) -> datetime:
        """Since when this device stamps `record`: since it took the lease for a floating
        one, since its first pass for one pinned to it."""
        if record.owner or self._held_since is None:
            return self._started or stamps.EPOCH
        return self._held_since

    def _stamps(self, record: Trigger, inputs: health.HealthInputs) -> bool:
        return health.stamper(record, self._peer, inputs.active_peer, inputs.live)

    def _inputs(
        self, records: Iterable[Loaded], programs: frozenset[str], now: datetime
    ) -> health.HealthInputs:
        records = list(records)
        return health.HealthInputs(
            now=now,
            programs=programs,
            active_peer=stamps.peer_or_none(self._elector.active),
            live=frozenset(PeerId(p) for p in self._elector.live),
            missing_chats=self._missing(),
            breaker_until=stamps.open_breakers(records),
            last_run_status=stamps.last_statuses(records),
        )

    async def _programs(self) -> frozenset[str]:
        listing = await self._client.programs(self._space)
        return frozenset(p.ref for p in listing.programs) | self._internal

    async def _write(self, stamp: health.Stamp, shown: tuple[str, str], now: datetime) -> int:
        if self._sent.get(stamp.id) == (shown, stamp):
            return 0  # sent while the record showed this already; the feed has not caught up
        body = Stamps(lastStatus=stamp.status, lastStatusDetail=stamp.detail)
        try:
            await self._recorder.stamp(stamp.id, body)
        except ApiError as exc:
            if exc.code == "undecodable_record":  # not even JSON as stored: read-only, say once
                self._sent[stamp.id] = (shown, stamp)
                log.warning("health %s: %s, cannot be stamped: %s", stamp.id, stamp.status, exc)
            elif exc.status != 404:  # a record deleted meanwhile is nothing to report
                log.warning("health %s: could not stamp %s: %s", stamp.id, stamp.status, exc)
                self._retry(stamp.id, now)
            return 0
        self._sent[stamp.id] = (shown, stamp)
        log.info("health %s: %s %s", stamp.id, stamp.status or "cleared", stamp.detail)
        return 1

    async def _stamp_next_fire(
        self,
        record: Trigger,
        want: datetime | None,
        inputs: health.HealthInputs,
        *,
        check_run: bool = True,
    ) -> int:
        """Write `nextFireAt` when the armed next fire differs from the record's (rules above)."""
        if stamps.same_instant(record.next_fire_at, want) or stamps.not_near(
            record, want, inputs.now
        ):
            return 0
        if check_run and want is not None and stamps.awaits_run(record, inputs.now):
            return 0  # a fire due with no run yet: moving it on would hide an `overdue`
        try:
            await self._recorder.stamp(record.id, Stamps(nextFireAt=want))
        except ApiError as exc:
            if exc.status != 404:
                log.warning("health %s: could not stamp nextFireAt: %s", record.id, exc)
                self._retry(record.id, inputs.now)
            return 0
        return 1

    def _retry(self, tid: TriggerId, now: datetime) -> None:
        self._turns.push(now + timedelta(seconds=RETRY_S), tid)

    def _until_turn(self, wait: float) -> float:
        """`wait`, or less when a record's turn comes sooner."""
        turn = self._turns.earliest()
        if turn is None:
            return wait
        return max(0.0, min(wait, (turn - self._clock.wall()).total_seconds()))

    def _failed(self, exc: Exception) -> None:
        message = f"{type(exc).__name__}: {exc}"
        if message != self._error:
            log.warning("health pass: %s (retrying)", message)
        self._error = message

    async def _nap(self, seconds: float) -> None:
        """Sleep `seconds` or until `kick()`."""
        if await sleep_until(self._clock, self._clock.monotonic() + seconds, self._wake):
            self._wake.clear()
