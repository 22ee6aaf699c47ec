"""Handing over: the ledger's claims and runs posted to the space when it is back.

Owns the way a pinned fire claimed in the owner's ledger (runtime.fire.ledger) reaches
the space (SPEC "Who runs what": pinned ones run on): first its claim, after the fact,
the same claim (`claimId`) keyed like any, so a claim that went through is answered as
claimed and any other claim of its key `already_claimed` (the row then keeps that word,
and its run is not posted: the key has its record already); then its run record, without
stamps (the trigger's next run stamps the rollup that counts it). Tried after 0.5 s, 1 s,
2 s … 5 s while anything waits; `away` says whether the space failed the last try, so the
firing claims in the ledger straight away meanwhile. Must not run or decide a fire.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import msgspec

from core.wire import RunIn
from runtime.client.api import ApiError
from runtime.client.retry import transient
from runtime.client.seat import Seat
from runtime.fire import bodies
from runtime.fire.claimed import CLAIM, WAKE, Fire
from runtime.fire.claims import CLAIM_MAX, body
from runtime.fire.dispatch import named
from runtime.fire.ledger import CLAIMED, DONE, REFUSED, Ledger
from runtime.fire.recorder import BATCH_MAX

log = logging.getLogger("baton.ledger")
FIRST_S, LAST_S = 0.5, 5.0  # the backoff between tries while the space stays away


class HandOver:
    """The firing's side of the ledger (`sift`, `take`, `keep`; the firing sets `route`
    and `count`); `kick()` hands over what waits (at start, an earlier process's);
    `close()` at the end. Never raises."""

    def __init__(self, seat: Seat, ledger: Ledger) -> None:
        self._client, self._space, self._peer, self._clock = seat
        self.ledger = ledger
        self.away = False  # the space failed the last claim or try: claim in the ledger
        self.handed = 0  # claims handed over and recorded, since this process started
        self.route: Callable[[Fire], None] = lambda _: None  # the firing's
        self.count: Callable[[str], None] = lambda _: None
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def kept_in(cls, seat: Seat, ledger_file: Path | None) -> HandOver | None:
        """The owner's ledger in `ledger_file`, if the device keeps one: pinned fires run on
        while the space is away (SPEC "Who runs what")."""
        if ledger_file is None:
            return None
        return cls(seat, Ledger(ledger_file, seat.space, seat.peer, seat.clock))

    def sift(self, fires: list[Fire], woke: datetime) -> list[Fire]:
        """The fires to claim in the space: not a pinned one whose key the ledger holds
        (it ran or runs here), nor one while the space is away (claimed in the ledger)."""
        left = []
        for fire in fires:
            request = fire.request
            if request.trigger.floating:
                left.append(fire)
            elif self.ledger.holds(request.trigger.id, request.key):
                log.info(
                    "fire %s@%s claimed in the ledger already", named(request.trigger), request.key
                )
                self.count("already_claimed")
            elif self.away:
                fire.steps += [(WAKE, woke), (CLAIM, woke)]
                self.take(fire)
            else:
                left.append(fire)
        return left

    def take(self, fire: Fire) -> None:
        """Claim a pinned fire in the ledger, committed before it runs, and route it as
        claimed (no run token: the space is away); a key claimed there before is not."""
        claim = msgspec.structs.replace(body(fire, self._peer), run=None)
        if not self.ledger.claim(claim, fire.request, fire.run_id):
            log.info("fire %s@%s claimed in the ledger already", claim.triggerId, claim.key)
            self.count("already_claimed")
            return
        self.away = True
        self.count("ledgered")
        log.info("fire %s@%s claimed in the ledger: the space is away", claim.triggerId, claim.key)
        fire.local, fire.claimed_at = True, self._clock.monotonic()
        self.route(fire)

    def keep(self, run: RunIn) -> bool:
        """Keep `run`'s record in the ledger if its fire was claimed there (True)."""
        if not self.ledger.kept(run):
            return False
        self.kick()
        return True

    def kick(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._hand_over(), name="ledger hand-over")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _hand_over(self) -> None:
        delay = FIRST_S
        while self.ledger.waiting():
            try:
                await self._round()
                self.away = False
                continue  # runs that ended meanwhile go in the next round
            except ApiError as exc:
                self.away = transient(exc)
                log.info("ledger: %d claims wait for the space: %s", self.ledger.waiting(), exc)
            except Exception:  # a bug: logged, tried again
                log.exception("ledger: hand-over failed")
            await self._clock.sleep(delay)
            delay = min(2 * delay, LAST_S)

    async def _round(self) -> None:
        """Every claim waiting, then every run record of a claim taken; raises `ApiError`
        when a request fails (what was answered before it stays answered)."""
        held = self.ledger.to_claim()
        for n in range(0, len(held), CLAIM_MAX):
            chunk = held[n : n + CLAIM_MAX]
            answer = await self._client.fires_claim_list(self._space, chunk)
            for fire, result in zip(chunk, answer.claims, strict=True):
                run_id = "run_" + (fire.claimId or "").removeprefix("clm_")
                if result.status < 400:
                    self.ledger.mark(run_id, CLAIMED)
                    continue
                log.warning(
                    "ledger: fire %s@%s ran here, and the space refused its claim: %s: %s",
                    fire.triggerId,
                    fire.key,
                    result.error,
                    result.detail,
                )
                self.ledger.mark(run_id, REFUSED, result.error or str(result.status))
        ready = self.ledger.to_record()
        for n in range(0, len(ready), BATCH_MAX):
            await self._record(ready[n : n + BATCH_MAX])

    async def _record(self, runs: list[RunIn]) -> None:
        answer = await self._client.run_create_list(self._space, runs)
        for run, result in zip(runs, answer.runs, strict=True):
            if result.status < 400:
                self.ledger.mark(run.runId, DONE)
                self.handed += 1
            elif result.status == 400 and run.result is not None:  # its record, made storable
                self.ledger.rewrite(bodies.refused(run, result.detail or ""))
            else:
                log.warning("ledger: run %s not written: %s", run.runId, result.error)
                self.ledger.mark(run.runId, REFUSED, f"run {result.error}")
