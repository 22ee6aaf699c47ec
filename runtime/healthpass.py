"""The health pass: stamps every record this device answers for with why it cannot run.

Owns the loop around `triggers.health` (SPEC "Reconcile, registry, health
pass"): once per pass it builds one `HealthInputs` (programs published in the
space plus the runtime's own `internal:` refs, the active peer and the live
devices from the Elector, the missing chats from the subscriptions, open
breakers and last run statuses from the records' own stamps), asks
`health.due` which stamps change, and writes only those through
`runtime.recorder`. A stamp already sent while the record still shows the stamp it
had then is not sent again, so a feed that lags behind costs nothing. Passes run every
`interval` seconds and soon after `kick()`. A pass works on a snapshot of the
records taken at its start, so records arriving meanwhile change nothing under it;
it yields to the loop every `PASS_CHUNK` records (100,000 never hold the loop). Given a
`version` of the records and of the armed fires (the reconciler's and the ticker's
counts of changes), a pass that finds them, the programs, the election and the chats
as the last pass left them, when that pass wrote nothing, judges nothing until the clock alone could
turn a verdict (`turns_at`) or `FULL_PASS` has gone by: a device at rest with
100,000 triggers costs ≈ 0 CPU between changes.

It also keeps `nextFireAt` true: for the records this device stamps, the next
fire the ticker has armed (`next_fires`), or none for a record it has not armed
(paused, or run elsewhere), written only when it differs from the record's. A
stamped `nextFireAt` that came due with no run since is left standing until a
run is stamped (the run's stamps carry the next one), so a fire that never ran
shows as `overdue` instead of being papered over by the next slot. A first
`nextFireAt` further ahead than `NEXT_FIRE_HORIZON` is not written yet (it is
written by the pass that finds it within the horizon, well before it is due), so
100,000 monthly jobs armed at once cost no write until they come near.

Must not judge a record itself (that is `triggers.health`), and must not die
of a record or the space: a pass that cannot learn the programs stamps
nothing; one record's failed write, or a record that raises, is logged and
the pass goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from core.aio import sleep_until
from core.clock import iso
from runtime import healthstamps as stamps
from runtime.client import ApiError
from runtime.election import Elector
from runtime.recorder import Recorder
from runtime.seat import Seat
from triggers import health
from triggers.records import (
    CHAT_WATCH_PROGRAM,
    Loaded,
    PeerId,
    Salvaged,
    TriggerId,
)

log = logging.getLogger(__name__)

INTERNAL_PROGRAMS = frozenset({CHAT_WATCH_PROGRAM})
RETRY_S = 5.0
PASS_CHUNK = 2000  # records judged between two yields to the loop

Records = Callable[[], Mapping[TriggerId, Loaded]]
NextFires = Callable[[], Mapping[TriggerId, datetime]]


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
        next_fires: NextFires | None = None,
        interval: float = 30.0,
        internal_programs: frozenset[str] = INTERNAL_PROGRAMS,
        version: Callable[[], object] | None = None,
    ) -> None:
        self._client, self._space, self._peer, self._clock = seat
        self._records, self._elector = records, elector
        self._recorder = recorder
        self._missing = missing_chats
        self._next_fires = next_fires
        self._interval, self._internal = interval, internal_programs
        self._version = version
        self._settled: object = None  # what the last pass read, when it wrote nothing
        self._until = datetime.min.replace(tzinfo=UTC)
        self._sent: dict[TriggerId, tuple[tuple[str, str], health.Stamp]] = {}
        self._wake = asyncio.Event()
        self.passes = 0
        self.stamped = 0
        self._last_pass: datetime | None = None
        self._error: str | None = None

    def kick(self) -> None:
        """Run a pass soon (records, programs, chats or the election changed)."""
        self._wake.set()

    def status(self) -> dict[str, Any]:
        last = iso(self._last_pass) if self._last_pass else None
        return {"passes": self.passes, "stamped": self.stamped, "lastPassAt": last,
                "lastError": self._error}  # fmt: skip

    async def run(self) -> None:
        """A pass now, then one every `interval` or on `kick()`, until cancelled."""
        while True:
            wait = self._interval
            try:
                await self.run_pass()
                self._error = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                wait = min(self._interval, RETRY_S)
                self._failed(exc)
            await self._nap(wait)

    async def run_pass(self) -> int:
        """One pass; how many stamps it wrote."""
        version = self._version() if self._version is not None else None
        programs = await self._programs()
        key = (version, programs, self._elector.active, frozenset(self._elector.live),
               self._missing())  # fmt: skip
        if version is not None and self._settled == key and self._clock.wall() < self._until:
            self.passes += 1  # nothing it reads changed, and no verdict turns by the clock yet
            return 0
        current = dict(self._records())  # a snapshot: the reconciler changes its dict meanwhile
        inputs = self._inputs(current.values(), programs)
        written = await self._judge(current, inputs)
        armed = self._next_fires() if self._next_fires else {}
        self._settled = key if written == 0 else None
        settled = written == 0
        self._until = stamps.turns_at(current.values(), armed, inputs) if settled else inputs.now
        self.passes += 1
        self.stamped += written
        self._last_pass = inputs.now
        return written

    async def _judge(self, current: dict[TriggerId, Loaded], inputs: health.HealthInputs) -> int:
        written = 0
        for chunk in _chunks(list(current.values())):
            for stamp in health.due(chunk, self._peer, inputs):
                written += await self._write(stamp, stamps.shown(current.get(stamp.id)))
            await asyncio.sleep(0)  # 100,000 records: the loop is never held for the pass
        if self._next_fires is not None:
            written += await self._stamp_next_fires(current.values(), inputs)
        return written

    async def inputs(self, records: Iterable[Loaded]) -> health.HealthInputs:
        """What this pass knows about `records`, gathered once."""
        return self._inputs(records, await self._programs())

    def _inputs(self, records: Iterable[Loaded], programs: frozenset[str]) -> health.HealthInputs:
        return health.HealthInputs(
            now=self._clock.wall(),
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

    async def _write(self, stamp: health.Stamp, shown: tuple[str, str]) -> int:
        if self._sent.get(stamp.id) == (shown, stamp):
            return 0  # sent while the record showed this already; the feed has not caught up
        body = {"lastStatus": stamp.status, "lastStatusDetail": stamp.detail}
        try:
            await self._recorder.stamp(stamp.id, body)
        except ApiError as exc:
            if exc.code == "undecodable_record":  # not even JSON as stored: read-only, say once
                self._sent[stamp.id] = (shown, stamp)
                log.warning("health %s: %s, cannot be stamped: %s", stamp.id, stamp.status, exc)
            elif exc.status != 404:  # a record deleted meanwhile is nothing to report
                log.warning("health %s: could not stamp %s: %s", stamp.id, stamp.status, exc)
            return 0
        self._sent[stamp.id] = (shown, stamp)
        log.info("health %s: %s %s", stamp.id, stamp.status or "cleared", stamp.detail)
        return 1

    async def _stamp_next_fires(
        self, records: Iterable[Loaded], inputs: health.HealthInputs
    ) -> int:
        armed = self._next_fires() if self._next_fires else {}
        written = 0
        for n, record in enumerate(records):
            if n % PASS_CHUNK == PASS_CHUNK - 1:
                await asyncio.sleep(0)
            if isinstance(record, Salvaged) or not health.stamper(
                record, self._peer, inputs.active_peer, inputs.live
            ):
                continue
            want = armed.get(record.id)
            same = stamps.same_instant(record.next_fire_at, want)
            if same or stamps.not_near(record, want, inputs.now):
                continue
            if want is not None and stamps.awaits_run(record, inputs.now):
                continue  # a fire due with no run yet: moving it on would hide an `overdue`
            body = {"nextFireAt": iso(want) if want else None}
            try:
                await self._recorder.stamp(record.id, body)
            except ApiError as exc:
                if exc.status != 404:
                    log.warning("health %s: could not stamp nextFireAt: %s", record.id, exc)
                continue
            written += 1
        return written

    def _failed(self, exc: Exception) -> None:
        message = f"{type(exc).__name__}: {exc}"
        if message != self._error:
            log.warning("health pass: %s (retrying)", message)
        self._error = message

    async def _nap(self, seconds: float) -> None:
        """Sleep `seconds` or until `kick()`."""
        if await sleep_until(self._clock, self._clock.monotonic() + seconds, self._wake):
            self._wake.clear()


def _chunks(items: list[Loaded]) -> Iterable[list[Loaded]]:
    return (items[i : i + PASS_CHUNK] for i in range(0, len(items), PASS_CHUNK))
