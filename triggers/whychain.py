"""The chain of named checks `why` runs for one slot, each deciding from history facts.

Owns `Chain`: slot → active → enabled → device → up → applied → bridge → claim → run
(SPEC "History and `why`"); each check appends a passing `Check` naming its evidence or
raises `Fail` with the reason. A fact outranks an inference: a claim proves its device
was up and had the record, so the device checks pass on it. Must not read the clock or do
I/O (`now` is a fact); the answer's shape is `triggers.why`'s.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import msgspec

from core.vocab import FAILED, RunStatus, iso
from triggers import facts as f
from triggers import whyclock, whypolicy
from triggers.slots import Asked
from triggers.whywords import Reason, Verdict, reason_of_code, reason_of_run

LATE_MS = 2000.0  # a run that started later than this after its slot is `fired_late`
BRIDGE_W = 120.0  # a stream resumed within this long replays what it missed (the window W)
PENDING_SLACK = 30.0  # how long after its slot a fire may still be claimed (the live slack)
RUN_MARGIN = 30.0  # past the record's timeout, a claim with no run has surely not run
CHECKS = ("slot", "active", "enabled", "device", "up", "applied", "bridge", "claim", "run")


class Check(msgspec.Struct, frozen=True):
    name: str
    ok: bool
    detail: str


class Located(msgspec.Struct, frozen=True, kw_only=True):
    """The slot a question names: what was asked, the slot, its fire key."""

    asked: Asked
    slot: datetime | None
    key: str | None
    detail: str = ""
    record: dict[str, Any] | None = None  # as it stood at the asked instant (before a delete)


class Fail(Exception):
    def __init__(self, reason: Reason, detail: str, verdict: Verdict | None = None) -> None:
        super().__init__(detail)
        self.reason, self.detail, self.verdict = reason, detail, verdict


class Chain:
    """The checks, run in order (`run`); `checks` the passed ones, `outcome` when all pass."""

    def __init__(self, where: Located, facts: f.Facts) -> None:
        self.where, self.facts = where, facts
        self.checks: list[Check] = []
        self.step = "slot"
        self.outcome: tuple[Reason, str] = (Reason.FIRED, "")
        self.responsible: str | None = None
        self.bridged = False
        self.revision: f.Revision | None = None

    def passed(self, detail: str) -> None:
        self.checks.append(Check(self.step, True, detail))

    def run(self) -> None:
        steps = (self.slot, self.active, self.enabled, self.device, self.up, self.applied)
        for name, step in zip(CHECKS, (*steps, self.bridge, self.claim, self.ran), strict=True):
            self.step = name
            step()

    @property
    def slot_at(self) -> datetime:
        assert self.where.slot is not None
        return self.where.slot

    @property
    def rev(self) -> f.Revision:
        assert self.revision is not None
        return self.revision

    @property
    def record(self) -> dict[str, Any]:
        return self.rev.record or {}

    # --- slot, active, enabled --------------------------------------------------------------

    def slot(self) -> None:
        where = self.where
        if where.asked is Asked.NONE and where.record is None:
            first = self.facts.revisions[0] if self.facts.revisions else None
            made = f"; it was {first.said()}" if first else ""
            raise Fail(
                Reason.BEFORE_ACTIVE, f"the trigger did not exist yet{made}", Verdict.NOT_DUE
            )
        if where.asked is Asked.NONE:
            raise Fail(Reason.NOT_A_SLOT, where.detail)
        if where.asked is not Asked.SLOT:
            raise Fail(Reason(where.asked.value), where.detail)
        if self.slot_at > self.facts.now:
            raise Fail(Reason.NOT_A_SLOT, f"the slot {iso(self.slot_at)} has not come yet")
        m = self.facts.message
        if m is not None:
            self.passed(f"message {m.message_id} accepted at {iso(m.accepted)}")
        else:
            wall = f.wall_of(where.record, self.slot_at)
            more = whypolicy.slot_words(where.record or {}, where.key, self.slot_at)
            self.passed(f"slot {iso(self.slot_at)} (key {where.key}{wall}){more}")

    def active(self) -> None:
        revisions = self.facts.revisions
        rev = f.in_force(revisions, self.slot_at)
        if rev is None:
            detail = f"the slot came before the trigger was {revisions[0].said()}"
            raise Fail(Reason.BEFORE_ACTIVE, detail, Verdict.NOT_DUE)
        if rev.record is None:
            raise Fail(Reason.DELETED, f"the trigger was {rev.said()}")
        self.revision = rev
        since = f.instant_of(rev.record.get("activeSince"))
        if since is not None and self.slot_at < since:
            if snooze := whypolicy.snoozed(rev.record, revisions, self.slot_at):
                raise Fail(Reason.PAUSED, snooze)
            detail = f"its firing regime began at {iso(since)}{f.began_with(revisions, since)}"
            raise Fail(Reason.BEFORE_ACTIVE, detail)
        later = f.regime_change(revisions, self.slot_at, self.where.record)
        if later is not None:
            detail = f"the schedule asked about began later: it was {later.said()}"
            raise Fail(Reason.BEFORE_ACTIVE, detail)
        if held := whypolicy.outside(rev.record, self.slot_at, self.facts.done_at):
            raise Fail(Reason.OUTSIDE_WINDOW, held)
        self.passed(f"active since {iso(since) if since else 'its creation'} (rev {rev.rev})")

    def enabled(self) -> None:
        if self.record.get("enabled", True) is False:
            pause = f.last_of(self.facts.revisions, self.slot_at, ("pause", "create"))
            who = pause.said() if pause else f"rev {self.rev.rev}"
            raise Fail(Reason.PAUSED, f"the trigger was paused: {who}")
        self.passed(f"enabled: {self.rev.said()}")

    # --- the device: responsible, up, applied, bridge ----------------------------------------

    def device(self) -> None:
        claim = self.facts.claim
        if claim is not None:
            self.responsible = claim.peer
            self.passed(f"claimed by {claim.peer} at term {claim.term}")
            return
        owner = self.record.get("owner") or ""
        if owner:
            self.responsible = str(owner)
            self.passed(f"pinned to {owner}")
            return
        held = f.holding(self.facts.terms, self.slot_at)
        if held is not None:
            self.responsible = held.holder
            self.passed(f"floating: {held.said()}")
            return
        bridge = f.next_term(self.facts.terms, self.slot_at, self.facts.bridge_seconds)
        if bridge is not None:
            self.responsible, self.bridged = bridge.holder, True
            self.passed(f"floating, nobody held the lease; then {bridge.said()}")
            return
        if self.facts.refusals:
            self.passed(f"floating: {self.facts.refusals[-1].peer} tried to claim it")
            return
        raise Fail(Reason.NO_DEVICE_UP, self._nobody())

    def _nobody(self) -> str:
        slot, beat = self.slot_at, self.facts.beat_seconds
        up = sorted({w.peer for w in self.facts.windows if f.covering([w], slot, beat)})
        before = [t for t in self.facts.terms if t.began <= slot]
        last = f"; the lease before it: {before[-1].said()}" if before else ""
        if not up:
            return f"no device was up at {iso(slot)}{last}{self._last_up()}"
        within = f"{self.facts.bridge_seconds:g} s"
        return (
            f"nobody held the lease at {iso(slot)} and nobody took it within {within} "
            f"(up: {', '.join(up)}){last}"
        )

    def _last_up(self) -> str:
        seen = [w for w in self.facts.windows if w.last_seen <= self.slot_at]
        if not seen:
            return ""
        w = max(seen, key=lambda x: x.last_seen)
        return f"; the last device up was {w.peer}, last seen {iso(w.last_seen)}"

    def up(self) -> None:
        slot, peer = self.slot_at, self.responsible
        tried = [r for r in self.facts.refusals if r.peer == peer]
        if tried:  # a refused claim proves its device was up and had the record
            at = tried[-1].at
            clock = whyclock.said(self.facts, tried[-1].peer, at)
            self.passed(f"{peer} was up: it claimed the slot at {iso(at)}{clock}")
            return
        if (c := self.facts.claim) is not None:
            self.passed("the claim says so" + whyclock.said(self.facts, c.peer, c.claimed_at))
            return
        if peer is None or self.bridged:
            self.passed("see the bridge")
            return
        if f.covering(self.facts.windows, slot, self.facts.beat_seconds, peer) is not None:
            self._subscribed(peer)
            self.passed(
                f"{peer} was up and awake at {iso(slot)}{whyclock.said(self.facts, peer, slot)}"
            )
            return
        self._asleep(peer)
        gone = self._gone(peer)
        if self.record.get("owner"):
            detail = f"it is pinned to {peer}, which was not up at {iso(slot)}{gone}"
            raise Fail(Reason.OWNER_OFFLINE, detail)
        bridge = f.next_term(self.facts.terms, slot, self.facts.bridge_seconds)
        if bridge is not None and bridge.holder != peer:
            self.responsible, self.bridged = bridge.holder, True
            self.passed(f"{peer} was down{gone}; then {bridge.said()}")
            return
        detail = f"the holder {peer} was not up at {iso(slot)}{gone}, and nobody took over"
        raise Fail(Reason.NO_DEVICE_UP, detail)

    def _subscribed(self, peer: str) -> None:
        """An event's device was up: was its stream of the chat live for the message?"""
        m = self.facts.message
        if m is None or f.streaming(self.facts.subscriptions, m.accepted, peer, BRIDGE_W):
            return
        mine = [s for s in self.facts.subscriptions if s.peer == peer]
        before = [s for s in mine if s.began <= m.accepted]
        after = [s for s in mine if s.began > m.accepted]
        was = (
            f"; its stream had ended {iso(before[-1].ended)}" if before and before[-1].ended else ""
        )
        then = f"; it subscribed again {iso(after[0].began)}" if after else ""
        detail = (
            f"{peer} was up, but its stream of the chat was not live when {m.message_id} was "
            f"accepted at {iso(m.accepted)}{was}{then}"
        )
        raise Fail(Reason.NO_SUBSCRIBER, detail)

    def _asleep(self, peer: str) -> None:
        woke = f.sleep_over(self.facts.windows, self.slot_at, peer)
        if woke is None or woke.slept is None:
            return
        went = woke.began - timedelta(seconds=woke.slept)
        detail = (
            f"{peer} was asleep from {iso(went)} to {iso(woke.began)} "
            f"(a suspend of {woke.slept:g} s it reported on waking)"
        )
        raise Fail(Reason.HOLDER_ASLEEP, detail)

    def _gone(self, peer: str) -> str:
        last = f.last_before(self.facts.windows, self.slot_at, peer)
        after = [w for w in self.facts.windows if w.peer == peer and w.began > self.slot_at]
        text = f" (last seen {iso(last.last_seen)}" if last else " (not seen before it"
        return text + (f", up again {iso(after[0].began)})" if after else ")")

    def applied(self) -> None:
        peer, rev = self.responsible, self.rev
        tried = any(r.peer == peer for r in self.facts.refusals)
        if self.facts.claim is not None or tried or peer is None or not f.regime(rev):
            self.passed("the claim says so" if self.facts.claim else "nothing to apply")
            return
        if self.bridged:
            self.passed("see the bridge")
            return
        had = f.applied_at(self.facts.applied, self.slot_at, peer)
        if had is None or had.seq >= rev.seq:
            self.passed(f"{peer} had rev {rev.rev}" if had else f"{peer} reports no position")
            return
        late = [a for a in self.facts.applied if a.peer == peer and a.seq >= rev.seq]
        limit = self.slot_at + timedelta(seconds=self.facts.beat_seconds)
        if late and late[0].at <= limit:  # reported by the heartbeat after: it may have had it
            self.passed(f"{peer} reported rev {rev.rev} applied at {iso(late[0].at)}")
            return
        when = f"; it applied it at {iso(late[0].at)}" if late else "; it never reported it"
        detail = (
            f"{peer} had applied the change feed to {had.seq} at {iso(self.slot_at)}, not yet "
            f"rev {rev.rev} (feed {rev.seq}: {rev.said()}){when}"
        )
        raise Fail(Reason.NOT_APPLIED, detail)

    def bridge(self) -> None:
        if not self.bridged or self.facts.claim is not None:
            self.passed("not needed" if not self.bridged else "the claim says so")
            return
        up = f.covering(self.facts.windows, self.slot_at, self.facts.beat_seconds)
        if up is None:
            detail = (
                f"the lease went to {self.responsible}, but no device was up at "
                f"{iso(self.slot_at)}: the bridge fires only what came while a live device "
                f"was up{self._last_up()}"
            )
            raise Fail(Reason.NO_DEVICE_UP, detail)
        self.passed(f"{up.peer} was up at {iso(self.slot_at)}: within the bridge")

    # --- claim, run ----------------------------------------------------------------------------

    def claim(self) -> None:
        c = self.facts.claim
        if c is not None:
            self.passed(f"claimed by {c.peer} at term {c.term} at {iso(c.claimed_at)}")
            return
        if self.facts.refusals:
            r = self.facts.refusals[-1]
            detail = f"{r.peer}'s claim at term {r.term} at {iso(r.at)} was refused: {r.detail}"
            clock = whyclock.said if r.code == "ahead_of_clock" else whyclock.skewed
            raise Fail(reason_of_code(r.code), detail + clock(self.facts, r.peer, r.at))
        run = self.facts.run
        if run is not None and run.get("reason"):
            detail = f"{run.get('peer')} did not claim it: {run.get('status')} ({run['reason']})"
            raise Fail(reason_of_run(str(run["reason"])), detail)
        due = self.slot_at + whypolicy.jitter(self.record, self.slot_at)
        until = due + timedelta(seconds=PENDING_SLACK)
        if self.facts.now <= until:
            detail = f"not claimed yet; it may be until {iso(until)}"
            raise Fail(Reason.CLAIMED_NOT_RUN, detail, Verdict.PENDING)
        who = self.responsible or "the device"
        detail = f"{who} was up, yet made no claim: its fire path did not reach the slot in time"
        raise Fail(Reason.HOLDER_ASLEEP, detail + whyclock.skewed(self.facts, who, self.slot_at))

    def ran(self) -> None:
        c = self.facts.claim
        assert c is not None
        if c.status is None:
            self._unfinished(c)
        elif c.status == RunStatus.OK:
            self._fired(c)
        elif c.status in FAILED:
            error = (self.facts.run or {}).get("error") or ""
            detail = f"run {c.run_id} on {c.peer} ended {c.status}" + (
                f": {error}" if error else ""
            )
            raise Fail(Reason.RUN_FAILED, detail + self._retried())
        else:
            detail = f"run {c.run_id} on {c.peer} was {c.status}: {c.reason}"
            if words := whypolicy.run_words(c.reason or "", self.record):
                detail += f": {words}"
            raise Fail(reason_of_run(c.reason or ""), detail)

    def _retried(self) -> str:
        """What became of the failed fire's retries, each by its key (`<key>#k`)."""
        said = []
        for key, r in self.facts.retries.items():
            ended = r.status or "claimed, no run recorded"
            said.append(f"{key} by {r.peer}: {ended}" + (f" ({r.reason})" if r.reason else ""))
        return "; retried as " + ", ".join(said) if said else ""

    def _unfinished(self, c: f.Claim) -> None:
        said = f"claimed by {c.peer} at term {c.term} at {iso(c.claimed_at)}"
        ends = c.claimed_at + timedelta(seconds=f.timeout_of(self.record) + RUN_MARGIN)
        if self.facts.now < ends:
            detail = f"{said}; its run has not ended yet"
            raise Fail(Reason.CLAIMED_NOT_RUN, detail, Verdict.PENDING)
        detail = f"{said}, and no run was ever recorded: {c.peer} stopped before its run ended"
        raise Fail(Reason.CLAIMED_NOT_RUN, detail)

    def _fired(self, c: f.Claim) -> None:
        late = c.late_ms or 0.0
        started = iso(c.started_at) if c.started_at else "?"
        detail = f"run {c.run_id} on {c.peer} at term {c.term}, started {started}"
        detail += f", {late:.0f} ms after its slot"
        phases = (self.facts.run or {}).get("phases")
        if isinstance(phases, dict) and phases:
            split = [
                f"{k.removesuffix('Ms')} {v:.0f} ms" for k, v in phases.items() if f.is_number(v)
            ]
            detail += " (" + ", ".join(split) + ")"
        if late > LATE_MS:
            detail += whyclock.skewed(self.facts, c.peer, c.claimed_at)
        self.passed(detail)
        self.outcome = (Reason.FIRED_LATE if late > LATE_MS else Reason.FIRED, detail)

    def run_doc(self) -> dict[str, Any] | None:
        """The run record of the slot, or what the claim ledger says of it."""
        c = self.facts.claim
        if self.facts.run is not None or c is None or c.run_id is None:
            return self.facts.run
        return {"runId": c.run_id, "peer": c.peer, "term": c.term, "status": c.status}
