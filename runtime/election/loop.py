"""The election loop: keeps this device's standing in the floating-trigger lease.

Owns the loop (SPEC "Who runs what"): a heartbeat, a read of the lease and what
`decision.decide` says, through runtime.election.calls, stretched to the space's
`leaseSeconds`; beside it a renewal task renews the held lease by the measured round trip
when the loop has not, so a slow space is not a lost lease. `may_fire()`, the gate for
floating triggers, fails closed and turns false at once on a conflict, another holder or a
sleep; its edges go out as `RoleChanged`; `holds()` stays true through a pause in acting.
Must not decide anything itself (runtime.election.decision), nor die of the space or a
peer. Cancelling `run()` leaves the lease as it is; `release()` frees it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from datetime import timedelta

import msgspec

from core.aio import Backoff, TaskSet, sleep_until
from core.clock import iso
from core.peerwire import LeaseOut
from runtime.client.seat import Seat
from runtime.election import decision as lease
from runtime.election.calls import LeaseCalls, view_of
from runtime.election.heartbeat import Heartbeat
from runtime.election.sleepwatch import SleepWatch
from runtime.events import Bus, RoleChanged, Slept


class ElectionStatus(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """This device's standing in the lease, as `status()` tells it."""

    peer: str
    active: str | None
    term: int
    holding: bool
    may_fire: bool
    acts_until: str | None  # until when it may fire floating triggers (UTC)
    priority: int
    live: list[str]
    want: str | None
    parts_down: list[str]
    last_error: str | None


log = logging.getLogger(__name__)

BACKOFF_BASE = 0.25
RTT_KEPT = 4  # renewals are timed by the longest of the last few round trips


class Elector:
    """One device's side of the election in one space."""

    def __init__(
        self,
        seat: Seat,
        *,
        name: str,
        priority: int = 0,
        config: lease.Config = lease.DEFAULTS,
        report: Callable[[], object] | None = None,
        sleepwatch: SleepWatch | None = None,
    ) -> None:
        self._peer, self._clock, self._cfg = seat.peer, seat.clock, config
        self._calls = LeaseCalls(seat)
        self.heartbeat = Heartbeat(seat, name, report=report)
        self._state = lease.State(me=seat.peer, priority=priority)
        self._view: lease.LeaseView | None = None
        self._reported = False
        self._held = False  # what `holds()` was at the last edge
        self._wake = asyncio.Event()
        self._renew_wake = asyncio.Event()  # the standing changed: the renewal task looks again
        self._rtts: deque[float] = deque(maxlen=RTT_KEPT)  # the last claims' round trips
        self._renewals = 0  # answered by the renewal task, counted
        self._healthy = False
        self._retry = self._backoff().streak()
        self._error: str | None = None
        self._down: set[str] = set()  # device parts that are down: hold no lease meanwhile
        # one sleep detector for the device; alone (in tests) the elector has its own
        self._sleep = sleepwatch or SleepWatch(seat.clock, Bus())
        self.bus = self._sleep.bus  # RoleChanged is published here
        self.bus.subscribe(Slept, lambda _: self.slept())

    # --- what others read -------------------------------------------------------------------

    def may_fire(self) -> bool:
        """Whether floating triggers may fire on this device now.

        A turn seen here between two rounds of the loop is reported at once: a holder
        whose acting deadline passed before its renewal came back has dropped fires, and
        only a reported False-then-True makes the device bridge them (runtime.election.takeover)."""
        self._sleep.check()  # a sleep seen here stops the acting before it is reported
        allowed = self._allowed()
        if allowed != self._reported:
            self._edges()
        return allowed

    def _allowed(self) -> bool:
        return not self._down and lease.may_fire(self._state, self._clock.monotonic())

    @property
    def term(self) -> int:
        return self._state.term

    @property
    def active(self) -> str | None:
        """The election-active device as last seen (this one while it may fire)."""
        if lease.may_fire(self._state, self._clock.monotonic()):
            return self._peer
        return self._view.active if self._view else None

    def holds(self) -> bool:
        """Whether this device holds the lease as far as it knows, acting or paused by a
        late renewal (not by a sleep, which distrusts it): what floating triggers stay
        armed for, their chat subscriptions open."""
        state = self._state
        return state.holding and not self._down and state.acts_until > float("-inf")

    @property
    def renewing(self) -> bool:
        """Whether the renewal task times a renewal (asleep on the clock meanwhile): while
        it holds the lease, slept or not."""
        return self._state.holding and not self._down

    @property
    def beat_seconds(self) -> float:
        """How often this device heartbeats (the renew interval, following the space)."""
        return self._cfg.renew_s

    @property
    def live(self) -> frozenset[str]:
        return self.heartbeat.live

    def status(self) -> ElectionStatus:
        now, state = self._clock.monotonic(), self._state
        acts = None
        if state.holding and state.acts_until > now:
            acts = self._clock.wall() + timedelta(seconds=state.acts_until - now)
        return ElectionStatus(
            peer=self._peer,
            active=self.active,
            term=state.term,
            holding=state.holding,
            may_fire=lease.may_fire(state, now),
            acts_until=iso(acts) if acts else None,
            priority=state.priority,
            live=sorted(self.heartbeat.live),
            want=self._view.want if self._view else None,
            parts_down=sorted(self._down),
            last_error=self._error,
        )

    # --- what others tell us ----------------------------------------------------------------

    def slept(self) -> None:
        """The machine slept or its clock jumped: stop acting until a renewal succeeds,
        and heartbeat (with the device's new instance) before acquiring it again."""
        self._state = lease.on_slept(self._state, self._clock.monotonic())
        self.heartbeat.beat_now()
        self._edges()
        self._wake.set()
        self._renew_wake.set()

    def part_down(self, name: str) -> None:
        """A device part is down: stop acting now and free the lease until it is back."""
        self._down.add(name)
        if self._state.holding:
            log.warning("election: device part %s is down: giving the lease up", name)
        self._wake.set()
        self._edges()

    def part_up(self, name: str) -> None:
        self._down.discard(name)
        self._wake.set()

    async def sign_off(self) -> None:
        """Tell the space this device stopped cleanly: it is not live from now on."""
        await self.heartbeat.sign_off()

    async def release(self) -> None:
        """Free the lease if this device holds it (a clean stop); cancel `run()` first."""
        state = self._state
        self._state = lease.on_lost(state)
        self._edges()
        if state.holding:
            await self._calls.release(state.term)

    # --- the loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Heartbeat, read, decide, act, sleep; until cancelled (which does not release).
        The holder's renewals run beside, on a task of their own."""
        renewing = asyncio.create_task(self._renewing(), name="election renewal")
        try:
            while True:
                try:
                    wake = await self._round()
                    self._recovered()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    wake = self._failed(exc)
                self._edges()
                await self._nap(self._until(wake))
        finally:
            renewing.cancel()
            await asyncio.gather(renewing, return_exceptions=True)

    async def _renewing(self) -> None:
        """Renew while holding when the loop has not, in time for the answer to come back
        before the acting deadline (`lease.renew_at`); over a slow link several renewals
        may be in flight, so answers keep coming."""
        renewals = TaskSet("renewal")
        last_sent = float("-inf")
        try:
            while True:
                if not self.renewing:
                    await self._renew_wake.wait()
                    self._renew_wake.clear()
                    continue
                rtt = max(self._rtts, default=0.0)
                at = lease.renew_at(self._state, rtt, last_sent)
                if await sleep_until(self._clock, at, self._renew_wake):
                    self._renew_wake.clear()
                    continue  # the standing changed: when to renew changed with it
                last_sent = self._clock.monotonic()
                renewals.spawn(self._renew(self._state.term), name="election renewal")
        finally:
            await renewals.close()

    async def _renew(self, term: int) -> None:
        sent = self._clock.monotonic()
        try:
            answer = await self._calls.acquire(term)
        except Exception as exc:  # the deadline stops the acting; the loop logs the space
            log.debug("election: renewal at term %d failed: %s", term, exc)
            return
        self._rtts.append(self._clock.monotonic() - sent)
        if not (self._state.holding and self._state.term == term):
            return  # lost meanwhile (a conflict read by the loop): a late renewal changes nothing
        if answer is None or answer.active != self._peer:
            self._conflict(term)
        else:  # renewed; or re-acquired at the next term when it lapsed meanwhile (a sleep)
            self._fold(answer)
            self._state = lease.on_renewed(self._state, self._cfg, answer.term, sent)
            self._renewals += 1
            if answer.term != term:
                log.info("election: holding the lease at term %d", answer.term)
        self._edges()

    async def _round(self) -> float:
        """One pass; returns the monotonic time to look again."""
        renewed = self._renewals  # a renewal answered while the read was out makes it stale
        if self._clock.monotonic() >= self.heartbeat.due:  # side by side: a slow space
            _, answer = await asyncio.gather(self._beat(), self._calls.read())
            view = self._fold(answer)  # after the beat: its timings may follow the space's
        else:
            view = await self._read()
        if renewed == self._renewals:
            self._state = lease.observe(self._state, view)
        now = self._clock.monotonic()
        if self._down:  # a part is down: hold nothing until it is back
            if self._state.holding:
                await self.release()
            return now + self._cfg.poll_s
        step = lease.decide(self._state, view, self._cfg, now, self.heartbeat.priorities)
        return await self._act(step, now)

    async def _beat(self) -> None:
        sent = self._clock.monotonic()
        await self.heartbeat.beat(self._state.priority, self._cfg.renew_s)
        if not self._healthy:
            self._healthy = True
            self._state = msgspec.structs.replace(self._state, live_since=sent)

    async def _read(self) -> lease.LeaseView:
        return self._fold(await self._calls.read())

    def _fold(self, answer: LeaseOut) -> lease.LeaseView:
        self._follow(answer.leaseSeconds)
        self._view = view_of(answer, self._clock.monotonic())
        return self._view

    def _follow(self, seconds: float | None) -> None:
        """Stretch the timings to the space's lease length when it differs from ours."""
        if seconds is None or seconds <= 0 or seconds == self._cfg.lease_s:
            return
        log.info("election: the space's lease is %g s; timings follow it", seconds)
        self.heartbeat.due -= self._cfg.renew_s  # the next heartbeat follows the new interval too
        self._cfg = lease.scaled(float(seconds), like=self._cfg)
        self.heartbeat.due += self._cfg.renew_s
        self._retry.backoff = self._backoff()
        if self._state.holding:  # may act only as long as the space's lease allows
            state = self._state
            self._state = lease.on_renewed(state, self._cfg, state.term, state.last_renew_sent)

    async def _act(self, step: lease.Step, now: float) -> float:
        match step.act:
            case lease.Act.WAIT:
                return step.at
            case lease.Act.ACQUIRE | lease.Act.RENEW:
                return await self._acquire(step.term)
            case lease.Act.HANDOVER:
                return await self._handover(step.term, step.to or "")
            case lease.Act.WANT:
                await self._calls.want(self._state.priority)
                return now + self._cfg.poll_s

    async def _acquire(self, term: int) -> float:
        sent = self._clock.monotonic()
        answer = await self._calls.acquire(term)
        if answer is None:
            return self._conflict(term)
        self._fold(answer)
        if answer.active != self._peer:
            return self._conflict(term)
        gained = not self._state.holding or answer.term != self._state.term
        self._state = lease.on_renewed(self._state, self._cfg, answer.term, sent)
        self._rtts.append(self._clock.monotonic() - sent)
        self._renew_wake.set()
        if gained:
            log.info("election: holding the lease at term %d", self._state.term)
        return sent + self._cfg.renew_s

    def _conflict(self, term: int) -> float:
        if self._state.holding:
            log.warning("election: lost the lease at term %d (conflict)", term)
        self._state = lease.on_lost(self._state)
        return self._clock.monotonic() + self._cfg.poll_s

    async def _handover(self, term: int, to: str) -> float:
        self._state = lease.on_lost(self._state)  # stop acting before the lease moves
        self._edges()
        await self._calls.handover(term, to)
        return self._clock.monotonic() + self._cfg.poll_s

    def _backoff(self) -> Backoff:  # doubling up to the poll interval, without jitter
        return Backoff(base=BACKOFF_BASE, cap=max(BACKOFF_BASE, self._cfg.poll_s), jitter=False)

    def _failed(self, exc: Exception) -> float:
        delay = self._retry.failed()
        self._healthy = False
        message = f"{type(exc).__name__}: {exc}"
        if message != self._error:
            log.warning("election: %s (retrying)", message)
        self._error = message
        return self._clock.monotonic() + delay

    def _recovered(self) -> None:
        if self._retry.failures:
            log.info("election: the space answers again")
        self._retry.reset()
        self._error = None

    def _edges(self) -> None:
        """Publish `RoleChanged` when `may_fire()` turned, or when the lease was lost while
        not acting (a pause ended in a conflict); the renewal task looks again."""
        self._renew_wake.set()
        now, held = self._allowed(), self.holds()
        lost, self._held = self._held and not held, held
        if now == self._reported and not lost:
            return
        if now != self._reported:
            log.info("election: %s", "may fire floating triggers" if now else "stopped acting")
        else:
            log.info("election: the lease is no longer this device's (term %d)", self.term)
        self._reported = now
        self.bus.publish(RoleChanged(active=now, term=self._state.term))

    def _until(self, wake: float) -> float:
        """Wake no later than the moment this device must stop acting."""
        if lease.may_fire(self._state, self._clock.monotonic()):
            return min(wake, self._state.acts_until)
        return wake

    async def _nap(self, until: float) -> None:
        """Sleep until `until` or until `slept()` asks for a round now."""
        await sleep_until(self._clock, until, self._wake)
        self._wake.clear()
