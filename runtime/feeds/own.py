"""The device's own stamps: known from its writes' answers, so its feed need not carry them.

Owns what lets the change stream name the stamps this device posted instead of sending
them (space.changes, "writer"): the tag they are marked with, the stamps each answer says
were written at which `seq` (until the feed reaches that seq and the reconciler takes them,
in the feed's order), and whether a write is in flight (an `own` event may come before its
answer). `with_stamps` is how a record takes stamps, as the space merges them. No I/O;
runtime.feeds.reconciler holds it, runtime.fire.recorder tells it what it wrote.
"""

from __future__ import annotations

import asyncio
import secrets
from datetime import datetime

import msgspec

from core.aio import sleep_until
from core.clock import Clock
from core.wire import Stamps, to_wire
from triggers.records import Attempt, Base, Loaded, Salvaged, TriggerId, load

_FIELDS = {
    "lastStatus": "last_status",
    "lastStatusDetail": "last_status_detail",
    "lastRunAt": "last_run_at",
    "nextFireAt": "next_fire_at",
    "breaker": "breaker",
    "rollup": "rollup",
    "nextAttempt": "next_attempt",
}


class _StampFields(Base, frozen=True, kw_only=True):
    """A record's stamps as `load` decodes them (the types of `records._Stored`'s)."""

    last_status: str = ""
    last_status_detail: str = ""
    last_run_at: datetime | None = None
    next_fire_at: datetime | None = None
    breaker: dict[str, object] | None = None
    rollup: dict[str, object] | None = None
    next_attempt: Attempt | None = None


_decode = msgspec.json.Decoder(_StampFields)


def with_stamps(record: Loaded, stamps: Stamps) -> Loaded:
    """`record` with `stamps` as the space stores them: each given field replaced whole, in
    the one wire format (what the record's next load from the space would hold)."""
    given = to_wire(stamps)
    if isinstance(record, Salvaged):
        return load({**record.raw, **given})
    fields = _decode.decode(msgspec.json.encode(given))
    changes = {_FIELDS[k]: getattr(fields, _FIELDS[k]) for k in given if k in _FIELDS}
    return msgspec.structs.replace(record, **changes)


class OwnStamps:
    """Stamps this device wrote, by the `seq` of their change, until the feed reaches them."""

    def __init__(self, tag: str | None = None) -> None:
        self.tag = tag or secrets.token_hex(6)  # the writer mark: one per device process
        self.idle = asyncio.Event()  # set while no write is in flight
        self.idle.set()
        self.taken = 0  # own changes taken from answers instead of the feed
        self.waits = 0  # `own` events that came before their write's answer
        self._in_flight = 0
        self._known: dict[int, list[tuple[TriggerId, Stamps]]] = {}  # by seq, oldest first

    def writing(self) -> None:
        """A write of stamps under `tag` begins."""
        self._in_flight += 1
        self.idle.clear()

    def done(self) -> None:
        """That write is answered, or given up."""
        self._in_flight -= 1
        if self._in_flight <= 0:
            self._in_flight = 0
            self.idle.set()

    @property
    def in_flight(self) -> bool:
        return self._in_flight > 0

    def written(self, tid: TriggerId, stamps: Stamps, seq: int) -> None:
        """The answer: `tid`'s stamps written at `seq` (0: they changed nothing, no change)."""
        if seq > 0:
            self._known.setdefault(seq, []).append((tid, stamps))

    def take(self, seqs: list[int]) -> list[tuple[TriggerId, Stamps]] | None:
        """The stamps written at `seqs`, in order, forgotten here; None (and nothing
        forgotten) if one of them is not known (its answer not read yet, or lost)."""
        if any(seq not in self._known for seq in seqs):
            return None
        self.taken += len(seqs)
        return [each for seq in seqs for each in self._known.pop(seq)]

    async def answered(
        self, seqs: list[int], clock: Clock, wait: float
    ) -> list[tuple[TriggerId, Stamps]] | None:
        """`take`, after waiting up to `wait` s for the write in flight when one is unknown."""
        taken = self.take(seqs)
        if taken is None and self.in_flight:
            self.waits += 1
            await sleep_until(clock, clock.monotonic() + wait, self.idle)
            taken = self.take(seqs)
        return taken

    def forget(self, upto: int) -> None:
        """The feed reached `upto` by other means (a page, a listing): those are in it."""
        for seq in [s for s in self._known if s <= upto]:
            del self._known[seq]

    @property
    def pending(self) -> int:
        return len(self._known)
