"""The election loop: keeps this device's standing in the floating-trigger lease.

Owns talking to the space about the lease (SPEC "Who runs what" → Election):
heartbeats (`device_put` with name, priority and, given `report`, the device's
own status for `baton status`) every renew interval, reads of
the lease (`election`) and the live devices (`devices`), and carrying out what
`runtime.lease.decide` says (claim, renew, hand over, want). The space answers
`expiresInMs`, which becomes a local monotonic deadline at read time; no wall
clock is compared with another device's. The space's `leaseSeconds` wins over the
configured lease length: the timings stretch to it (`lease.scaled`).

`may_fire()` is the gate for floating triggers. It is false unless a claim or
renewal succeeded less than `lease_s - margin_s` ago, so a device cut off from
the space fails closed; and it turns false at once on a conflict, on reading
another holder, on `slept()` or when it sees the wall clock run away from the
monotonic clock since its last renewal. Listeners given to `on_change` hear
each edge of `may_fire()` (True: gained, False: lost) as the loop sees it.

Must not decide anything itself (that is `runtime.lease`), and must not die of
the space or a peer: errors are logged once per change, backed off, retried.
Cancelling `run()` leaves the lease as it is (a crash); `release()` frees it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import msgspec

from core.clock import Clock, iso, sleep_or_wake
from runtime import lease
from runtime.client import ApiError, SpaceClient

log = logging.getLogger(__name__)

MAX_SLEEP = 30.0
BACKOFF_BASE = 0.25
DEFAULT_CONFIG = lease.Config()
DRIFT_LIMIT = 3.0  # wall vs monotonic divergence that means "the machine slept"

Listener = Callable[[bool], object]


class Elector:
    """One device's side of the election in one space."""

    def __init__(
        self,
        client: SpaceClient,
        space: str,
        peer: str,
        *,
        name: str,
        priority: int = 0,
        clock: Clock,
        config: lease.Config = DEFAULT_CONFIG,
        report: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self._client, self._space, self._peer = client, space, peer
        self._report = report  # the device's own status, sent with each heartbeat
        self._name, self._clock, self._cfg = name, clock, config
        self._state = lease.State(me=peer, priority=priority)
        self._view: lease.LeaseView | None = None
        self._live: frozenset[str] = frozenset()
        self._priorities: dict[str, int] = {}
        self._listeners: list[Listener] = []
        self._reported = False
        self._wake = asyncio.Event()
        self._beat_due = float("-inf")
        self._healthy = False
        self._failures = 0
        self._error: str | None = None
        self._anchor: tuple[float, float] | None = None  # (wall epoch, monotonic) at renewal
        self.instance = ""  # sent with each heartbeat: a new one restarts the space's upSince
        self._down: set[str] = set()  # device parts that are down: hold no lease meanwhile

    # --- what others read -------------------------------------------------------------------

    def may_fire(self) -> bool:
        """Whether floating triggers may fire on this device now.

        A turn seen here between two rounds of the loop is reported at once: a holder
        whose acting deadline passed before its renewal came back has dropped fires, and
        only a reported False-then-True makes the device bridge them (runtime.takeover)."""
        if self._state.holding and self._drifted():
            self.slept()
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

    @property
    def beat_seconds(self) -> float:
        """How often this device heartbeats (the renew interval, following the space)."""
        return self._cfg.renew_s

    @property
    def live(self) -> frozenset[str]:
        return self._live

    @property
    def priorities(self) -> dict[str, int]:
        return dict(self._priorities)

    def on_change(self, callback: Listener) -> None:
        self._listeners.append(callback)

    def status(self) -> dict[str, Any]:
        now, state = self._clock.monotonic(), self._state
        acts = None
        if state.holding and state.acts_until > now:
            acts = self._clock.wall() + timedelta(seconds=state.acts_until - now)
        return {
            "peer": self._peer,
            "active": self.active,
            "term": state.term,
            "holding": state.holding,
            "mayFire": lease.may_fire(state, now),
            "actsUntil": iso(acts) if acts else None,
            "priority": state.priority,
            "live": sorted(self._live),
            "want": self._view.want if self._view else None,
            "partsDown": sorted(self._down),
            "lastError": self._error,
        }

    # --- what others tell us ----------------------------------------------------------------

    def slept(self) -> None:
        """The machine slept or its clock jumped: stop acting until a renewal succeeds,
        and heartbeat (with the device's new instance) before claiming again."""
        self._state = lease.on_slept(self._state, self._clock.monotonic())
        self._anchor = None
        self._beat_due = float("-inf")
        self._edges()
        self._wake.set()

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
        try:
            await self._client.device_put(self._space, self._peer, {"stopped": True})
        except Exception as exc:
            log.warning("election: could not sign off: %s", exc)

    async def release(self) -> None:
        """Free the lease if this device holds it (a clean stop); cancel `run()` first."""
        state = self._state
        self._state = lease.on_lost(state)
        self._edges()
        if not state.holding:
            return
        try:
            await self._client.election_release(
                self._space, {"peer": self._peer, "term": state.term}
            )
            log.info("election: released the lease at term %d", state.term)
        except Exception as exc:
            log.warning("election: could not release the lease at term %d: %s", state.term, exc)

    # --- the loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Heartbeat, read, decide, act, sleep; until cancelled (which does not release)."""
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

    async def _round(self) -> float:
        """One pass; returns the monotonic time to look again."""
        if self._clock.monotonic() >= self._beat_due:
            await self._beat()
        view = await self._read()
        self._state = lease.observe(self._state, view)
        now = self._clock.monotonic()
        if self._down:  # a part is down: hold nothing until it is back
            if self._state.holding:
                await self.release()
            return now + self._cfg.poll_s
        step = lease.decide(self._state, view, self._cfg, now, self._priorities)
        return await self._act(step, now)

    async def _beat(self) -> None:
        sent = self._clock.monotonic()
        body: dict[str, Any] = {"name": self._name, "priority": self._state.priority}
        if self.instance:
            body["instance"] = self.instance
        if self._report is not None:
            body["status"] = self._status_report()
        await self._client.device_put(self._space, self._peer, body)
        if not self._healthy:
            self._healthy = True
            self._state = msgspec.structs.replace(self._state, live_since=sent)
        self._beat_due = sent + self._cfg.renew_s
        listing = await self._client.devices(self._space)
        live = [d for d in listing["devices"] if d.get("live")]
        self._live = frozenset(d["peer"] for d in live)
        self._priorities = {d["peer"]: int(d.get("priority", 0)) for d in live}

    def _status_report(self) -> dict[str, Any]:
        try:
            return msgspec.to_builtins(self._report())  # type: ignore[misc]
        except Exception as exc:
            log.warning("election: the status report failed: %s", exc)
            return {"error": f"{type(exc).__name__}: {exc}"}

    async def _read(self) -> lease.LeaseView:
        answer = await self._client.election(self._space)
        return self._fold(answer)

    def _fold(self, answer: dict[str, Any]) -> lease.LeaseView:
        """A lease answer as a view anchored to local monotonic time."""
        expires_in = answer.get("expiresInMs")
        expires = float("-inf") if expires_in is None else expires_in / 1000.0
        self._follow(answer.get("leaseSeconds"))
        self._view = lease.LeaseView(
            active=answer.get("active"),
            term=int(answer["term"]),
            expires_at_mono=self._clock.monotonic() + expires,
            want=answer.get("want"),
        )
        return self._view

    def _follow(self, seconds: object) -> None:
        """Stretch the timings to the space's lease length when it differs from ours."""
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
            return
        if seconds == self._cfg.lease_s:
            return
        log.info("election: the space's lease is %g s; timings follow it", seconds)
        self._beat_due -= self._cfg.renew_s  # the next heartbeat follows the new interval too
        self._cfg = lease.scaled(float(seconds), like=self._cfg)
        self._beat_due += self._cfg.renew_s
        if self._state.holding:  # may act only as long as the space's lease allows
            state = self._state
            self._state = lease.on_renewed(state, self._cfg, state.term, state.last_renew_sent)

    async def _act(self, step: lease.Step, now: float) -> float:
        match step.act:
            case lease.Act.WAIT:
                return step.at
            case lease.Act.CLAIM | lease.Act.RENEW:
                return await self._claim(step.term)
            case lease.Act.HANDOVER:
                return await self._handover(step.term, step.to or "")
            case lease.Act.WANT:
                await self._client.election_want(self._space, {"peer": self._peer, "want": True})
                log.info("election: asked for the lease (priority %d)", self._state.priority)
                return now + self._cfg.poll_s

    async def _claim(self, term: int) -> float:
        sent, wall = self._clock.monotonic(), self._clock.wall().timestamp()
        body = {"peer": self._peer, "term": term}
        try:
            answer = await self._client.election_claim(self._space, body)
        except ApiError as exc:
            if exc.status == 409:
                return self._conflict(term)
            raise
        self._fold(answer)
        if answer.get("active") != self._peer:
            return self._conflict(term)
        gained = not self._state.holding or int(answer["term"]) != self._state.term
        self._state = lease.on_renewed(self._state, self._cfg, int(answer["term"]), sent)
        self._anchor = (wall, sent)
        if gained:
            log.info("election: holding the lease at term %d", self._state.term)
        return sent + self._cfg.renew_s

    def _conflict(self, term: int) -> float:
        if self._state.holding:
            log.warning("election: lost the lease at term %d (conflict)", term)
        self._state = lease.on_lost(self._state)
        return self._clock.monotonic() + self._cfg.poll_s

    async def _handover(self, term: int, to: str) -> float:
        body = {"peer": self._peer, "term": term, "to": to}
        self._state = lease.on_lost(self._state)  # stop acting before the lease moves
        self._edges()
        try:
            await self._client.election_handover(self._space, body)
            log.info("election: handed the lease over to %s at term %d", to, term + 1)
        except ApiError as exc:
            if exc.status != 409:
                raise
            log.warning("election: hand-over to %s refused: %s", to, exc)
        return self._clock.monotonic() + self._cfg.poll_s

    # --- errors, edges and sleeping -----------------------------------------------------------

    def _failed(self, exc: Exception) -> float:
        self._failures += 1
        self._healthy = False
        message = f"{type(exc).__name__}: {exc}"
        if message != self._error:
            log.warning("election: %s (retrying)", message)
        self._error = message
        delay = min(self._cfg.poll_s, BACKOFF_BASE * 2 ** (self._failures - 1))
        return self._clock.monotonic() + delay

    def _recovered(self) -> None:
        if self._failures:
            log.info("election: the space answers again")
        self._failures = 0
        self._error = None

    def _drifted(self) -> bool:
        if self._anchor is None:
            return False
        wall = self._clock.wall().timestamp() - self._anchor[0]
        return abs(wall - (self._clock.monotonic() - self._anchor[1])) > DRIFT_LIMIT

    def _edges(self) -> None:
        """Tell listeners when `may_fire()` turned."""
        now = self._allowed()
        if now == self._reported:
            return
        self._reported = now
        log.info("election: %s", "may fire floating triggers" if now else "stopped acting")
        for listener in list(self._listeners):
            try:
                listener(now)
            except Exception:
                log.exception("election: a change listener failed")

    def _until(self, wake: float) -> float:
        """Wake no later than the moment this device must stop acting."""
        if lease.may_fire(self._state, self._clock.monotonic()):
            return min(wake, self._state.acts_until)
        return wake

    async def _nap(self, until: float) -> None:
        """Sleep until `until` (at most 30 s) or until `slept()` asks for a round now."""
        seconds = min(MAX_SLEEP, max(0.0, until - self._clock.monotonic()))
        await sleep_or_wake(self._clock, seconds, self._wake)
        self._wake.clear()
